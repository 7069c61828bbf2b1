"""SASL step machines, checked against the RFC test vectors with fixed nonces."""

from __future__ import annotations

import base64

import pytest

from kafka_ds.protocol.sasl import OAuthBearer, Plain, SaslError, Scram


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
