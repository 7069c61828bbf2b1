"""``varint_arrays.decode_varints`` against kafka-python's scalar encoder (an independent one).

Most of its use is covered through the record decoders; these tests pin the edges the decoders
lean on: every varint length up to the limit, and what an over-long varint does with and
without ``overlong``.
"""

from __future__ import annotations

import numpy as np
import pytest
from kafka.record.util import encode_varint

from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.varint_arrays import decode_varints

# Zigzag values of every encoded length from one byte to five (a record varint's limit).
VALUES = [0, -1, 1, 63, -64, 64, 8191, -8192, 8192, 1_048_575, -1_048_576, 1_048_576,
          2**31 - 1, -(2**31)]


def _encoded(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    out = bytearray()
    positions = []
    for value in values:
        positions.append(len(out))
        encode_varint(value, out.append)
    return np.frombuffer(bytes(out), dtype=np.uint8), np.array(positions, dtype=np.int64)


def test_every_length_up_to_five_bytes_decodes_as_kafka_python_encoded_it() -> None:
    data, positions = _encoded(VALUES)
    values, after = decode_varints(data, positions, 5, "test")
    assert values.tolist() == VALUES
    assert after.tolist() == [*positions[1:].tolist(), len(data)]


# Six continuation bytes, then a last one: a seven-byte varint, over a record varint's five.
OVERLONG = bytes([0xFF] * 6 + [0x01])


def test_an_overlong_varint_raises_naming_where_it_starts() -> None:
    data, positions = _encoded(VALUES)
    at = len(data)
    data = np.frombuffer(data.tobytes() + OVERLONG, dtype=np.uint8)
    with pytest.raises(DecodeError) as raised:
        decode_varints(data, np.append(positions, at), 5, "record length")
    assert "varint longer than 5 bytes" in str(raised.value)
    assert raised.value.position == at


def test_with_overlong_given_an_overlong_varint_decodes_as_that_value_and_the_rest_as_usual(
        ) -> None:
    # What the record decoder's length check relies on: a wrongly guessed record start may
    # read such bytes, and must fail the check there rather than abort the whole decode.
    data, positions = _encoded(VALUES)
    at = len(data)
    data = np.frombuffer(data.tobytes() + OVERLONG, dtype=np.uint8)
    rows = np.insert(positions, 3, at)  # among the others, not last
    values, after = decode_varints(data, rows, 5, "record length", overlong=-1)
    assert values.tolist() == [*VALUES[:3], -1, *VALUES[3:]]
    expected_after = [*positions[1:].tolist(), at]
    assert [p for i, p in enumerate(after.tolist()) if i != 3] == expected_after
