"""Where OAUTHBEARER tokens come from: asked afresh at every authentication and re-authentication.

Layer: net (reads token files and the wall clock; the SASL framing is ``protocol.sasl``).

A token expires. A broker with ``connections.max.reauth.ms`` set ends each session when its
token does (KIP-368), and every new connection needs a token that is still valid, so a reader
or writer that runs for months must fetch a fresh one each time it authenticates. The sources,
from the properties that select them (``client.config``):

* ``StaticToken`` (``sasl.oauthbearer.token``, ours): the same token for ever. For tests, or
  for a token that outlives the job.
* ``TokenFile`` (``sasl.oauthbearer.token.endpoint.url=file:/path/to/token``): the Java
  client's property and form (its ``FileJwtRetriever``), so one option map serves both
  connectors. Re-read at every authentication, so a token that an agent rewrites in place
  (a Kubernetes projected service-account token, a cloud identity agent) is picked up.
* ``TokenCallable`` (``sasl.oauthbearer.token.provider=package.module:function``, ours): a
  zero-argument function returning the current token, imported where the client runs (Spark
  executors too); or any picklable callable given to ``SaslConfig`` directly.
* ``UnsecuredJws`` (the Java login module's ``unsecuredLoginStringClaim_sub``): an unsigned
  development token, minted anew each time so that it never goes stale.

Each source returns a token checked against RFC 6750's ``b64token`` alphabet: a token is put
into the SASL message between 0x01 separators, so a stray byte could otherwise smuggle in
extensions. Tokens never appear in ``repr`` or errors.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from kafka_ds.protocol.errors import ConfigError, NetworkError

# RFC 6750 section 2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class TokenSource(Protocol):
    """Something that hands out the current OAUTHBEARER token."""

    def token(self) -> str: ...


def checked_token(token: object, source: str) -> str:
    """``token`` if it is a well-formed bearer token, else ``ConfigError`` naming ``source``."""
    if not isinstance(token, str):
        raise ConfigError(f"{source} gave a {type(token).__name__}, not a token string")
    token = token.strip()
    if not _B64TOKEN.fullmatch(token):
        raise ConfigError(f"{source} did not give a bearer token: it is empty or holds "
                          "characters a token cannot (RFC 6750 b64token)")
    return token


@dataclass(frozen=True)
class StaticToken:
    """A token given once (``sasl.oauthbearer.token``)."""

    value: str = field(repr=False)

    def __post_init__(self) -> None:
        checked_token(self.value, "sasl.oauthbearer.token")

    def token(self) -> str:
        return self.value.strip()


@dataclass(frozen=True)
class TokenFile:
    """A file holding the token, read at every authentication."""

    path: str

    @classmethod
    def from_url(cls, url: str) -> TokenFile:
        """From ``sasl.oauthbearer.token.endpoint.url``; only ``file:`` URLs are supported."""
        parsed = urlparse(url.strip())
        if parsed.scheme.lower() != "file" or not parsed.path:
            raise ConfigError(
                f"sasl.oauthbearer.token.endpoint.url={url!r}: kafka_ds reads a token from a "
                "file (file:/path/to/token) but does not call identity providers over HTTP; "
                "have an agent write the token to a file, or use sasl.oauthbearer.token.provider")
        return cls(unquote(parsed.path))

    def token(self) -> str:
        what = f"the OAUTHBEARER token file {self.path} (sasl.oauthbearer.token.endpoint.url)"
        try:
            text = Path(self.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            # A file being rotated can be missing for a moment: a network-class error, so the
            # caller reconnects and reads it again rather than giving up on the query.
            raise NetworkError(f"cannot read {what}: {exc}") from exc
        return checked_token(text, what)


@dataclass(frozen=True)
class TokenCallable:
    """A function returning the token: a callable, or ``"package.module:function"``."""

    function: Callable[[], str] | str

    def __post_init__(self) -> None:
        self.resolve()  # fail at configuration time, not at the first connection

    def resolve(self) -> Callable[[], str]:
        if callable(self.function):
            return self.function
        module_name, sep, attribute = str(self.function).strip().partition(":")
        if not sep:
            module_name, _, attribute = module_name.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(
                f"sasl.oauthbearer.token.provider={self.function!r} cannot be imported ({exc}); "
                "give 'package.module:function', importable where the client runs") from None
        if not callable(target):
            raise ConfigError(f"sasl.oauthbearer.token.provider={self.function!r} is not callable")
        return target

    def token(self) -> str:
        what = f"sasl.oauthbearer.token.provider {self.function!r}"
        try:
            token = self.resolve()()
        except ConfigError:
            raise
        except Exception as exc:
            # An identity service that is briefly unreachable: retriable, like a lost broker.
            raise NetworkError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        return checked_token(token, what)


@dataclass(frozen=True)
class UnsecuredJws:
    """The Java client's unsecured login: an unsigned JWT (``alg: none``) for development.

    Only a broker configured with the unsecured validator accepts it.
    """

    subject: str
    lifetime_s: int = 3600  # unsecuredLoginLifetimeSeconds, as in Java

    def token(self) -> str:
        now_s = int(time.time())
        claims = {"iat": now_s, "exp": now_s + self.lifetime_s, "sub": self.subject}
        return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


def _b64url(value: dict[str, object]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
