"""The producer's column encoders write exactly the records section kafka-python writes.

The oracle is kafka-python's ``DefaultRecordBatchBuilder`` (an independent implementation of
record format v2): its uncompressed batch, minus the 61-byte header, is the records section.
"""

from __future__ import annotations

import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_ds.protocol import batch_encoder

BASE_MS = 1_800_000_000_000
HEADER_BYTES = 61


def _reference(values, timestamps, keys=None, headers=None) -> bytes:  # type: ignore[no-untyped-def]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 31)
    for index, value in enumerate(values):
        appended = builder.append(index, timestamps[index], keys[index] if keys else None,
                                  value, list(headers[index]) if headers else [])
        assert appended is not None
    return bytes(builder.build()[HEADER_BYTES:])


@pytest.mark.parametrize("seed", range(40))
def test_random_batches_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([1, 2, 17, 64, 65, 300, 9000, 17000])
    sizes = [0, 1, 100, 20000] if count < 1000 else [0, 7, 100]
    values = [None if rng.random() < 0.05 else rng.randbytes(rng.choice(sizes))
              for _ in range(count)]
    if rng.random() < 0.5:
        values = [value or b"" for value in values]
    keys = None
    if rng.random() < 0.5:
        keys = [None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 30))
                for _ in range(count)]
    headers = None
    if rng.random() < 0.2:
        headers = [[("h", rng.randbytes(3)), ("n", None)] if rng.random() < 0.5 else []
                   for _ in range(count)]
    jitter = rng.choice([0, 1, 1000, 10**9])
    timestamps = [BASE_MS + rng.randint(-jitter, jitter) for _ in range(count)]
    expected = _reference(values, timestamps, keys, headers)
    assert batch_encoder.encode_section(values, timestamps, keys, headers) == expected
    assert batch_encoder.encode_section_simple(values, timestamps, keys, headers) == expected


