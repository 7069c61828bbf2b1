"""Truncated and over-long input for every response class (h11's byte-at-a-time discipline).

Responses arrive from the network, so the decoder must cope with whatever a frame holds. For
each response class at its lowest, first flexible and highest version, a valid encoding with
every field set (``rich``: arrays of two, no nulls, tagged and unknown tags present) and the
all-default encoding are checked:

- every proper prefix raises ``DecodeError`` (never another exception, never a hang: the
  decoder reads left to right, so it needs exactly the bytes the full encoding had);
- with bytes after the message, ``decode`` stops at the message's end and leaves them, also
  when the message starts at a non-zero position, while ``decode_exact`` refuses them.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from schema_samples import declared_responses, key_versions, random_message

from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.schema import ApiMessage, decode, decode_exact, encode

CASES = [(cls, version) for cls in declared_responses() for version in key_versions(cls)]
TRAILER = b"\x00\x01\xff trailing"


def _id(value: Any) -> str:
    return value.__name__ if isinstance(value, type) else f"v{value}"


def _encodings(cls: type[ApiMessage], version: int) -> list[bytes]:
    rng = random.Random(f"{cls.__name__}-{version}")
    return [bytes(encode(random_message(cls, version, rng, rich=True), version)),
            bytes(encode(cls(), version))]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("cls", "version"), CASES, ids=_id)
def test_every_truncation_raises_decode_error(cls: type[ApiMessage], version: int) -> None:
    for encoded in _encodings(cls, version):
        view = memoryview(encoded)
        for size in range(len(encoded)):
            try:
                decode(cls, version, view[:size])
            except DecodeError:
                continue
            pytest.fail(f"{cls.__name__} v{version}: a {size}-byte prefix of "
                        f"{len(encoded)} bytes decoded")


@pytest.mark.parametrize(("cls", "version"), CASES, ids=_id)
def test_trailing_bytes_are_left_unconsumed(cls: type[ApiMessage], version: int) -> None:
    for encoded in _encodings(cls, version):
        expected = decode_exact(cls, version, encoded)
        message, end = decode(cls, version, encoded + TRAILER)
        assert (message, end) == (expected, len(encoded))
        message, end = decode(cls, version, TRAILER + encoded + TRAILER, len(TRAILER))
        assert (message, end) == (expected, len(TRAILER) + len(encoded))
        with pytest.raises(DecodeError, match="unexpected bytes"):
            decode_exact(cls, version, encoded + TRAILER)
