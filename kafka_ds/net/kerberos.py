"""Kerberos for SASL GSSAPI: credentials from a keytab or a ticket cache, and one security
context per authentication.

Layer: net. Uses the ``gssapi`` package (the ``kerberos`` extra: ``pip install
'kafka-ds[kerberos]'``) over the system's MIT Kerberos. ``protocol.sasl.Gssapi`` does the SASL
framing; the context lives here because everything it does is I/O: acquiring credentials
reads a keytab or a ticket cache and asks the KDC for a ticket-granting ticket, and the first
context token needs a service ticket from the KDC. That is blocking network and file work,
like the socket's, done where the connection's other I/O is done (while connecting, or during a
re-authentication on the selector thread, as the Java client does it on its network thread).

The settings are the Java client's (``KerberosConfig.from_jaas``): ``sasl.kerberos.service.name``
and ``Krb5LoginModule``'s ``useKeyTab``/``keyTab``/``principal``, or ``useTicketCache`` (and
``ticketCache``) for a cache made by ``kinit``. The broker's principal is
``<service name>/<broker host>``, the host as the client dialled it (the advertised listener
host), as librdkafka does; MIT's ``krb5.conf`` (``KRB5_CONFIG``) decides realms, KDCs and
whether host names are canonicalised (``dns_canonicalize_hostname``, ``rdns``).

Credentials are acquired once per (principal, keytab, cache) in a process and shared by its
connections, as the Java client's login is. With a keytab the tickets go to a private
in-memory cache, never to the user's default one, and MIT Kerberos gets new ones from the keytab
when they expire. A failure is an ``AuthenticationError`` naming the setting to check.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ds.protocol.errors import AuthenticationError, ConfigError

_INSTALL_HINT = ("pip install 'kafka-ds[kerberos]' (it builds against MIT Kerberos: apt-get "
                 "install libkrb5-dev, or dnf install krb5-devel, first)")


def gssapi_module() -> Any:
    """The ``gssapi`` package, or a ``ConfigError`` saying how to install it."""
    try:
        import gssapi
    except ImportError:
        raise ConfigError(f"sasl.mechanism=GSSAPI needs the gssapi package: {_INSTALL_HINT}"
                          ) from None
    return gssapi


def _true(options: Mapping[str, str], name: str) -> bool:
    return options.get(name, "false").strip().lower() == "true"


@dataclass(frozen=True)
class KerberosConfig:
    """Who we are to the KDC and which service the brokers run as."""

    service_name: str
    principal: str | None = None
    keytab: str | None = None
    use_keytab: bool = False
    ticket_cache: str | None = None
    use_ticket_cache: bool = False

    @classmethod
    def from_jaas(cls, service_name: str | None, jaas_options: Mapping[str, str]
                  ) -> KerberosConfig:
        """From ``sasl.kerberos.service.name`` and ``Krb5LoginModule``'s options, checked as
        the Java client checks them."""
        service = service_name or jaas_options.get("serviceName")
        if not service:
            raise ConfigError("sasl.mechanism=GSSAPI needs sasl.kerberos.service.name: the "
                              "primary of the brokers' principal, usually 'kafka'")
        if service_name and jaas_options.get("serviceName") not in (None, service_name):
            raise ConfigError(
                f"sasl.kerberos.service.name={service_name} and serviceName="
                f"{jaas_options['serviceName']} in sasl.jaas.config differ; keep one")
        use_keytab = _true(jaas_options, "useKeyTab")
        use_ticket_cache = _true(jaas_options, "useTicketCache")
        if not use_keytab and not use_ticket_cache:
            raise ConfigError(
                "sasl.jaas.config for Krb5LoginModule needs useKeyTab=true with keyTab and "
                "principal, or useTicketCache=true (a ticket cache made by kinit); kafka_ds "
                "cannot prompt for a password")
        principal = jaas_options.get("principal") or None
        if use_keytab and not principal:
            raise ConfigError("sasl.jaas.config has useKeyTab=true but no principal: add "
                              'principal="user@REALM"')
        keytab = jaas_options.get("keyTab") or None
        if keytab is not None and not os.access(keytab, os.R_OK):
            raise ConfigError(f"keyTab={keytab} in sasl.jaas.config cannot be read: check the "
                              "path and its permissions")
        config = cls(service_name=service, principal=principal, keytab=keytab,
                     use_keytab=use_keytab, ticket_cache=jaas_options.get("ticketCache") or None,
                     use_ticket_cache=use_ticket_cache)
        gssapi_module()  # fail at configuration time, not at the first connection
        return config

    def new_context(self, host: str) -> KerberosContext:
        """A fresh security context with the broker at ``host`` (one per authentication)."""
        return KerberosContext(self, host)


# Credentials by (principal, keytab, ticket cache): one login per process, as in Java.
_CREDENTIALS: dict[tuple[str | None, str | None, str | None], Any] = {}
_CREDENTIALS_LOCK = threading.Lock()


def _credentials(config: KerberosConfig) -> Any:
    gssapi = gssapi_module()
    keytab = config.keytab if config.use_keytab else None
    cache = config.ticket_cache if config.use_ticket_cache and not config.use_keytab else None
    key = (config.principal, keytab, cache)
    with _CREDENTIALS_LOCK:
        credentials = _CREDENTIALS.get(key)
        if credentials is not None:
            return credentials
        store: dict[str, str] = {}
        if config.use_keytab:
            if keytab:
                store["client_keytab"] = keytab
            # Our own in-memory cache: the user's default cache is neither read nor changed.
            store["ccache"] = f"MEMORY:kafka_ds-{uuid.uuid4().hex}"
        elif cache:
            store["ccache"] = cache
        name = (gssapi.Name(config.principal, gssapi.NameType.kerberos_principal)
                if config.principal else None)
        try:
            credentials = gssapi.Credentials(name=name, usage="initiate", store=store or None)
        except gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(
                f"no Kerberos credentials for {config.principal or 'the default principal'} "
                f"({_where(config)}): {_reason(exc)}. Check sasl.jaas.config and krb5.conf "
                "(KRB5_CONFIG)") from None
        _CREDENTIALS[key] = credentials
        return credentials


def _where(config: KerberosConfig) -> str:
    if config.use_keytab:
        return f"keytab {config.keytab or 'default'}"
    return f"ticket cache {config.ticket_cache or 'default'}"


def _reason(exc: Exception) -> str:
    """The GSS-API error's text, which names the Kerberos problem (never a secret)."""
    text = " ".join(str(getattr(exc, "gen_message", lambda: exc)()).split())
    return text or type(exc).__name__


