"""Client configuration from Java-style properties (``bootstrap.servers``, ``sasl.jaas.config``...).

Layer: client.

Spark users already hold Kafka settings in the Java client's names (``kafka.security.protocol``
and friends in the JVM connector's options). ``ClientConfig.from_properties`` accepts those
names, so the same option map works for ``format("kafka")`` and for us; settings we do not
know are returned by ``unused_properties`` so that the caller can warn or fail.

Deliberate differences, each with an error that says what to do instead:

- TLS material must be PEM (``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``): Python's
  ``ssl`` cannot read JKS or PKCS12 stores. The Java client accepts PEM too.
- ``sasl.jaas.config`` is parsed for the PLAIN, SCRAM and OAUTHBEARER login modules'
  options; other login modules (Kerberos/GSSAPI) are not supported.
- OAUTHBEARER: a static token in ``sasl.oauthbearer.token`` (ours), or the Java client's
  unsecured development token (``unsecuredLoginStringClaim_sub`` in the JAAS options), which we
  build the same way: an unsigned JWT that only brokers configured for unsecured tokens accept.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_ds.net.pool import parse_bootstrap
from kafka_ds.net.security import ConnectionConfig, SaslConfig, SecurityProtocol, TlsConfig
from kafka_ds.protocol.errors import ConfigError

# Properties read by ClientConfig itself (anything else is left for producer/fetcher configs).
CLIENT_PROPERTIES = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "sasl.username", "sasl.password", "sasl.oauthbearer.token",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.keystore.password",
    "ssl.truststore.password", "ssl.endpoint.identification.algorithm",
    "request.timeout.ms", "socket.connection.setup.timeout.ms", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "metadata.max.age.ms", "retry.backoff.ms",
    "send.buffer.bytes", "receive.buffer.bytes",
})

SENSITIVE_PROPERTIES = frozenset({
    "sasl.jaas.config", "sasl.password", "sasl.oauthbearer.token", "ssl.key.password",
    "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
})


def redact(properties: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log: secret values replaced by ``[redacted]``."""
    return {key: "[redacted]" if key in SENSITIVE_PROPERTIES or "password" in key else value
            for key, value in properties.items()}


def parse_int(properties: Mapping[str, str], name: str, default: int, *,
              minimum: int | None = None) -> int:
    """Read an integer property, with an error naming it when it is not one."""
    raw = properties.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def parse_bool(properties: Mapping[str, str], name: str, default: bool) -> bool:
    """Read a boolean property (true/false, 1/0, yes/no), with an error naming it."""
    raw = properties.get(name)
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


_JAAS_MODULE = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$",
                          re.DOTALL)
