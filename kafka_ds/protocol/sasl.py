"""SASL client mechanisms as step machines: server bytes in, client bytes out.

Layer: protocol (stdlib only: hashlib, hmac, base64, secrets for the SCRAM nonce).

The broker conversation (KIP-43/KIP-152) is: SaslHandshake(mechanism), then SaslAuthenticate
requests carrying whatever ``first_message()`` / ``step(server_bytes)`` return, until
``done``; ``SaslAuthentication`` drives it, for the first authentication of a connection and
for each re-authentication before the session the broker granted expires (KIP-368). The
connection layer does the I/O; these classes only compute messages and verify the server, so
each mechanism is tested with fixed nonces and no broker.

- PLAIN (RFC 4616): one message, ``authzid NUL user NUL password``. Send it only over TLS or
  on trusted networks: the password travels in the clear.
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): the password never travels; the client
  also checks the server's signature, so a broker that does not know the password cannot
  pretend to have accepted us. Server messages are parsed strictly and the iteration count
  must lie in 4096-16384, so a man in the middle can neither weaken the proof nor make a
  malformed message escape as anything but ``SaslError``.
- OAUTHBEARER (RFC 7628, KIP-255) with a caller-supplied token. On failure the server sends a
  JSON error and expects a single 0x01 byte before it fails the authentication.
- GSSAPI (Kerberos V5, RFC 4752). The Kerberos work (tickets, the KDC, the keytab) is a
  ``GssContext`` the connection layer supplies (``net.kerberos``): it may talk to a KDC, so it
  does not belong here. This class is the SASL framing around it: context tokens until the
  context is established, then the security-layer negotiation, where Kafka, like the Java
  client, takes "no security layer" (TLS, if any, protects the connection).

Secrets never appear in ``repr`` or in error messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from typing import Protocol

from kafka_ds.protocol.errors import AuthenticationError, KafkaDsError
from kafka_ds.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from kafka_ds.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from kafka_ds.protocol.schema import ApiMessage, Request


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


# RFC 5802 section 7, the grammar of the server's messages, read as strictly as the Java
# client's ScramMessages: printable = %x21-2B / %x2D-7E (no comma); base64 with padding.
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_EXTENSIONS = r"(?:,[A-Za-z]=[\x01-\x2b\x2d-\x7f]+)*"
_SERVER_FIRST = re.compile(
    rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]{{1,10}})"
    rf"(?P<extensions>{_EXTENSIONS})")
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>[\x01-\x2b\x2d-\x7f]+)|v=(?P<verifier>{_BASE64}))"
    rf"(?P<extensions>{_EXTENSIONS})")
# The iteration counts a Kafka broker can store (its ScramMechanism bounds). Fewer than 4096
# (RFC 7677's minimum) would let a man in the middle obtain a proof that is cheap to crack
# offline; more than 16384 is no Kafka broker's and would pin the connecting thread in PBKDF2.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384


def _parse_scram(message: bytes, pattern: re.Pattern[str], what: str) -> re.Match[str]:
    """Match a server message strictly; every defect becomes a SaslError saying what it is."""
    try:
        text = bytes(message).decode("ascii")
    except UnicodeDecodeError:
        raise SaslError(f"malformed SCRAM {what} from the broker: not ASCII") from None
    if text.startswith("m="):
        # RFC 5802 5.1: a mandatory extension this client does not know must fail the exchange.
        raise SaslError(f"SCRAM {what} demands a mandatory extension (m=), which is not "
                        "supported")
    match = pattern.fullmatch(text)
    if match is None:
        raise SaslError(f"malformed SCRAM {what} from the broker")
    names = [item[0] for item in match.group("extensions").split(",")[1:]]
    if len(set(names)) != len(names) or set(names) & set("rsievm"):
        raise SaslError(f"malformed SCRAM {what} from the broker: an attribute is repeated")
    return match


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslError(f"malformed SCRAM {what} from the broker: bad base64") from None


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
        if self.done:
            raise SaslError("the broker sent a SCRAM message after the exchange had finished")
        if self._server_signature is None:
            return self._client_final(server_message)
        match = _parse_scram(server_message, _SERVER_FINAL, "server-final message")
        if match.group("error") is not None:
            raise SaslError(f"broker rejected SCRAM authentication: {match.group('error')}")
        received = _b64decode(match.group("verifier"), "server signature")
        if not hmac.compare_digest(received, self._server_signature):
            raise SaslError("the broker's SCRAM signature is wrong: it does not know the "
                            "password, or something is intercepting the connection")
        self.done = True
        return None

    def _client_final(self, server_first: bytes) -> bytes:
        match = _parse_scram(server_first, _SERVER_FIRST, "server-first message")
        nonce = match.group("nonce")
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            raise SaslError("SCRAM server nonce does not extend ours: the broker must add its "
                            "own part to the client nonce")
        salt = _b64decode(match.group("salt"), "salt")
        if not salt:
            raise SaslError("malformed SCRAM server-first message from the broker: empty salt")
        iterations = int(match.group("iterations"))
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise SaslError(
                f"the broker asked for {iterations} SCRAM iterations; only "
                f"{SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS} are accepted (fewer would "
                "expose the password to offline guessing, RFC 7677)")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws = base64("n,,"): no channel binding
        auth_message = ",".join(
            [self._client_first_bare, match.string, without_proof]).encode()
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


class GssContext(Protocol):
    """One Kerberos security context, client side (what ``Gssapi`` needs of it)."""

    @property
    def complete(self) -> bool:
        """True once the context is established (mutual authentication done)."""
        ...

    @property
    def principal(self) -> str:
        """Our Kerberos principal (``user@REALM``), sent as the SASL authorization id."""
        ...

    def step(self, token: bytes | None) -> bytes | None:
        """The next context token for the server's ``token`` (None at the start)."""
        ...

    def wrap(self, message: bytes) -> bytes:
        """``message`` integrity-protected (not encrypted) for the server."""
        ...

    def unwrap(self, message: bytes) -> bytes:
        """The server's integrity-protected ``message``, verified."""
        ...


