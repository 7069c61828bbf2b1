"""Security settings for a broker connection: the protocol, TLS and SASL.

Layer: net (stdlib ``ssl``; SASL message logic lives in ``protocol.sasl``).

The option names follow the Java client's (``security.protocol``, ``sasl.mechanism``,
``ssl.truststore.location`` ...) so that ``client.config`` can map a Spark user's ``kafka.*``
options one to one. Stores are PKCS12, JKS or PEM, files or PEM text, as in the Java client
(``net.keystores`` reads them).

Passwords and tokens are kept out of ``repr`` so that a config printed in a log, an exception
or a Spark plan never shows them.
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass, field
from enum import StrEnum

from kafka_ds.net.kerberos import KerberosConfig
from kafka_ds.net.oauth import StaticToken, TokenSource
from kafka_ds.protocol.errors import ConfigError
from kafka_ds.protocol.sasl import Gssapi, OAuthBearer, Plain, SaslMechanism, Scram


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
    """How to verify the broker and, for mutual TLS, who we are: the Java client's options.

    Trust: a store (``truststore_location``, PKCS12, JKS or PEM, with ``truststore_type`` and
    ``truststore_password``) or PEM text (``truststore_certificates``); neither means the
    system's CAs. Identity (mutual TLS): a store (``keystore_*`` and ``key_password``) or PEM
    text (``keystore_certificate_chain`` + ``keystore_key``). ``net.keystores`` reads them.
    ``check_hostname``: verify that the broker certificate names the host we dialled. On by
    default, as in the Java client (``ssl.endpoint.identification.algorithm=https``); turning it
    off is an explicit choice (empty endpoint identification algorithm).
    """

    truststore_location: str | None = None
    truststore_type: str | None = None
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = field(default=None, repr=False)
    keystore_location: str | None = None
    keystore_type: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    keystore_certificate_chain: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify_certificates: bool = True

    def validate(self) -> None:
        """The option combinations the Java client refuses, refused with its reasons."""
        if self.truststore_location and self.truststore_certificates:
            raise ConfigError("set ssl.truststore.location or ssl.truststore.certificates, "
                              "not both")
        if self.truststore_certificates and (self.truststore_type or "PEM").upper() != "PEM":
            raise ConfigError("ssl.truststore.certificates is PEM text: it needs "
                              f"ssl.truststore.type=PEM, not {self.truststore_type}")
        inline_key = (self.keystore_certificate_chain, self.keystore_key)
        if any(inline_key) and not all(inline_key):
            raise ConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together: "
                              "set both (PEM text) or neither")
        if all(inline_key) and self.keystore_location:
            raise ConfigError("set ssl.keystore.location or ssl.keystore.key / "
                              "ssl.keystore.certificate.chain, not both")
        if all(inline_key) and (self.keystore_type or "PEM").upper() != "PEM":
            raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain are PEM "
                              f"text: they need ssl.keystore.type=PEM, not {self.keystore_type}")

    def build_context(self) -> ssl.SSLContext:
        """The client ``SSLContext``; stores are read once per content (cached), so each
        connection does not decrypt them again, yet a replaced store file is read anew."""
        key = (self, *(_file_version(path) for path in (self.truststore_location,
                                                        self.keystore_location)),
               # OpenSSL's default CA store (used without a truststore) follows these.
               os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with _CONTEXTS_LOCK:
            context = _CONTEXTS.get(key)
        if context is None:
            context = self._new_context()
            with _CONTEXTS_LOCK:
                _CONTEXTS[key] = context
                while len(_CONTEXTS) > _MAX_CONTEXTS:
                    del _CONTEXTS[next(iter(_CONTEXTS))]
        return context

    def _new_context(self) -> ssl.SSLContext:
        # Imported here, not at the top: keystores pulls in ``cryptography`` (70-200 ms), which
        # plaintext connections never need, and every streaming query starts a fresh Python
        # process on the driver that imports this module.
        from kafka_ds.net import keystores

        self.validate()
        # An empty client context, not ssl.create_default_context(): that one loads the ~145
        # system roots first, and a configured CA would only be added to them. Like the Java
        # client, trust exactly the configured CA when there is one (a private-CA cluster must
        # not accept any publicly trusted certificate for its name), the system store if not.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + hostname checks
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        trusted = None
        if self.truststore_location:
            trusted = keystores.read_truststore(keystores.StoreSettings(
                "ssl.truststore", self.truststore_location, self.truststore_type,
                self.truststore_password))
        elif self.truststore_certificates:
            trusted = keystores.pem_trust(self.truststore_certificates,
                                          "ssl.truststore.certificates")
        identity = None
        if self.keystore_location:
            identity = keystores.read_keystore(keystores.StoreSettings(
                "ssl.keystore", self.keystore_location, self.keystore_type,
                self.keystore_password), self.key_password)
        elif self.keystore_key and self.keystore_certificate_chain:
            identity = keystores.pem_key(self.keystore_certificate_chain, self.keystore_key,
                                         self.key_password)
        try:
            if trusted is not None:
                context.load_verify_locations(cadata=trusted)
            elif self.verify_certificates:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
            if identity is not None:
                keystores.install_client_key(context, identity)
        except (OSError, ssl.SSLError) as exc:
            truststore = self.truststore_location or "<inline>"
            keystore = self.keystore_location or "<inline>"
            raise ConfigError(
                f"cannot use the TLS material (truststore {truststore}, keystore {keystore}): "
                f"{exc}. Check ssl.truststore.* and ssl.keystore.*") from exc
        context.check_hostname = self.check_hostname and self.verify_certificates
        if not self.verify_certificates:
            context.verify_mode = ssl.CERT_NONE
        return context


def _file_version(path: str | None) -> tuple[int, int] | None:
    """What tells a changed file apart: (modification time in ns, size)."""
    if not path:
        return None
    try:
        status = os.stat(path)
    except OSError:
        return None  # reading it will say what is wrong
    return status.st_mtime_ns, status.st_size


# Built contexts by (TlsConfig, store file versions); few configs live in one process.
_CONTEXTS: dict[tuple[object, ...], ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()
_MAX_CONTEXTS = 16


@dataclass(frozen=True)
class SaslConfig:
    """SASL credentials: PLAIN and SCRAM use username/password, OAUTHBEARER a token source,
    GSSAPI a Kerberos login (``net.kerberos``).

    ``oauth_token`` is a fixed token; ``oauth_token_source`` (see ``net.oauth``) is asked for
    the current one at every authentication and re-authentication, and wins when both are set.
    """

    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    oauth_token: str | None = field(default=None, repr=False)
    oauth_extensions: tuple[tuple[str, str], ...] = ()
    oauth_token_source: TokenSource | None = None
    kerberos: KerberosConfig | None = None

    SUPPORTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")

    @property
    def identity(self) -> str | None:
        """Who we authenticate as, for error messages (a user name or Kerberos principal)."""
        if self.mechanism == "GSSAPI" and self.kerberos is not None:
            return self.kerberos.principal
        return self.username

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
        elif self.mechanism == "GSSAPI":
            if self.kerberos is None:
                raise ConfigError("sasl.mechanism=GSSAPI needs a Kerberos login: "
                                  "sasl.kerberos.service.name and a Krb5LoginModule "
                                  "sasl.jaas.config")
        elif self.username is None or self.password is None:
            raise ConfigError(f"sasl.mechanism={self.mechanism} needs a username and password "
                              "(sasl.jaas.config or sasl.username/sasl.password)")

    def current_token(self) -> str:
        """The OAUTHBEARER token to send now (asks the source, which may re-read a file)."""
        if self.oauth_token_source is not None:
            return self.oauth_token_source.token()
        assert self.oauth_token is not None
        return StaticToken(self.oauth_token).token()

    def new_mechanism(self, host: str = "") -> SaslMechanism:
        """A fresh conversation with the broker at ``host`` (each authentication and
        re-authentication starts anew; GSSAPI names the broker's principal by its host)."""
        self.validate()
        if self.mechanism == "GSSAPI":
            assert self.kerberos is not None and host, "GSSAPI needs the broker host"
            return Gssapi(self.kerberos.new_context(host))
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
