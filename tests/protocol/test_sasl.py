"""SASL step machines, checked against the RFC test vectors with fixed nonces."""

from __future__ import annotations

import base64
import contextlib

import pytest

from kafka_ds.protocol.errors import AuthenticationError
from kafka_ds.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from kafka_ds.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from kafka_ds.protocol.sasl import (
    Gssapi,
    OAuthBearer,
    Plain,
    SaslAuthentication,
    SaslError,
    Scram,
    reauthentication_delay_ms,
)


def test_plain_sends_one_message_with_empty_authzid() -> None:
    mechanism = Plain("alice", "s3cret")
    assert mechanism.first_message() == b"\0alice\0s3cret"
    assert mechanism.step(b"") is None and mechanism.done
    assert "s3cret" not in repr(mechanism)


def test_scram_sha_256_matches_rfc_7677() -> None:
    # RFC 7677 section 3: user "user", password "pencil".
    mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert mechanism.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert mechanism.step(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert mechanism.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert mechanism.done


def test_scram_rejects_a_forged_server_signature() -> None:
    mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    mechanism.first_message()
    mechanism.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                   b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    forged = base64.b64encode(b"x" * 32)
    with pytest.raises(SaslError, match="signature"):
        mechanism.step(b"v=" + forged)
    assert not mechanism.done


def test_scram_rejects_a_nonce_that_does_not_extend_ours() -> None:
    mechanism = Scram("SCRAM-SHA-512", "user", "pencil", nonce="abc")
    with pytest.raises(SaslError, match="nonce"):
        mechanism.step(b"r=xyz123,s=QSXCR+Q6sek8bf92,i=4096")


def test_scram_escapes_reserved_characters_in_the_username() -> None:
    assert Scram("SCRAM-SHA-256", "a=b,c", "p", nonce="n").first_message() == b"n,,n=a=3Db=2Cc,r=n"


def test_oauthbearer_frames_the_token_and_acknowledges_errors() -> None:
    mechanism = OAuthBearer("tok.en.", {"traceId": "42"})
    assert mechanism.first_message() == b"n,,\x01auth=Bearer tok.en.\x01traceId=42\x01\x01"
    assert mechanism.step(b'{"status":"invalid_token"}') == b"\x01"
    assert "tok.en." not in repr(mechanism)


# --- a hostile or broken server-first / server-final message ------------------------------

CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SALT = "W22ZaJ0SNY7soEsUEjb6gQ=="


def _scram_after_first(nonce_suffix: str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0") -> Scram:
    mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    mechanism.first_message()
    mechanism.step(f"r={CLIENT_NONCE}{nonce_suffix},s={SALT},i=4096".encode())
    return mechanism


@pytest.mark.parametrize("iterations", [1, 2, 4095])
def test_scram_refuses_fewer_than_4096_iterations(iterations: int) -> None:
    # A man in the middle asking for i=1 would get a proof that is 4096 times cheaper to
    # crack offline. RFC 7677 and the Java client both demand at least 4096.
    mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    with pytest.raises(SaslError, match=r"4096"):
        mechanism.step(f"r={CLIENT_NONCE}x,s={SALT},i={iterations}".encode())


def test_scram_refuses_an_iteration_count_no_kafka_broker_uses() -> None:
    # 10**9 rounds of PBKDF2 would pin the connecting thread for many minutes: refused before
    # any hashing (the test would time out otherwise).
    mechanism = Scram("SCRAM-SHA-512", "user", "pencil", nonce=CLIENT_NONCE)
    with pytest.raises(SaslError, match=r"16384"):
        mechanism.step(f"r={CLIENT_NONCE}x,s={SALT},i=1000000000".encode())


def test_scram_accepts_the_bounds_kafka_brokers_use() -> None:
    for iterations in (4096, 16384):
        mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
        assert mechanism.step(f"r={CLIENT_NONCE}x,s={SALT},i={iterations}".encode())


@pytest.mark.parametrize("server_first", [
    b"r=" + CLIENT_NONCE.encode() + b"x,s=" + SALT.encode() + b",i=0",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=" + SALT.encode() + b",i=x",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=" + SALT.encode() + b",i=",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=" + SALT.encode() + b",i=99999999999999999999999",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=not*base64,i=4096",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=QUJD,i=4096,i=1",   # a repeated attribute
    b"r=" + CLIENT_NONCE.encode() + b"x,s=QUJD,i=4096,r=other",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=,i=4096",           # no salt
    b"m=ext,r=" + CLIENT_NONCE.encode() + b"x,s=QUJD,i=4096",  # a mandatory extension
    b"r=" + CLIENT_NONCE.encode() + b",s=QUJD,i=4096",        # nonce equal to ours
    b"s=QUJD,r=" + CLIENT_NONCE.encode() + b"x,i=4096",        # attributes out of order
    b"r=" + CLIENT_NONCE.encode() + b"\xff,s=QUJD,i=4096",    # not ASCII
    b"",
    b"garbage",
    b"r=" + CLIENT_NONCE.encode() + b"x,s=QUJD",
], ids=["i=0", "i=x", "i=", "i-huge", "bad-salt", "dup-i", "dup-r", "empty-salt", "m=",
        "same-nonce", "order", "non-ascii", "empty", "garbage", "no-i"])
def test_every_malformed_server_first_message_is_a_sasl_error(server_first: bytes) -> None:
    # Anything else (ValueError, binascii.Error, OverflowError) would escape the connection's
    # error handling and kill a producer's sender thread for good.
    mechanism = Scram("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    with pytest.raises(SaslError):
        mechanism.step(server_first)


@pytest.mark.parametrize("server_final", [
    b"v=", b"v=@@@@", b"v=QUJD", b"x=QUJD", b"", b"m=x,v=QUJD", b"v=QUJD,v=QUJD", b"\xff",
], ids=["empty-v", "bad-base64", "wrong-v", "unknown", "empty", "m=", "dup-v", "non-ascii"])
def test_every_malformed_server_final_message_is_a_sasl_error(server_final: bytes) -> None:
    mechanism = _scram_after_first()
    with pytest.raises(SaslError):
        mechanism.step(server_final)
    assert not mechanism.done


def test_scram_server_error_is_reported() -> None:
    with pytest.raises(SaslError, match="invalid-proof"):
        _scram_after_first().step(b"e=invalid-proof")


def test_random_server_messages_only_ever_raise_sasl_error() -> None:
    import random

    rng = random.Random(15)
    alphabet = b"rsiemv=,0123456789+/ABCxyz\xff\x00"
    after_first = _scram_after_first()  # a refused message leaves its state as it was
    for _ in range(3000):
        message = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        for mechanism in (Scram("SCRAM-SHA-256", "u", "p", nonce="n"), after_first):
            with contextlib.suppress(SaslError):  # anything else fails the test
                mechanism.step(message)


def test_the_sasl_authenticate_request_repr_hides_the_credentials() -> None:
    request = SaslAuthenticateRequest(auth_bytes=Plain("alice", "hunter2").first_message())
    assert "hunter2" not in repr(request) and "hunter2" not in str(request)
    token = OAuthBearer("eyJhbGciOiJub25lIn0.e30.").first_message()
    assert b"eyJhbGci" in token and "eyJhbGci" not in repr(SaslAuthenticateRequest(
        auth_bytes=token))


def test_reauthentication_falls_between_85_and_95_percent_of_the_session() -> None:
    assert reauthentication_delay_ms(10_000, 0.0) == 8_500
    assert reauthentication_delay_ms(10_000, 0.5) == 9_000
    assert reauthentication_delay_ms(10_000, 0.999999) < 9_500


def test_an_authentication_exchange_records_the_session_lifetime() -> None:
    exchange = SaslAuthentication(Plain("alice", "pw"), address="b:1", username="alice",
                                  handshake_version=1, authenticate_version=2)
    handshake, version = exchange.first_request()
    assert isinstance(handshake, SaslHandshakeRequest) and handshake.mechanism == "PLAIN"
    assert version == 1
    step = exchange.on_response(SaslHandshakeResponse(mechanisms=["PLAIN"]))
    assert step is not None and step[0].auth_bytes == b"\0alice\0pw" and step[1] == 2
    assert exchange.on_response(SaslAuthenticateResponse(session_lifetime_ms=9_000)) is None
    assert exchange.done and exchange.session_lifetime_ms == 9_000


def test_a_refused_exchange_is_an_authentication_error_without_the_secret() -> None:
    exchange = SaslAuthentication(Plain("alice", "pw-secret"), address="b:1",
                                  username="alice", handshake_version=1,
                                  authenticate_version=2)
    exchange.first_request()
    with pytest.raises(AuthenticationError, match="SCRAM-SHA-256") as refused:
        SaslAuthentication(Plain("a", "b"), address="b:1", username="a", handshake_version=1,
                           authenticate_version=2).on_response(
            SaslHandshakeResponse(error_code=33, mechanisms=["SCRAM-SHA-256"]))
    assert "sasl.mechanism" in str(refused.value)
    exchange.on_response(SaslHandshakeResponse(mechanisms=["PLAIN"]))
    with pytest.raises(AuthenticationError, match="alice") as failed:
        exchange.on_response(SaslAuthenticateResponse(error_code=58, error_message="bad"))
    assert "pw-secret" not in str(failed.value)


# --- GSSAPI (RFC 4752) over a scripted security context ------------------------------------

class ScriptedContext:
    """A stand-in for a Kerberos context: tokens from a script, "wrapping" that marks and
    checks messages, so the SASL framing can be followed byte by byte."""

    principal = "client@REALM"

    def __init__(self, tokens: list[bytes | None]) -> None:
        self._tokens = list(tokens)  # what step() returns, in order; complete once used up
        self.received: list[bytes | None] = []

    @property
    def complete(self) -> bool:
        return not self._tokens

    def step(self, token: bytes | None) -> bytes | None:
        self.received.append(token)
        return self._tokens.pop(0)

    def wrap(self, message: bytes) -> bytes:
        return b"MIC|" + message

    def unwrap(self, message: bytes) -> bytes:
        if not message.startswith(b"MIC|"):
            raise SaslError("integrity check failed")
        return message[4:]


def _gssapi_exchange(server_offer: bytes) -> tuple[list[bytes], ScriptedContext]:
    """The messages the client sends in a full exchange, through ``SaslAuthentication``."""
    context = ScriptedContext([b"AP-REQ", None])  # the AP-REP completes it, nothing to send
    auth = SaslAuthentication(Gssapi(context), address="b:1", username="client@REALM",
                              handshake_version=1, authenticate_version=2)
    sent = []
    step = auth.first_request()
    step = auth.on_response(SaslHandshakeResponse(error_code=0, mechanisms=["GSSAPI"]))
    for server in (b"AP-REP", b"MIC|" + server_offer, b""):
        assert step is not None
        request, _ = step
        assert isinstance(request, SaslAuthenticateRequest)
        sent.append(bytes(request.auth_bytes))
        step = auth.on_response(SaslAuthenticateResponse(error_code=0, auth_bytes=server))
    assert step is None and auth.done
    return sent, context


def test_gssapi_exchanges_tokens_then_chooses_no_security_layer() -> None:
    # The broker offers no layer, integrity and confidentiality (7), 64 KiB messages.
    sent, context = _gssapi_exchange(bytes([7, 0x01, 0x00, 0x00]))
    assert sent == [
        b"AP-REQ",  # the initial context token
        b"",  # the context completed on the AP-REP with nothing to send: ask for the offer
        b"MIC|" + bytes([1, 0, 0, 0]) + b"client@REALM",  # no layer, size 0, authzid
    ]
    assert context.received == [None, b"AP-REP"]


@pytest.mark.parametrize(("offer", "problem"), [
    (bytes([6, 0, 0x10, 0]), "requires a GSSAPI security layer"),
    (bytes([1, 0, 0]), "malformed GSSAPI security-layer offer"),
])
def test_gssapi_refuses_an_offer_it_cannot_take(offer: bytes, problem: str) -> None:
    with pytest.raises(AuthenticationError, match=problem):
        _gssapi_exchange(offer)


def test_gssapi_refuses_an_offer_that_does_not_verify() -> None:
    mechanism = Gssapi(ScriptedContext([b"AP-REQ"]))
    assert mechanism.first_message() == b"AP-REQ"
    with pytest.raises(SaslError, match="integrity check failed"):
        mechanism.step(bytes([1, 0, 0, 0]))  # not wrapped


def test_gssapi_context_errors_at_the_first_token_name_the_broker() -> None:
    class Failing(ScriptedContext):
        def step(self, token: bytes | None) -> bytes | None:
            raise SaslError("Server kafka/b@REALM not found in Kerberos database")

    auth = SaslAuthentication(Gssapi(Failing([b"x"])), address="b:1", username=None,
                              handshake_version=1, authenticate_version=2)
    auth.first_request()
    with pytest.raises(AuthenticationError, match=r"SASL GSSAPI with broker b:1: Server"):
        auth.on_response(SaslHandshakeResponse(error_code=0, mechanisms=["GSSAPI"]))