# RFC 4752 3.3: security layers, as a bit mask in the first octet of the server's offer.
GSSAPI_NO_SECURITY_LAYER = 1


class Gssapi:
    """SASL GSSAPI (RFC 4752), client side, over a ``GssContext``.

    1. Context tokens go back and forth until the context is established; the server's last
       one (mutual authentication) may leave nothing to send, and then an empty message goes,
       as the Java client sends, to ask for step 2.
    2. The server sends a wrapped 4-octet offer: the security layers it allows and its maximum
       message size. We choose "no security layer" (Kafka supports nothing else) and answer,
       wrapped, with that choice, a zero size and our principal as the authorization id.
    3. The server's empty answer ends the exchange.
    """

    name = "GSSAPI"

    def __init__(self, context: GssContext) -> None:
        self._context = context
        self._answered_offer = False
        self.done = False

    def __repr__(self) -> str:
        return "Gssapi()"

    def first_message(self) -> bytes:
        return self._context.step(None) or b""

    def step(self, server_message: bytes) -> bytes | None:
        if self.done:
            raise SaslError("the broker sent a GSSAPI message after the exchange had finished")
        context = self._context
        if not context.complete:
            token = context.step(server_message)
            return token if token is not None else b""
        if not self._answered_offer:
            return self._answer_offer(server_message)
        self.done = True  # the server's answer to ours: empty on success
        return None

    def _answer_offer(self, wrapped: bytes) -> bytes:
        offer = self._context.unwrap(wrapped)
        if len(offer) != 4:
            raise SaslError(f"malformed GSSAPI security-layer offer from the broker "
                            f"({len(offer)} bytes, not 4)")
        if not offer[0] & GSSAPI_NO_SECURITY_LAYER:
            raise SaslError("the broker requires a GSSAPI security layer (integrity or "
                            "confidentiality); Kafka clients use none: check the broker's "
                            "SASL settings")
        self._answered_offer = True
        # Our choice, a maximum size of 0 (RFC 4752: no layer, no size), our authorization id.
        answer = bytes([GSSAPI_NO_SECURITY_LAYER, 0, 0, 0]) + self._context.principal.encode()
        return self._context.wrap(answer)