@pytest.mark.parametrize("count", [63, 64, 65, 8191, 8192, 8193, 16_383, 16_384, 20_000])
def test_uniform_batches_across_varint_widths(count: int) -> None:
    values = [b"same-size-value"] * count
    timestamps = [BASE_MS] * (count // 2) + [BASE_MS + 100] * (count - count // 2)
    assert batch_encoder.encode_section(values, timestamps) == _reference(values, timestamps)


@pytest.mark.parametrize("records_per_ms", [7, 700])
@pytest.mark.parametrize("count", [1, 2, 64, 65, 2000, 8193])
def test_unkeyed_batches_with_recurring_lengths_and_rising_timestamps(
        count: int, records_per_ms: int) -> None:
    """The per-record producer's usual batch: values of a few recurring lengths, timestamps
    that rise a millisecond every few (short runs, a loop) or many records (long runs, laid
    out by slices)."""
    rng = random.Random(count)
    values = [rng.randbytes(rng.choice([0, 5, 100, 100, 100, 3000])) for _ in range(count)]
    timestamps = [BASE_MS + index // records_per_ms for index in range(count)]
    assert batch_encoder.encode_section(values, timestamps) == _reference(values, timestamps)


def test_pieces_kept_across_batches_stay_exact_when_their_caches_fill(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pieces of each value length (keyed: key and value length) are kept from
    batch to batch, per timestamp delta and offset width. Batch after batch of unkeyed and
    keyed records of recurring and new lengths, with the caches bounded tightly enough to be
    emptied many times over (and runs with more lengths than a cache may hold), match the
    reference, including a value past the varint table (the per-record loop's case)."""
    for cache in ("_HEADS", "_KEYED_HEADS", "_TAILS"):
        monkeypatch.setattr(batch_encoder, cache, {})
    monkeypatch.setattr(batch_encoder, "_HEADS_MAX_KEYS", 3)
    monkeypatch.setattr(batch_encoder, "_HEADS_MAX_SHAPES", 20)
    rng = random.Random(11)
    emptied = 0
    for batch in range(80):
        count = rng.choice([1, 9, 70, 400])
        values = [rng.randbytes(rng.randint(0, 120)) for _ in range(count)]
        keys = [rng.randbytes(rng.randint(1, 3)) for _ in range(count)] if batch % 2 else None
        if batch == 30:
            values[-1] = rng.randbytes(20_000)
        timestamps = [BASE_MS + rng.randint(0, 4) + index // 50 for index in range(count)]
        held = sum(map(len, batch_encoder._HEADS.values()))
        assert batch_encoder.encode_section(values, timestamps, keys) == \
            _reference(values, timestamps, keys), batch
        emptied += sum(map(len, batch_encoder._HEADS.values())) < held
        for kept in (batch_encoder._HEADS, batch_encoder._KEYED_HEADS):
            assert len(kept) <= 3
            assert all(len(heads) <= 20 for heads in kept.values())
    assert batch_encoder._HEADS and batch_encoder._KEYED_HEADS  # both were used
    assert emptied > 0  # the bounds were reached and the caches started over


class _EmptiedAtOnce(dict):
    """A cache that another thread empties right after every write to it."""

    def __setitem__(self, key: object, value: object) -> None:
        pass

    def update(self, *args: object, **kwargs: object) -> None:
        pass


def test_a_run_uses_the_pieces_it_learned_when_another_thread_empties_the_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sender threads of several producers share the caches: one may empty a cache
    between another's learning a run's pieces and its using them. Each run uses the pieces it
    learned, so the bytes stay exact (before, this raised KeyError out of the encoder)."""
    monkeypatch.setattr(batch_encoder, "_heads_for",
                        lambda cache, delta_bytes, offset_width: _EmptiedAtOnce())
    rng = random.Random(5)
    for index in range(8):
        count = rng.choice([9, 70, 300])
        values = [rng.randbytes(rng.randint(0, 12)) for _ in range(count)]
        keys = [rng.randbytes(rng.randint(1, 3)) for _ in range(count)] if index % 2 else None
        timestamps = [BASE_MS + offset // 40 for offset in range(count)]
        assert batch_encoder.encode_section(values, timestamps, keys) == \
            _reference(values, timestamps, keys)


@pytest.mark.parametrize("seed", range(6))
def test_unkeyed_batches_with_timestamps_out_of_order(seed: int) -> None:
    """Threads sending at once can append a record stamped a millisecond before the one
    ahead of it: runs of equal timestamps are then short, and still encoded exactly."""
    rng = random.Random(seed)
    count = rng.choice([9, 100, 3000])
    values = [rng.randbytes(rng.choice([1, 50, 50, 200])) for _ in range(count)]
    timestamps = [BASE_MS] + [BASE_MS + rng.randint(0, 3) + index // 20
                              for index in range(1, count)]
    assert batch_encoder.encode_section(values, timestamps) == _reference(values, timestamps)


@pytest.mark.parametrize("records_per_ms", [7, 700, -1])
@pytest.mark.parametrize("count", [1, 2, 64, 65, 2000, 8193])
def test_keyed_batches_take_the_sliced_path_and_match_the_reference(
        count: int, records_per_ms: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key on every record (the keyed per-record producer's batch): keys and values of a
    few recurring lengths (empty ones too), rising timestamps or (-1) a few out of order.
    They go through _encode_run_keyed, not the per-record loop, and match kafka-python."""
    rng = random.Random(count * 1000 + records_per_ms)
    keys = [rng.randbytes(rng.choice([0, 6, 9, 9, 200])) for _ in range(count)]
    values = [rng.randbytes(rng.choice([0, 5, 100, 100, 3000])) for _ in range(count)]
    if records_per_ms > 0:
        timestamps = [BASE_MS + index // records_per_ms for index in range(count)]
    else:
        timestamps = [BASE_MS] + [BASE_MS + rng.randint(0, 3) + index // 20
                                  for index in range(1, count)]
    runs: list[int] = []
    keyed_run = batch_encoder._encode_run_keyed

    def spy(parts: list[bytes], *args: object) -> None:
        runs.append(1)
        keyed_run(parts, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(batch_encoder, "_encode_run_keyed", spy)
    expected = _reference(values, timestamps, keys)
    assert batch_encoder.encode_section(values, timestamps, keys) == expected
    assert runs  # the sliced keyed path wrote the section


def test_keyed_batches_with_a_null_key_fall_back_exactly() -> None:
    keys: list[bytes | None] = [b"k1", None, b"k3"] * 50
    values = [b"v" * 10] * 150
    timestamps = [BASE_MS] * 150
    assert batch_encoder.encode_section(values, timestamps, keys) == \
        _reference(values, timestamps, keys)
