"""SASL client mechanisms as step machines: server bytes in, client bytes out.

Layer: protocol (stdlib only: hashlib, hmac, base64, secrets for the SCRAM nonce).

The broker conversation (KIP-43/KIP-152) is: SaslHandshake(mechanism), then SaslAuthenticate
requests carrying whatever ``first_message()`` / ``step(server_bytes)`` return, until
``done``. The connection layer does the I/O; these classes only compute messages and verify
the server, so each mechanism is tested with fixed nonces and no broker.

- PLAIN (RFC 4616): one message, ``authzid NUL user NUL password``. Send it only over TLS or
  on trusted networks: the password travels in the clear.
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): the password never travels; the client
  also checks the server's signature, so a broker that does not know the password cannot
  pretend to have accepted us.
- OAUTHBEARER (RFC 7628, KIP-255) with a caller-supplied token. On failure the server sends a
  JSON error and expects a single 0x01 byte before it fails the authentication.

Secrets never appear in ``repr`` or in error messages.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Protocol

from kafka_ds.protocol.errors import KafkaDsError


class SaslError(KafkaDsError):
    """The SASL exchange failed on our side (bad server message or server signature)."""


class SaslMechanism(Protocol):
    """One client-side SASL conversation."""

    name: str
    done: bool

    def first_message(self) -> bytes: ...

    def step(self, server_message: bytes) -> bytes | None:
        """Next client message for ``server_message``; None when nothing more is sent."""
        ...


class Plain:
    """SASL PLAIN: username and password in one message."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self.done = False

    def __repr__(self) -> str:
        return f"Plain(username={self._username!r}, password=***)"

    def first_message(self) -> bytes:
        return b"\0" + self._username.encode() + b"\0" + self._password.encode()

    def step(self, server_message: bytes) -> bytes | None:
        # The broker's answer to PLAIN is empty on success; failure arrives as an error code.
        self.done = True
        return None


def _escape_username(username: str) -> str:
    # RFC 5802 5.1: ',' and '=' are reserved in the attribute syntax.
    return username.replace("=", "=3D").replace(",", "=2C")


def _parse_attributes(message: bytes) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
        pairs = (item.split("=", 1) for item in text.split(","))
        return {key: value for key, value in pairs}
    except (UnicodeDecodeError, ValueError) as exc:
        raise SaslError("malformed SCRAM message from the broker") from exc


class Scram:
    """SCRAM-SHA-256 or SCRAM-SHA-512, client side."""

    _HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:
        if mechanism not in self._HASHES:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; use one of "
                             f"{sorted(self._HASHES)}")
        self.name = mechanism
        self._hash = self._HASHES[mechanism]
        self._username = username
        self._password = password
        self._client_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_escape_username(username)},r={self._client_nonce}"
        self._server_signature: bytes | None = None
        self.done = False

    def __repr__(self) -> str:
        return f"Scram({self.name}, username={self._username!r}, password=***)"

    def first_message(self) -> bytes:
        return ("n,," + self._client_first_bare).encode()

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()

    def step(self, server_message: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(server_message)
        attributes = _parse_attributes(server_message)
        if "e" in attributes:
            raise SaslError(f"broker rejected SCRAM authentication: {attributes['e']}")
        received = base64.b64decode(attributes.get("v", ""))
        if not hmac.compare_digest(received, self._server_signature):
            raise SaslError("the broker's SCRAM signature is wrong: it does not know the "
                            "password, or something is intercepting the connection")
        self.done = True
        return None

    def _client_final(self, server_first: bytes) -> bytes:
        attributes = _parse_attributes(server_first)
        nonce, salt, iterations = attributes.get("r"), attributes.get("s"), attributes.get("i")
        if nonce is None or salt is None or iterations is None:
            raise SaslError("SCRAM server-first message lacks nonce, salt or iteration count")
        if not nonce.startswith(self._client_nonce):
            raise SaslError("SCRAM server nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(),
                                     base64.b64decode(salt), int(iterations))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,"): no channel binding
        auth_message = ",".join(
            [self._client_first_bare, server_first.decode(), without_proof]).encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


class OAuthBearer:
    """SASL OAUTHBEARER with a token the caller already holds (KIP-255)."""

    name = "OAUTHBEARER"

    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        self._token = token
        self._extensions = dict(extensions or {})
        self.done = False

    def __repr__(self) -> str:
        return "OAuthBearer(token=***)"

    def first_message(self) -> bytes:
        parts = [f"auth=Bearer {self._token}"]
        parts += [f"{key}={value}" for key, value in sorted(self._extensions.items())]
        return ("n,,\x01" + "\x01".join(parts) + "\x01\x01").encode()

    def step(self, server_message: bytes) -> bytes | None:
        self.done = True
        if server_message:
            # A JSON error document: RFC 7628 wants a lone 0x01 before the server gives up;
            # the broker then fails SaslAuthenticate with the reason.
            return b"\x01"
        return None