# --- one authentication on one connection (KIP-43, KIP-152, KIP-368) ------------------------

# Re-authenticate between 85 % and 95 % of the session lifetime, as the Java client does: the
# margin covers latency and clock drift, the spread keeps many connections from re-authenticating
# in one burst.
REAUTH_WINDOW = (0.85, 0.95)


def reauthentication_delay_ms(session_lifetime_ms: int, jitter: float) -> int:
    """When to re-authenticate, counted from the start of the last authentication.

    ``jitter`` in [0, 1) picks the point in ``REAUTH_WINDOW``; the caller draws it at random.
    """
    low, high = REAUTH_WINDOW
    return int(session_lifetime_ms * (low + (high - low) * jitter))


class SaslAuthentication:
    """The request sequence of one SASL authentication: SaslHandshake, then SaslAuthenticate
    until the mechanism is done. Used for the first authentication of a connection and for each
    re-authentication of it, which is the same exchange on a connection already in use.

    Sans-IO: ``first_request()`` and ``on_response(response)`` return the next request to send
    (with its version), or None once authenticated; failures raise ``AuthenticationError``
    naming the broker and the setting to check. ``session_lifetime_ms`` (SaslAuthenticate v1+)
    is then how long the broker keeps the session: 0 means for ever.
    """

    def __init__(self, mechanism: SaslMechanism, *, address: str, username: str | None,
                 handshake_version: int, authenticate_version: int) -> None:
        self.mechanism = mechanism
        self.address = address
        self.username = username
        self.handshake_version = handshake_version
        self.authenticate_version = authenticate_version
        self.session_lifetime_ms = 0
        self.done = False
        self._handshaken = False

    def first_request(self) -> tuple[Request, int]:
        return SaslHandshakeRequest(mechanism=self.mechanism.name), self.handshake_version

    def on_response(self, response: ApiMessage) -> tuple[Request, int] | None:
        name = self.mechanism.name
        if not self._handshaken:
            assert isinstance(response, SaslHandshakeResponse)
            if response.error_code:
                enabled = ", ".join(response.mechanisms) or "none"
                raise AuthenticationError(
                    f"broker {self.address} does not accept SASL mechanism {name} (enabled "
                    f"there: {enabled}); set sasl.mechanism to one of them")
            self._handshaken = True
            try:
                first = self.mechanism.first_message()
            except AuthenticationError:
                raise
            except KafkaDsError as exc:
                raise AuthenticationError(f"SASL {name} with broker {self.address}: {exc}"
                                          ) from exc
            return self._authenticate(first)
        assert isinstance(response, SaslAuthenticateResponse)
        if response.error_code:
            who = f" as {self.username!r}" if self.username else ""
            raise AuthenticationError(
                f"SASL {name} authentication{who} with broker {self.address} failed: "
                f"{response.error_message or 'no reason given'}. Check the credentials "
                "(sasl.jaas.config, the OAUTHBEARER token, or the Kerberos principal)")
        if response.session_lifetime_ms > 0:
            self.session_lifetime_ms = response.session_lifetime_ms
        try:
            message = self.mechanism.step(bytes(response.auth_bytes))
        except KafkaDsError as exc:
            raise AuthenticationError(f"SASL {name} with broker {self.address}: {exc}") from exc
        if message is None:
            self.done = True
            return None
        return self._authenticate(message)

    def _authenticate(self, message: bytes) -> tuple[Request, int]:
        return SaslAuthenticateRequest(auth_bytes=message), self.authenticate_version
