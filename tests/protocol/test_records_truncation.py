"""Every prefix of a valid buffer decodes as fewer batches; trailing garbage spares the rest."""

from __future__ import annotations

import contextlib
import random

import pytest
from record_samples import random_batches
from test_legacy_records import build

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_builder import encode_control_batch
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.records import ControlRecordType, iter_batches


def _buffer() -> tuple[bytes, list[int]]:
    rnd = random.Random(11)
    encoded, _ = random_batches(rnd, 5, base_offset=1000, max_records=6, max_value_bytes=60)
    parts = [*encoded[:2], encode_control_batch(ControlRecordType.COMMIT, producer_id=7,
                                                producer_epoch=1, base_offset=5000),
             *encoded[2:]]
    ends, at = [], 0
    for part in parts:
        at += len(part)
        ends.append(at)
    return b"".join(parts), ends


BUFFER, ENDS = _buffer()
LEGACY = build(1, Compression.GZIP) + build(0, Compression.NONE, first_offset=105)


def _complete(ends: list[int], cut: int) -> int:
    return sum(1 for end in ends if end <= cut)


def test_every_prefix_decodes_as_complete_batches_plus_a_partial_one() -> None:
    for cut in range(len(BUFFER) + 1):
        prefix = BUFFER[:cut]
        reader = iter_batches(prefix)
        batches = [(batch, batch.records()) for batch in reader]
        complete = _complete(ENDS, cut)
        assert len(batches) == complete
        assert reader.position == (ENDS[complete - 1] if complete else 0)
        assert reader.has_partial_batch == (cut != reader.position)
        columns = decode_columns(prefix, include_headers=True)
        assert len(columns.batches) == complete
        assert columns.bytes_consumed == reader.position
        assert columns.has_partial_batch == reader.has_partial_batch
        assert len(columns) == sum(len(records) for batch, records in batches
                                   if not batch.is_control)


def test_every_prefix_of_a_legacy_message_set() -> None:
    for cut in range(len(LEGACY) + 1):
        reader = iter_batches(LEGACY[:cut])
        for batch in reader:
            batch.records()
        columns = decode_columns(LEGACY[:cut])
        assert columns.bytes_consumed == reader.position
        assert columns.has_partial_batch == (cut != reader.position)


@pytest.mark.parametrize("seed", range(40))
def test_trailing_garbage_spares_the_complete_batches(seed: int) -> None:
    rnd = random.Random(seed)
    garbage = rnd.randbytes(rnd.randint(1, 200))
    if seed % 4 == 0:  # garbage that looks like a batch start: a small length field
        garbage = rnd.randbytes(8) + rnd.randint(0, 60).to_bytes(4, "big") + garbage
    buf = BUFFER + garbage
    reader = iter_batches(buf)
    seen = 0
    try:
        for batch in reader:
            batch.records()
            seen += 1
    except DecodeError:
        pass
    assert seen >= len(ENDS)  # every complete batch came out before anything was raised
    columns = decode_columns(buf, on_corrupt="truncate", include_headers=True)
    assert len(columns.batches) >= len(ENDS)
    reference = decode_columns(BUFFER, include_headers=True)
    assert columns.offsets[:len(reference)].tolist() == reference.offsets.tolist()
    with contextlib.suppress(DecodeError):
        decode_columns(buf)
