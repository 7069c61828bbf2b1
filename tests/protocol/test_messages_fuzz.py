"""Hostile bytes for every response class: the decoder may only succeed or raise DecodeError.

A response comes from the network; a broken broker, a proxy or a bug on our side must show
up as a ``DecodeError`` naming the field, never as ``struct.error``, ``UnicodeDecodeError``,
``IndexError``, ``MemoryError`` or a hang. Each case is random bytes or a valid encoding
(``schema_samples``) damaged by a few mutations: bit flips, boundary bytes (0x00, 0x7f, 0x80,
0xff), large 4-byte lengths, insertions, deletions, truncation. Every case must also decode
within a time and memory budget (``tracemalloc``), and a case that does decode must survive
encode then decode unchanged.

``KAFKA_DS_FUZZ_CASES`` sets the total number of cases (default 10,000, spread evenly over
the response classes; 1,000,000 for a long run) and ``KAFKA_DS_FUZZ_SEED`` the seed. A
failure prints the class, version and input in hex, to paste into a regression test.
"""

from __future__ import annotations

import os
import random
import time
import tracemalloc
from typing import Any

import pytest
from schema_samples import all_versions, declared_responses, random_message

from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.messages.api_versions import ApiVersionsResponse
from kafka_ds.protocol.messages.fetch import FetchResponse
from kafka_ds.protocol.messages.metadata import MetadataResponse
from kafka_ds.protocol.schema import ApiMessage, decode, decode_exact, encode

RESPONSES = declared_responses()
TOTAL_CASES = int(os.environ.get("KAFKA_DS_FUZZ_CASES", "10000"))
CASES_PER_CLASS = max(1, TOTAL_CASES // len(RESPONSES))
SEED = os.environ.get("KAFKA_DS_FUZZ_SEED", "kafka_ds")
SAMPLES_PER_VERSION = 4
# Budgets per case. A decoded message costs at most a few hundred bytes of objects per input
# byte (a one-byte flexible struct becomes an instance and a dict); an allocation sized from
# a corrupt length prefix would blow far past this.
MAX_SECONDS_PER_CASE = 1.0
MAX_BYTES_PER_INPUT_BYTE = 1000
BASE_ALLOWANCE = 1 << 20

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF)
INTERESTING_WORDS = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                     b"\xff\xff\xff\x0f", b"\x00\x00\xff\xff")


def _id(value: Any) -> str:
    return value.__name__


