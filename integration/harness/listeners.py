"""Listener layout, test users and client configurations of a harness cluster.

Every node exposes one listener per way a client can authenticate, so one broker covers
every security path (listener name -> security protocol):

    PLAINTEXT   PLAINTEXT        no auth; also the inter-broker listener
    SASL_PLAIN  SASL_PLAINTEXT   SASL/PLAIN, users in PLAIN_USERS
    SASL_SCRAM  SASL_PLAINTEXT   SCRAM-SHA-256 and SCRAM-SHA-512, users in SCRAM_USERS
    SASL_OAUTH  SASL_PLAINTEXT   OAUTHBEARER, Kafka's default *unsecured* JWS validator:
                                 any unsigned token (alg "none") with sub + exp passes
    SASL_REAUTH SASL_PLAINTEXT   PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER as above, with
                                 connections.max.reauth.ms=REAUTH_MS: sessions last 10 s
                                 (less if the token expires sooner), so clients must
                                 re-authenticate (KIP-368) or be disconnected
    SSL         SSL              server-auth TLS (ssl.client.auth=none)
    SASL_SSL    SASL_SSL         SCRAM-SHA-256 and SCRAM-SHA-512 (the SASL_SCRAM users) over
                                 server-auth TLS (the SSL listener's certificate)
    MTLS        SSL              mutual TLS (ssl.client.auth=required)
    SASL_GSSAPI SASL_PLAINTEXT   Kerberos (GSSAPI) against the cluster's own MIT KDC
                                 (``kdc.py``), broker principal kafka/127.0.0.1; only on
                                 clusters started with ``kerberos=True`` where a KDC can run
    CONTROLLER  PLAINTEXT        KRaft quorum only; not for clients

``client_config`` returns neutral facts (one dict, keys below); ``to_librdkafka``,
``to_java`` and ``to_kafka_python`` turn them into each client's own property names.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from . import kdc as kerberos
from .tls import TlsMaterial

CLIENT_LISTENERS = ("PLAINTEXT", "SASL_PLAIN", "SASL_SCRAM", "SASL_OAUTH", "SASL_REAUTH", "SSL",
                    "MTLS", "SASL_SSL")
ALL_LISTENERS = (*CLIENT_LISTENERS, "CONTROLLER")
GSSAPI_LISTENER = "SASL_GSSAPI"
SECURITY_PROTOCOL = {
    "PLAINTEXT": "PLAINTEXT", "SASL_PLAIN": "SASL_PLAINTEXT", "SASL_SCRAM": "SASL_PLAINTEXT",
    "SASL_OAUTH": "SASL_PLAINTEXT", "SASL_REAUTH": "SASL_PLAINTEXT", "SSL": "SSL",
    "MTLS": "SSL", "SASL_SSL": "SASL_SSL", "CONTROLLER": "PLAINTEXT",
    GSSAPI_LISTENER: "SASL_PLAINTEXT",
}


def client_listeners(with_kerberos: bool) -> tuple[str, ...]:
    """The client listeners of a cluster (SASL_GSSAPI only where it has a KDC)."""
    return (*CLIENT_LISTENERS, GSSAPI_LISTENER) if with_kerberos else CLIENT_LISTENERS


def all_listeners(with_kerberos: bool) -> tuple[str, ...]:
    return (*client_listeners(with_kerberos), "CONTROLLER")
# Session lifetime on SASL_REAUTH: short enough that a one-minute test sees several
# re-authentications per connection.
REAUTH_MS = 10_000
PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
# One user per SCRAM mechanism, so a client that picks the wrong mechanism fails loudly.
SCRAM_USERS = {"SCRAM-SHA-256": ("scram256", "scram256-secret"),
               "SCRAM-SHA-512": ("scram512", "scram512-secret")}
OAUTH_PRINCIPAL = "oauth-user"
_JAAS = "org.apache.kafka.common.security"


def broker_listener_properties(ports: dict[str, int], tls: TlsMaterial,
                               kdc: kerberos.Kdc | None = None) -> dict[str, str]:
    """server.properties entries for the listeners of one node (ports by listener name)."""
    names = all_listeners(kdc is not None)
    props = {
        "listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in names),
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}"
                                         for n in client_listeners(kdc is not None)),
        "listener.security.protocol.map": ",".join(f"{n}:{SECURITY_PROTOCOL[n]}"
                                                   for n in names),
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        # SASL/PLAIN: users are declared in the broker's JAAS entry.
        "listener.name.sasl_plain.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plain.plain.sasl.jaas.config":
            f"{_JAAS}.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";",
        # SCRAM: credentials live in the cluster metadata (added at format time).
        "listener.name.sasl_scram.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_scram.scram-sha-256.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        "listener.name.sasl_scram.scram-sha-512.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        # SASL_SSL: the same SCRAM users, over TLS with the keystore below.
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        # OAUTHBEARER with no server callback handler configured = unsecured JWS validator.
        "listener.name.sasl_oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_oauth.oauthbearer.sasl.jaas.config":
            f"{_JAAS}.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{OAUTH_PRINCIPAL}";',
        # SASL_REAUTH: every mechanism above, and sessions that end after REAUTH_MS.
        "listener.name.sasl_reauth.sasl.enabled.mechanisms":
            "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_reauth.plain.sasl.jaas.config":
            f"{_JAAS}.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";",
        "listener.name.sasl_reauth.scram-sha-256.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        "listener.name.sasl_reauth.scram-sha-512.sasl.jaas.config":
            f"{_JAAS}.scram.ScramLoginModule required;",
        "listener.name.sasl_reauth.oauthbearer.sasl.jaas.config":
            f"{_JAAS}.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{OAUTH_PRINCIPAL}";',
        "listener.name.sasl_reauth.connections.max.reauth.ms": str(REAUTH_MS),
        # TLS: one keystore for the three TLS listeners; only MTLS demands a client
        # certificate (SASL_SSL clients prove who they are with SCRAM).
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.broker_keystore_p12),
        "ssl.keystore.password": tls.password,
        "ssl.key.password": tls.password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(tls.broker_truststore_p12),
        "ssl.truststore.password": tls.password,
        "listener.name.ssl.ssl.client.auth": "none",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.client.auth": "none",
    }
    if kdc is not None:
        # The broker logs in from its keytab at start-up (the JVM finds the KDC through
        # -Djava.security.krb5.conf, set by the cluster).
        props.update({
            "sasl.kerberos.service.name": kerberos.SERVICE_NAME,
            "listener.name.sasl_gssapi.sasl.enabled.mechanisms": "GSSAPI",
            "listener.name.sasl_gssapi.gssapi.sasl.jaas.config":
                kerberos.jaas(kerberos.BROKER_PRINCIPAL, kdc.broker_keytab),
        })
    return props


def scram_format_args() -> list[str]:
    """``kafka-storage format`` arguments that create the SCRAM users."""
    args = []
    for mechanism, (user, password) in SCRAM_USERS.items():
        args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    return args


def unsecured_jwt(principal: str = OAUTH_PRINCIPAL, lifetime_s: int = 24 * 3600) -> str:
    """An unsigned OAUTHBEARER token (``alg: none``) that the unsecured validator accepts."""

    def b64(obj: dict[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now_s = int(time.time())
    claims = {"sub": principal, "iat": now_s, "exp": now_s + lifetime_s}
    return f"{b64({'alg': 'none'})}.{b64(claims)}."  # empty signature


def client_config(listener: str, bootstrap_servers: str, tls: TlsMaterial, *,
                  mechanism: str | None = None, username: str | None = None,
                  password: str | None = None, kdc: kerberos.Kdc | None = None
                  ) -> dict[str, Any]:
    """Neutral description of how to connect to ``listener``.

    Keys (present only when they apply): listener, bootstrap_servers, security_protocol,
    sasl_mechanism, sasl_username, sasl_password, oauth_token (an unsigned JWT),
    ssl_cafile, ssl_certfile, ssl_keyfile (PEM), ssl_keystore_pem (certificate + key in one
    PEM file), ssl_keystore_p12 + ssl_keystore_password (the client cert for JVM clients),
    ssl_truststore_p12 + ssl_truststore_password,
    ssl_check_hostname (True: the broker cert's SAN matches 127.0.0.1 and localhost),
    ssl_hostname (the name to verify: the bootstrap host, 127.0.0.1),
    kerberos_principal, kerberos_keytab, kerberos_service_name, krb5_conf (SASL_GSSAPI).
    ``mechanism`` picks SCRAM-SHA-256 (default) or SCRAM-SHA-512 on SASL_SCRAM and SASL_SSL
    (whose config is SASL_SCRAM's plus SSL's TLS keys), and any of
    PLAIN, SCRAM-SHA-256 (default), SCRAM-SHA-512 and OAUTHBEARER on SASL_REAUTH;
    ``username``/``password`` override the built-in user (e.g. a wrong password).
    """
    listener = listener.upper()
    if listener not in client_listeners(kdc is not None):
        raise ValueError(f"unknown listener {listener!r}; choose one of "
                         f"{client_listeners(kdc is not None)}")
    cfg: dict[str, Any] = {"listener": listener, "bootstrap_servers": bootstrap_servers,
                           "security_protocol": SECURITY_PROTOCOL[listener]}
    if listener == "SASL_REAUTH":
        listener = {"PLAIN": "SASL_PLAIN", "OAUTHBEARER": "SASL_OAUTH"}.get(
            mechanism or "", "SASL_SCRAM")
        cfg = client_config(listener, bootstrap_servers, tls, mechanism=mechanism,
                            username=username, password=password)
        cfg["listener"] = "SASL_REAUTH"
        return cfg
    if listener == "SASL_SSL":
        scram = client_config("SASL_SCRAM", bootstrap_servers, tls, mechanism=mechanism,
                              username=username, password=password)
        server_tls = client_config("SSL", bootstrap_servers, tls)
        return {**server_tls, **scram, "listener": listener,
                "security_protocol": SECURITY_PROTOCOL[listener]}
    if listener == "SASL_PLAIN":
        if mechanism not in (None, "PLAIN"):
            raise ValueError("SASL_PLAIN only speaks PLAIN")
        user = username or "alice"
        cfg.update(sasl_mechanism="PLAIN", sasl_username=user,
                   sasl_password=password if password is not None else PLAIN_USERS.get(user))
    elif listener == "SASL_SCRAM":
        mechanism = mechanism or "SCRAM-SHA-256"
        if mechanism not in SCRAM_USERS:
            raise ValueError(f"SASL_SCRAM mechanisms: {sorted(SCRAM_USERS)}")
        default_user, default_password = SCRAM_USERS[mechanism]
        cfg.update(sasl_mechanism=mechanism, sasl_username=username or default_user,
                   sasl_password=password if password is not None else default_password)
    elif listener == "SASL_OAUTH":
        cfg.update(sasl_mechanism="OAUTHBEARER",
                   oauth_token=unsecured_jwt(username or OAUTH_PRINCIPAL),
                   sasl_username=username or OAUTH_PRINCIPAL)
    elif listener == GSSAPI_LISTENER:
        assert kdc is not None
        cfg.update(sasl_mechanism="GSSAPI",
                   kerberos_principal=username or kerberos.CLIENT_PRINCIPAL,
                   kerberos_keytab=str(kdc.client_keytab),
                   kerberos_service_name=kerberos.SERVICE_NAME, krb5_conf=str(kdc.krb5_conf))
    elif listener in ("SSL", "MTLS"):
        cfg.update(ssl_cafile=str(tls.ca_pem), ssl_check_hostname=True,
                   ssl_hostname=bootstrap_servers.split(",")[0].rsplit(":", 1)[0],
                   ssl_truststore_p12=str(tls.broker_truststore_p12),
                   ssl_truststore_password=tls.password)
        if listener == "MTLS":
            cfg.update(ssl_certfile=str(tls.client_cert_pem), ssl_keyfile=str(tls.client_key_pem),
                       ssl_keystore_pem=str(tls.client_combined_pem),
                       ssl_keystore_p12=str(tls.client_keystore_p12),
                       ssl_keystore_password=tls.password)
    return cfg


def to_librdkafka(cfg: dict[str, Any]) -> dict[str, Any]:
    """confluent-kafka / librdkafka properties for a ``client_config`` dict."""
    out: dict[str, Any] = {"bootstrap.servers": cfg["bootstrap_servers"],
                           "security.protocol": cfg["security_protocol"]}
    mech = cfg.get("sasl_mechanism")
    if mech == "OAUTHBEARER":
        # librdkafka builds an equivalent unsigned token itself from this.
        out.update({"sasl.mechanism": mech, "enable.sasl.oauthbearer.unsecure.jwt": True,
                    "sasl.oauthbearer.config": f"principal={cfg['sasl_username']}"})
    elif mech:
        out.update({"sasl.mechanism": mech, "sasl.username": cfg["sasl_username"],
                    "sasl.password": cfg["sasl_password"]})
    if "ssl_cafile" in cfg:
        out.update({"ssl.ca.location": cfg["ssl_cafile"],
                    "ssl.endpoint.identification.algorithm":
                        "https" if cfg["ssl_check_hostname"] else "none"})
    if "ssl_certfile" in cfg:
        out.update({"ssl.certificate.location": cfg["ssl_certfile"],
                    "ssl.key.location": cfg["ssl_keyfile"]})
    return out


def to_java(cfg: dict[str, Any]) -> dict[str, str]:
    """Java client properties (prefix with ``kafka.`` for Spark's connector options)."""
    out = {"bootstrap.servers": cfg["bootstrap_servers"],
           "security.protocol": cfg["security_protocol"]}
    mech = cfg.get("sasl_mechanism")
    if mech == "PLAIN":
        jaas = (f'{_JAAS}.plain.PlainLoginModule required username="{cfg["sasl_username"]}" '
                f'password="{cfg["sasl_password"]}";')
    elif mech and mech.startswith("SCRAM"):
        jaas = (f'{_JAAS}.scram.ScramLoginModule required username="{cfg["sasl_username"]}" '
                f'password="{cfg["sasl_password"]}";')
    elif mech == "OAUTHBEARER":
        # The Java client's default login handler mints an unsecured token from this.
        jaas = (f"{_JAAS}.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{cfg["sasl_username"]}";')
    elif mech == "GSSAPI":  # the JVM also needs -Djava.security.krb5.conf=cfg["krb5_conf"]
        jaas = kerberos.jaas(cfg["kerberos_principal"], cfg["kerberos_keytab"])
        out["sasl.kerberos.service.name"] = cfg["kerberos_service_name"]
    if mech:
        out.update({"sasl.mechanism": mech, "sasl.jaas.config": jaas})
    if "ssl_cafile" in cfg:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": cfg["ssl_cafile"],
                    "ssl.endpoint.identification.algorithm":
                        "https" if cfg["ssl_check_hostname"] else ""})
    if "ssl_keystore_p12" in cfg:
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location":
                    cfg["ssl_keystore_p12"], "ssl.keystore.password":
                    cfg["ssl_keystore_password"], "ssl.key.password":
                    cfg["ssl_keystore_password"]})
    return out


