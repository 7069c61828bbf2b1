"""Client configuration from Java-style properties (``bootstrap.servers``, ``sasl.jaas.config``...).

Layer: client.

Spark users already hold Kafka settings in the Java client's names (``kafka.security.protocol``
and friends in the JVM connector's options). ``ClientConfig.from_properties`` accepts those
names, so the same option map works for ``format("kafka")`` and for us; settings we do not
know are returned by ``unused_properties`` so that the caller can warn or fail.

Deliberate differences, each with an error that says what to do instead:

- TLS stores are PKCS12, JKS (with the ``jks`` extra) or PEM, as files or PEM text in the
  options (``net.keystores``); they are read when the config is built, so that a wrong path,
  type or password fails at once, naming the option.
- ``sasl.jaas.config`` is parsed for the PLAIN, SCRAM, OAUTHBEARER and Kerberos
  (``Krb5LoginModule``: ``useKeyTab``/``keyTab``/``principal`` or ``useTicketCache``) login
  modules' options; GSSAPI needs the ``kerberos`` extra (``net.kerberos``).
- OAUTHBEARER tokens come from a source asked at every (re-)authentication (``net.oauth``): a
  token file named the Java way (``sasl.oauthbearer.token.endpoint.url=file:/path``; HTTP
  identity providers are not called), a function (``sasl.oauthbearer.token.provider``, ours), a
  static ``sasl.oauthbearer.token`` (ours), or the Java client's unsecured development token
  (``unsecuredLoginStringClaim_sub`` in the JAAS options), minted afresh each time.
- ``ssl.endpoint.identification.algorithm`` is ``https`` (the default) or empty (hostname
  checks off); anything else is an error, because a typo must not switch the check off.

Settings that cannot take effect are reported, not silently dropped: ``ssl.*`` without TLS and
``sasl.*`` without SASL in ``security.protocol``, and PLAIN passwords sent over plaintext.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_ds.net.kerberos import KerberosConfig
from kafka_ds.net.oauth import TokenCallable, TokenFile, TokenSource, UnsecuredJws
from kafka_ds.net.pool import parse_bootstrap
from kafka_ds.net.security import ConnectionConfig, SaslConfig, SecurityProtocol, TlsConfig
from kafka_ds.protocol.errors import ConfigError

log = logging.getLogger(__name__)

# Properties read by ClientConfig itself (anything else is left for producer/fetcher configs).
CLIENT_PROPERTIES = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "sasl.username", "sasl.password", "sasl.oauthbearer.token",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.token.provider",
    "sasl.login.callback.handler.class", "sasl.kerberos.service.name",
    # Java's Kerberos re-login tuning: MIT Kerberos renews keytab logins by itself.
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
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
    "ssl.truststore.certificates", "ssl.keystore.certificate.chain",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
})
# Name fragments that mark a secret in properties we do not list (newer Java names, vendor
# extensions such as basic.auth.user.info): better to hide a harmless value than show a secret.
_SENSITIVE_FRAGMENTS = ("password", "secret", "passphrase", "token", "jaas", "credentials",
                        "user.info", "private.key")
# ... except these, which name where a secret lives rather than hold it.
_NOT_SENSITIVE = frozenset({"sasl.oauthbearer.token.endpoint.url",
                            "sasl.oauthbearer.token.provider",
                            "sasl.oauthbearer.assertion.private.key.file"})


def is_sensitive(name: str) -> bool:
    """True for a property whose value must never be logged, shown in an error or a plan."""
    key = name.strip().lower()
    if key in _NOT_SENSITIVE:
        return False
    return key in SENSITIVE_PROPERTIES or any(part in key for part in _SENSITIVE_FRAGMENTS)


def redact(properties: Mapping[str, object]) -> dict[str, object]:
    """A copy safe to log: secret values replaced by ``[redacted]``."""
    return {key: "[redacted]" if is_sensitive(key) else value
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
    return UnsecuredJws(subject, lifetime_s).token()


def _token_source(properties: Mapping[str, str],
                  jaas_options: Mapping[str, str]) -> TokenSource | None:
    """The OAUTHBEARER token source the properties name, or None for a static token."""
    url = properties.get("sasl.oauthbearer.token.endpoint.url")
    provider = properties.get("sasl.oauthbearer.token.provider")
    chosen = [name for name, value in (("sasl.oauthbearer.token.endpoint.url", url),
                                       ("sasl.oauthbearer.token.provider", provider),
                                       ("sasl.oauthbearer.token",
                                        properties.get("sasl.oauthbearer.token")))
              if value]
    if len(chosen) > 1:
        raise ConfigError(f"{' and '.join(chosen)} both name the OAUTHBEARER token; keep one")
    if url:
        source: TokenSource = TokenFile.from_url(url)
        try:
            source.token()  # readable and well-formed now, or fail before any I/O
        except Exception as exc:
            raise ConfigError(str(exc)) from None
        return source
    if provider:
        return TokenCallable(provider)
    subject = jaas_options.get("unsecuredLoginStringClaim_sub")
    if subject and not chosen:
        lifetime_s = jaas_options.get("unsecuredLoginLifetimeSeconds", "3600")
        if not lifetime_s.isdigit() or int(lifetime_s) <= 0:
            raise ConfigError("unsecuredLoginLifetimeSeconds in sasl.jaas.config must be a "
                              f"positive number of seconds, got {lifetime_s!r}")
        return UnsecuredJws(subject, int(lifetime_s))
    return None


def _sasl_config(properties: Mapping[str, str], protocol: SecurityProtocol) -> SaslConfig | None:
    if not protocol.uses_sasl:
        return None
    mechanism = properties.get("sasl.mechanism", "GSSAPI").upper()
    username = properties.get("sasl.username")
    password = properties.get("sasl.password")
    token = properties.get("sasl.oauthbearer.token")
    jaas = properties.get("sasl.jaas.config")
    options: dict[str, str] = {}
    module = ""
    if jaas:
        module, options = parse_jaas(jaas)
        username = options.get("username", username)
        password = options.get("password", password)
    kerberos_module = module.endswith("Krb5LoginModule")
    if kerberos_module != (mechanism == "GSSAPI"):
        raise ConfigError(
            f"sasl.mechanism={mechanism} with a {module.rsplit('.', 1)[-1] or 'missing'} "
            "sasl.jaas.config: GSSAPI (the Kafka default mechanism) goes with "
            "com.sun.security.auth.module.Krb5LoginModule, the others with their own login "
            "modules; set sasl.mechanism or sasl.jaas.config to match")
    kerberos = None
    if mechanism == "GSSAPI":
        kerberos = KerberosConfig.from_jaas(properties.get("sasl.kerberos.service.name"),
                                            options)
    handler = properties.get("sasl.login.callback.handler.class")
    if handler and not handler.strip().endswith(".OAuthBearerLoginCallbackHandler"):
        raise ConfigError(
            f"sasl.login.callback.handler.class={handler!r}: Java callback handlers cannot run "
            "in kafka_ds; give a Python function as sasl.oauthbearer.token.provider instead")
    source = _token_source(properties, options) if mechanism == "OAUTHBEARER" else None
    if mechanism == "PLAIN" and protocol is SecurityProtocol.SASL_PLAINTEXT:
        log.warning("sasl.mechanism=PLAIN over security.protocol=SASL_PLAINTEXT sends the "
                    "password unencrypted; use SASL_SSL, or SCRAM-SHA-256/512 which never "
                    "sends it")
    sasl = SaslConfig(mechanism=mechanism, username=username, password=password,
                      oauth_token=token, oauth_token_source=source, kerberos=kerberos)
    sasl.validate()
    return sasl


def _tls_config(properties: Mapping[str, str], protocol: SecurityProtocol) -> TlsConfig | None:
    if not protocol.uses_tls:
        return None
    algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").strip()
    # As in Java: only an empty value turns hostname verification off. "none" (librdkafka's
    # spelling), "http" or a typo must not silently do the same.
    if algorithm and algorithm.lower() != "https":
        raise ConfigError(
            f"ssl.endpoint.identification.algorithm={algorithm!r} is not supported: use "
            "'https' (the default: the broker certificate must name the host dialled) or an "
            "empty string to turn hostname verification off")
    tls = TlsConfig(
        truststore_location=properties.get("ssl.truststore.location") or None,
        truststore_type=properties.get("ssl.truststore.type") or None,
        truststore_password=properties.get("ssl.truststore.password"),
        truststore_certificates=properties.get("ssl.truststore.certificates") or None,
        keystore_location=properties.get("ssl.keystore.location") or None,
        keystore_type=properties.get("ssl.keystore.type") or None,
        keystore_password=properties.get("ssl.keystore.password"),
        keystore_certificate_chain=properties.get("ssl.keystore.certificate.chain") or None,
        keystore_key=properties.get("ssl.keystore.key") or None,
        key_password=properties.get("ssl.key.password"),
        check_hostname=bool(algorithm),
    )
    # Read the stores now: a wrong path, type or password fails at query start on the driver,
    # naming the option, rather than in every task's first connection.
    tls.build_context()
    return tls


def _warn_unused_security(properties: Mapping[str, str], protocol: SecurityProtocol) -> None:
    """Warn about ``ssl.*``/``sasl.*`` settings that ``security.protocol`` leaves unused."""
    for prefix, used, kind in (("ssl.", protocol.uses_tls, "TLS"),
                               ("sasl.", protocol.uses_sasl, "SASL")):
        ignored = sorted(key for key in properties if key.startswith(prefix))
        if ignored and not used:
            log.warning("security.protocol=%s does not use %s, so these settings have no "
                        "effect: %s. Did you mean security.protocol=%s?", protocol.value, kind,
                        ", ".join(ignored), _with(protocol, kind))


def _with(protocol: SecurityProtocol, kind: str) -> str:
    tls = protocol.uses_tls or kind == "TLS"
    sasl = protocol.uses_sasl or kind == "SASL"
    return {(False, False): "PLAINTEXT", (True, False): "SSL", (False, True): "SASL_PLAINTEXT",
            (True, True): "SASL_SSL"}[(tls, sasl)]


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
        log.debug("client properties: %s", redact(properties))
        _warn_unused_security(properties, protocol)
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