def _mutate(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        position = rng.randrange(len(data) + 1)
        if kind == 0 and data:  # flip one bit
            index = min(position, len(data) - 1)
            data[index] ^= 1 << rng.randrange(8)
        elif kind == 1 and data:  # a boundary byte
            data[min(position, len(data) - 1)] = rng.choice(INTERESTING_BYTES)
        elif kind == 2:  # a large length or count
            data[position:position + 4] = rng.choice(INTERESTING_WORDS)
        elif kind == 3:  # insert random bytes
            data[position:position] = rng.randbytes(rng.randint(1, 4))
        elif kind == 4:  # delete a few bytes
            del data[position:position + rng.randint(1, 4)]
        elif kind == 5:  # truncate
            del data[position:]
        else:  # repeat a slice
            end = min(len(data), position + rng.randint(1, 8))
            data[position:position] = data[position:end]


def _check_case(cls: type[ApiMessage], version: int, data: bytes) -> None:
    """Decode ``data``; on success, the message must survive encode then decode."""
    try:
        message, end = decode(cls, version, data)
    except DecodeError:
        return
    assert 0 < end <= len(data)
    again = encode(message, version)
    assert decode_exact(cls, version, again) == message


def _timed_check(cls: type[ApiMessage], version: int, data: bytes) -> float:
    """Run ``_check_case``; returns the CPU seconds it took (other processes do not count)."""
    started = time.process_time()
    _check_case(cls, version, data)
    return time.process_time() - started


def _describe(cls: type[ApiMessage], version: int, data: bytes, case: int) -> str:
    return (f"{cls.__name__} v{version}, case {case} (seed {SEED!r}), "
            f"{len(data)} bytes: {data.hex()}")


@pytest.mark.timeout(max(120, CASES_PER_CLASS // 20))
@pytest.mark.parametrize("cls", RESPONSES, ids=_id)
def test_fuzz_decode(cls: type[ApiMessage]) -> None:
    rng = random.Random(f"{SEED}-{cls.__name__}")
    samples = [
        (version, bytes(encode(random_message(cls, version, rng, rich=index == 0), version)))
        for version in all_versions(cls)
        for index in range(SAMPLES_PER_VERSION)
    ]
    versions = all_versions(cls)
    tracemalloc.start()
    try:
        for case in range(CASES_PER_CLASS):
            if rng.random() < 0.15:
                version = rng.choice(versions)
                data = rng.randbytes(rng.choice((rng.randint(0, 16), rng.randint(0, 256))))
            else:
                version, sample = rng.choice(samples)
                mutated = bytearray(sample)
                _mutate(mutated, rng)
                data = bytes(mutated)
                if rng.random() < 0.1:  # the same bytes read as another version
                    version = rng.choice(versions)
            tracemalloc.reset_peak()
            try:
                elapsed = _timed_check(cls, version, data)
                if elapsed > MAX_SECONDS_PER_CASE:  # a slow machine moment, or a slow input?
                    elapsed = min(_timed_check(cls, version, data) for _ in range(2))
            except Exception as exc:
                raise AssertionError(f"{type(exc).__name__}: {exc}\n"
                                     f"{_describe(cls, version, data, case)}") from exc
            peak = tracemalloc.get_traced_memory()[1]
            assert elapsed < MAX_SECONDS_PER_CASE, _describe(cls, version, data, case)
            assert peak < BASE_ALLOWANCE + MAX_BYTES_PER_INPUT_BYTE * len(data), (
                f"{peak} bytes allocated: {_describe(cls, version, data, case)}")
    finally:
        tracemalloc.stop()


# Hand-made hostile inputs: lengths and counts far beyond the buffer, overlong varints, bad
# UTF-8, tags out of order. Each must fail fast with DecodeError.
HOSTILE = [
    # FetchResponse v4: throttle, then a responses count of 2**31 - 1 in a 10-byte buffer.
    (FetchResponse, 4, "00000000" "7fffffff" "0000"),
    # FetchResponse v4: one topic whose name claims 32767 bytes.
    (FetchResponse, 4, "00000000" "00000001" "7fff" "61"),
    # MetadataResponse v12: throttle, then a compact array length of 2**32 - 1 (5-byte varint).
    (MetadataResponse, 12, "00000000" "ffffffff0f"),
    # MetadataResponse v12: an unsigned varint longer than 5 bytes.
    (MetadataResponse, 12, "00000000" "ffffffffffff01"),
    # MetadataResponse v1: a broker host that is not UTF-8.
    (MetadataResponse, 1, "00000001" "00000001" "0002" "c328" "00000000" "ffff"),
    # ApiVersionsResponse v3: tagged-field count 2**32 - 1 after an empty body.
    (ApiVersionsResponse, 3, "0000" "01" "00000000" "ffffffff0f"),
    # ApiVersionsResponse v3: a tagged field claiming 2**32 - 2 bytes.
    (ApiVersionsResponse, 3, "0000" "01" "00000000" "01" "05" "feffffff0f" "00"),
    # ApiVersionsResponse v3: a tag number of 35 bits (5-byte varint): it could never be
    # written back, since tags are uint32.
    (ApiVersionsResponse, 3, "0000" "01" "00000000" "01" "83c6d4941c" "00"),
    # ApiVersionsResponse v3: tags 7 then 5 (they must strictly rise).
    (ApiVersionsResponse, 3, "0000" "01" "00000000" "02" "07" "00" "05" "00"),
    # ApiVersionsResponse v3: known tag 1 (an int64) holding 3 bytes.
    (ApiVersionsResponse, 3, "0000" "01" "00000000" "01" "01" "03" "000000"),
    # ApiVersionsResponse v0: a negative array count other than -1.
    (ApiVersionsResponse, 0, "0000" "fffffffe"),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("cls", "version", "hex_input"), HOSTILE,
                         ids=[f"{cls.__name__}-v{version}-{index}"
                              for index, (cls, version, _) in enumerate(HOSTILE)])
def test_hostile_input_fails_cleanly(cls: type[ApiMessage], version: int, hex_input: str) -> None:
    with pytest.raises(DecodeError):
        decode_exact(cls, version, bytes.fromhex(hex_input))
