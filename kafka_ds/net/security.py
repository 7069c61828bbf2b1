"""Security settings for a broker connection: the protocol, TLS and SASL.

Layer: net (stdlib ``ssl``; SASL message logic lives in ``protocol.sasl``).

The option names follow the Java client's (``security.protocol``, ``sasl.mechanism``,
``ssl.truststore.location`` ...) so that ``client.config`` can map a Spark user's ``kafka.*``
options one to one. Certificates are PEM: Python's ``ssl`` cannot read JKS stores, and Kafka's
Java client accepts PEM too (``ssl.truststore.type=PEM``), so a PEM setup works for both.

Passwords and tokens are kept out of ``repr`` so that a config printed in a log, an exception
or a Spark plan never shows them.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from enum import StrEnum

from kafka_ds.net.oauth import StaticToken, TokenSource
from kafka_ds.protocol.errors import ConfigError
from kafka_ds.protocol.sasl import OAuthBearer, Plain, SaslMechanism, Scram


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True)
class TlsConfig:
    """How to verify the broker and, for mutual TLS, who we are.

    ``ca_file``/``ca_pem``: trusted CA certificates (PEM); neither means the system store.
    ``cert_file`` + ``key_file`` (or a ``cert_file`` holding both): our client certificate.
    ``check_hostname``: verify that the broker certificate names the host we dialled. On by
    default, as in the Java client (``ssl.endpoint.identification.algorithm=https``); turning it
    off is an explicit choice (empty endpoint identification algorithm).
    """

    ca_file: str | None = None
    ca_pem: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify_certificates: bool = True

    def build_context(self) -> ssl.SSLContext:
        # An empty client context, not ssl.create_default_context(): that one loads the ~145
        # system roots first, and a configured CA would only be added to them. Like the Java
        # client, trust exactly the configured CA when there is one (a private-CA cluster must
        # not accept any publicly trusted certificate for its name), the system store if not.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + hostname checks
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if self.ca_file or self.ca_pem:
                context.load_verify_locations(cafile=self.ca_file, cadata=self.ca_pem)
            elif self.verify_certificates:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file, password=self.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load TLS files (CA {self.ca_file or '<inline>'}, certificate "
                f"{self.cert_file}, key {self.key_file}): {exc}. Check ssl.truststore.location "
                "and ssl.keystore.location point to readable PEM files") from exc
        context.check_hostname = self.check_hostname and self.verify_certificates
        if not self.verify_certificates:
            context.verify_mode = ssl.CERT_NONE
        return context


@dataclass(frozen=True)
class SaslConfig:
    """SASL credentials: PLAIN and SCRAM use username/password, OAUTHBEARER a token source.

    ``oauth_token`` is a fixed token; ``oauth_token_source`` (see ``net.oauth``) is asked for
    the current one at every authentication and re-authentication, and wins when both are set.
    """

    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    oauth_token: str | None = field(default=None, repr=False)
    oauth_extensions: tuple[tuple[str, str], ...] = ()
    oauth_token_source: TokenSource | None = None

    SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

    def validate(self) -> None:
        if self.mechanism not in self.SUPPORTED:
            raise ConfigError(f"sasl.mechanism={self.mechanism!r} is not supported; use one of "
                              f"{', '.join(self.SUPPORTED)}")
        if self.mechanism == "OAUTHBEARER":
            if not self.oauth_token and self.oauth_token_source is None:
                raise ConfigError(
                    "sasl.mechanism=OAUTHBEARER needs a token: sasl.oauthbearer.token, a token "
                    "file (sasl.oauthbearer.token.endpoint.url=file:/path), a function "
                    "(sasl.oauthbearer.token.provider), or the unsecured JAAS login options")
        elif self.username is None or self.password is None:
            raise ConfigError(f"sasl.mechanism={self.mechanism} needs a username and password "
                              "(sasl.jaas.config or sasl.username/sasl.password)")

    def current_token(self) -> str:
        """The OAUTHBEARER token to send now (asks the source, which may re-read a file)."""
        if self.oauth_token_source is not None:
            return self.oauth_token_source.token()
        assert self.oauth_token is not None
        return StaticToken(self.oauth_token).token()

    def new_mechanism(self) -> SaslMechanism:
        """A fresh conversation (each authentication and re-authentication starts anew)."""
        self.validate()
        if self.mechanism == "PLAIN":
            assert self.username is not None and self.password is not None
            return Plain(self.username, self.password)
        if self.mechanism == "OAUTHBEARER":
            return OAuthBearer(self.current_token(), dict(self.oauth_extensions))
        assert self.username is not None and self.password is not None
        return Scram(self.mechanism, self.username, self.password)


@dataclass(frozen=True)
class ConnectionConfig:
    """Everything a connection needs besides the address."""

    client_id: str = "kafka-ds"
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None
    connect_timeout_ms: int = 10_000
    request_timeout_ms: int = 30_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    # Socket buffer sizes (SO_SNDBUF/SO_RCVBUF); None leaves the OS default and autotuning.
    send_buffer_bytes: int | None = None
    receive_buffer_bytes: int | None = None
    max_response_bytes: int = 256 * 1024 * 1024

    def validate(self) -> None:
        if self.security_protocol.uses_sasl:
            if self.sasl is None:
                raise ConfigError(f"security.protocol={self.security_protocol.value} needs SASL "
                                  "settings (sasl.mechanism and credentials)")
            self.sasl.validate()
        for name in ("connect_timeout_ms", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.security_protocol.uses_tls:
            return None
        return (self.tls or TlsConfig()).build_context()