_JAAS_OPTION = re.compile(r'([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``"<LoginModule> required k=\"v\" ...;"`` -> (login module class, options)."""
    match = _JAAS_MODULE.match(text)
    if match is None:
        raise ConfigError("sasl.jaas.config is not a JAAS entry of the form "
                          "'<LoginModule> required username=\"...\" password=\"...\";'")
    options = {}
    for key, quoted, bare in _JAAS_OPTION.findall(match.group(3)):
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return match.group(1), options


def unsecured_jwt(subject: str, lifetime_s: int = 3600) -> str:
    """The unsigned JWT the Java client's unsecured OAUTHBEARER login builds (dev/test only)."""
    def part(value: dict[str, object]) -> str:
        raw = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now_s = int(time.time())
    claims = {'iat': now_s, 'exp': now_s + lifetime_s, 'sub': subject}
    return f"{part({'alg': 'none'})}.{part(claims)}."


def _sasl_config(properties: Mapping[str, str], protocol: SecurityProtocol) -> SaslConfig | None:
    if not protocol.uses_sasl:
        return None
    mechanism = properties.get("sasl.mechanism", "GSSAPI").upper()
    username = properties.get("sasl.username")
    password = properties.get("sasl.password")
    token = properties.get("sasl.oauthbearer.token")
    jaas = properties.get("sasl.jaas.config")
    if jaas:
        module, options = parse_jaas(jaas)
        username = options.get("username", username)
        password = options.get("password", password)
        if mechanism == "OAUTHBEARER" and token is None:
            subject = options.get("unsecuredLoginStringClaim_sub")
            if subject:
                token = unsecured_jwt(subject)
        if "Krb5LoginModule" in module:
            raise ConfigError("Kerberos (GSSAPI) is not supported by kafka_ds; use SASL PLAIN, "
                              "SCRAM-SHA-256/512 or OAUTHBEARER")
    if mechanism == "GSSAPI":
        raise ConfigError("sasl.mechanism is GSSAPI (the Kafka default) but kafka_ds does not "
                          "support Kerberos: set sasl.mechanism to PLAIN, SCRAM-SHA-256, "
                          "SCRAM-SHA-512 or OAUTHBEARER")
    sasl = SaslConfig(mechanism=mechanism, username=username, password=password,
                      oauth_token=token)
    sasl.validate()
    return sasl


def _pem_setting(properties: Mapping[str, str], store: str) -> None:
    store_type = properties.get(f"ssl.{store}.type")
    location = properties.get(f"ssl.{store}.location")
    if location and store_type is not None and store_type.upper() != "PEM":
        raise ConfigError(
            f"ssl.{store}.type={store_type} is not supported: kafka_ds reads PEM files only. "
            f"Convert the {store} to PEM (e.g. `openssl pkcs12 -in store.p12 -out store.pem`) "
            f"and set ssl.{store}.type=PEM")


def _tls_config(properties: Mapping[str, str], protocol: SecurityProtocol) -> TlsConfig | None:
    if not protocol.uses_tls:
        return None
    _pem_setting(properties, "truststore")
    _pem_setting(properties, "keystore")
    if properties.get("ssl.keystore.key") or properties.get("ssl.keystore.certificate.chain"):
        raise ConfigError("inline ssl.keystore.key / ssl.keystore.certificate.chain are not "
                          "supported; put the key and certificate in a PEM file and set "
                          "ssl.keystore.location (and ssl.key.password if the key is encrypted)")
    algorithm = properties.get("ssl.endpoint.identification.algorithm", "https")
    return TlsConfig(
        ca_file=properties.get("ssl.truststore.location"),
        ca_pem=properties.get("ssl.truststore.certificates"),
        cert_file=properties.get("ssl.keystore.location"),
        key_file=properties.get("ssl.keystore.location"),
        key_password=properties.get("ssl.key.password"),
        check_hostname=algorithm.strip().lower() == "https",
    )


@dataclass(frozen=True)
class ClientConfig:
    """Where the cluster is and how to talk to it. Picklable; secrets hidden from ``repr``."""

    bootstrap_servers: str
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientConfig:
        """Build from Java-style property names; raises ``ConfigError`` naming the property."""
        bootstrap = properties.get("bootstrap.servers")
        if not bootstrap:
            raise ConfigError("bootstrap.servers is required (the Spark option "
                              "kafka.bootstrap.servers), e.g. 'broker1:9092,broker2:9092'")
        parse_bootstrap(bootstrap)
        protocol_name = properties.get("security.protocol", "PLAINTEXT").upper()
        try:
            protocol = SecurityProtocol(protocol_name)
        except ValueError:
            raise ConfigError(
                f"security.protocol={protocol_name!r} is not one of "
                f"{', '.join(p.value for p in SecurityProtocol)}") from None
        send_buffer_bytes = parse_int(properties, "send.buffer.bytes", -1)
        receive_buffer_bytes = parse_int(properties, "receive.buffer.bytes", -1)
        connection = ConnectionConfig(
            client_id=properties.get("client.id", "kafka-ds"),
            security_protocol=protocol,
            tls=_tls_config(properties, protocol),
            sasl=_sasl_config(properties, protocol),
            connect_timeout_ms=parse_int(properties, "socket.connection.setup.timeout.ms",
                                         10_000, minimum=1),
            request_timeout_ms=parse_int(properties, "request.timeout.ms", 30_000, minimum=1),
            reconnect_backoff_ms=parse_int(properties, "reconnect.backoff.ms", 50, minimum=0),
            reconnect_backoff_max_ms=parse_int(properties, "reconnect.backoff.max.ms", 1_000,
                                               minimum=0),
            # -1 (the default here) leaves the OS default and its autotuning, which on
            # loopback and fast links beats the Java client's fixed 32-128 KiB.
            send_buffer_bytes=send_buffer_bytes if send_buffer_bytes > 0 else None,
            receive_buffer_bytes=receive_buffer_bytes if receive_buffer_bytes > 0 else None,
        )
        connection.validate()
        return cls(
            bootstrap_servers=bootstrap,
            connection=connection,
            metadata_max_age_ms=parse_int(properties, "metadata.max.age.ms", 300_000, minimum=0),
            retry_backoff_ms=parse_int(properties, "retry.backoff.ms", 100, minimum=0),
        )

    @staticmethod
    def unused_properties(properties: Mapping[str, str], *also_known: frozenset[str]) -> list[str]:
        known = CLIENT_PROPERTIES.union(*also_known)
        return sorted(key for key in properties if key not in known)