def to_kafka_python(cfg: dict[str, Any]) -> dict[str, Any]:
    """kafka-python keyword arguments for a ``client_config`` dict."""
    out: dict[str, Any] = {"bootstrap_servers": cfg["bootstrap_servers"],
                           "security_protocol": cfg["security_protocol"]}
    mech = cfg.get("sasl_mechanism")
    if mech == "OAUTHBEARER":
        token = cfg["oauth_token"]
        try:  # kafka-python >= 3 moved the base class; it checks isinstance
            from kafka.net.sasl.oauth import AbstractTokenProvider
        except ImportError:
            from kafka.sasl.oauth import AbstractTokenProvider

        class _StaticToken(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return str(token)

        out.update(sasl_mechanism=mech, sasl_oauth_token_provider=_StaticToken())
    elif mech:
        out.update(sasl_mechanism=mech, sasl_plain_username=cfg["sasl_username"],
                   sasl_plain_password=cfg["sasl_password"])
    if "ssl_cafile" in cfg:
        out.update(ssl_cafile=cfg["ssl_cafile"], ssl_check_hostname=cfg["ssl_check_hostname"])
    if "ssl_certfile" in cfg:
        out.update(ssl_certfile=cfg["ssl_certfile"], ssl_keyfile=cfg["ssl_keyfile"])
    return out