class KerberosContext:
    """One client security context with the broker ``<service>@<host>`` (``GssContext``)."""

    def __init__(self, config: KerberosConfig, host: str) -> None:
        gssapi = gssapi_module()
        self._gssapi = gssapi
        self._config = config
        self.target = f"{config.service_name}@{host}"
        flags = (gssapi.RequirementFlag.mutual_authentication
                 | gssapi.RequirementFlag.integrity)
        self._context = gssapi.SecurityContext(
            name=gssapi.Name(self.target, gssapi.NameType.hostbased_service),
            creds=_credentials(config), usage="initiate", flags=flags)

    def __repr__(self) -> str:
        return f"KerberosContext({self.target})"

    @property
    def complete(self) -> bool:
        return bool(self._context.complete)

    @property
    def principal(self) -> str:
        return str(self._context.initiator_name)

    def step(self, token: bytes | None) -> bytes | None:
        try:
            result = self._context.step(token)
        except self._gssapi.exceptions.GSSError as exc:
            service = self._config.service_name
            raise AuthenticationError(
                f"Kerberos could not authenticate {self._config.principal or 'us'} to "
                f"{self.target}: {_reason(exc)}. Check sasl.kerberos.service.name={service} "
                "(the broker principal must be that name/<broker host>@REALM), the "
                "principal and keyTab in sasl.jaas.config, and krb5.conf (KRB5_CONFIG)"
            ) from None
        return bytes(result) if result is not None else None

    def wrap(self, message: bytes) -> bytes:
        return bytes(self._context.wrap(message, False).message)

    def unwrap(self, message: bytes) -> bytes:
        try:
            return bytes(self._context.unwrap(message).message)
        except self._gssapi.exceptions.GSSError as exc:
            raise AuthenticationError(f"the GSSAPI message from {self.target} does not verify: "
                                      f"{_reason(exc)}") from None
