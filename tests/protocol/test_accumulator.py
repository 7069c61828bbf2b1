"""The record accumulator as a state machine, driven with explicit times (no clock, no I/O)."""

from __future__ import annotations

from kafka_ds.protocol.accumulator import (
    RECORD_OVERHEAD_BOUND,
    CompressionRatioEstimator,
    RecordAccumulator,
    record_bytes_bound,
)
from kafka_ds.protocol.batch_encoder import encode_section
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.records import HEADER_BYTES

VALUE = b"v" * 100
SIZE = RECORD_OVERHEAD_BOUND + 100


def _accumulator(**overrides: int) -> RecordAccumulator:
    settings = {"batch_size_bytes": 1000, "linger_ms": 10, "buffer_memory_bytes": 10_000,
                "retry_backoff_ms": 100, "delivery_timeout_ms": 5_000}
    settings.update(overrides)
    return RecordAccumulator(**settings)  # type: ignore[arg-type]


def _leader(topic: str, partition: int) -> int:
    return partition  # partition p is led by broker p


def test_size_bound_covers_the_encoded_record() -> None:
    for key, value, headers in [(None, VALUE, None), (b"k" * 40, b"", None),
                                (b"k", None, [("h", b"x"), ("n", None)])]:
        encoded = encode_section([value], [1_000], [key], [headers or ()])
        assert record_bytes_bound(key, value, headers) >= len(encoded)


def test_appends_fill_a_batch_then_open_another() -> None:
    acc = _accumulator()
    results = [acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0) for _ in range(20)]
    batches = {id(r[0]) for r in results if r}
    limit_records = (1000 - HEADER_BYTES) // SIZE
    assert len(batches) == -(-20 // limit_records)
    assert [r[2] for r in results[:limit_records + 1]] == [True] + [False] * (limit_records - 1) \
        + [True]
    assert acc.used_bytes == 20 * SIZE


def test_ready_after_linger_or_when_full() -> None:
    acc = _accumulator()
    acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0)
    nodes, next_ms, unknown = acc.ready(5, _leader)
    assert nodes == set() and next_ms == 10 and not unknown
    assert acc.ready(10, _leader)[0] == {0}
    # A full batch on partition 1 is ready at once.
    for _ in range(10):
        acc.append("t", 1, None, VALUE, 1, None, SIZE, now_ms=0)
    assert acc.ready(1, _leader)[0] == {1}
    # Flushing makes everything ready.
    acc.flushes_in_progress += 1
    assert acc.ready(1, _leader)[0] == {0, 1}


def test_unknown_leader_is_reported() -> None:
    acc = _accumulator()
    acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0)
    assert acc.ready(100, lambda topic, partition: -1)[2] == {"t"}


def test_drain_one_batch_per_partition_within_max_request_size() -> None:
    acc = _accumulator(batch_size_bytes=600)
    for partition in (0, 2, 4):  # all led by broker 0 below
        for _ in range(8):
            acc.append("t", partition, None, VALUE, 1, None, SIZE, now_ms=0)
    drained = acc.drain([0], lambda t, p: 0, max_request_bytes=1100, now_ms=100)
    batches = drained[0]
    assert len({b.partition for b in batches}) == len(batches)  # one per partition
    assert len(batches) == 2  # 4 records each (529 bytes): a third would pass 1100
    assert all(b.closed for b in batches)
    again = acc.drain([0], lambda t, p: 0, max_request_bytes=10**6, now_ms=100)
    assert len(again[0]) == 3


def test_buffer_memory_would_block_then_frees() -> None:
    acc = _accumulator(buffer_memory_bytes=3 * SIZE)
    for _ in range(3):
        assert acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0) is not None
    assert acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0) is None
    (batch,) = acc.drain([0], _leader, 10**6, now_ms=100)[0]
    acc.deallocate(batch)
    assert acc.used_bytes == 0
    assert acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0) is not None


def test_retries_go_back_in_order_after_backoff() -> None:
    acc = _accumulator(batch_size_bytes=300)
    for _ in range(6):
        acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0)
    first = acc.drain([0], _leader, 10**6, now_ms=100)[0][0]
    second = acc.drain([0], _leader, 10**6, now_ms=100)[0][0]
    acc.reenqueue(second, now_ms=200)
    acc.reenqueue(first, now_ms=200)
    assert [b.order for b in acc.queued("t", 0)][:2] == [first.order, second.order]
    assert acc.ready(250, _leader)[0] == set()  # backing off
    assert acc.drain([0], _leader, 10**6, now_ms=300)[0][0] is first


def test_expired_batches_leave_the_queue() -> None:
    acc = _accumulator()
    acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0)
    assert acc.expired(4_999) == []
    (batch,) = acc.expired(5_000)
    assert batch.record_count == 1 and not acc.has_undrained()


def test_split_keeps_records_in_order() -> None:
    acc = _accumulator(batch_size_bytes=100_000, buffer_memory_bytes=10**6)
    for i in range(50):
        acc.append("t", 0, None, b"%03d" % i + VALUE, 1_000 + i, None, SIZE + 3, now_ms=0)
    (big,) = acc.drain([0], _leader, 10**6, now_ms=100)[0]
    acc.batch_size_bytes = 1000
    pieces = acc.split(big, now_ms=200)
    assert len(pieces) > 1 and all(p.order > big.order for p in pieces)
    values = [v for p in pieces for v in p.values]
    assert values == big.values
    assert list(acc.queued("t", 0)) == pieces


def test_compression_ratio_estimate_moves_in_bounded_steps() -> None:
    ratios = CompressionRatioEstimator()
    codec = Compression.ZSTD
    assert ratios.estimate("t", codec) == 1.0
    ratios.observe("t", codec, 0.2)
    assert ratios.estimate("t", codec) == 1.0 - 0.005
    for _ in range(1000):
        ratios.observe("t", codec, 0.2)
    assert ratios.estimate("t", codec) == 0.2
    ratios.observe("t", codec, 0.9)
    assert abs(ratios.estimate("t", codec) - 0.25) < 1e-9  # up by at most 0.05
    assert ratios.estimate("other", codec) == 1.0
    # The margin: a batch's uncompressed room is (size - header) / (ratio * 1.05).
    assert ratios.batch_limit_bytes("t", codec, 16_384) == int((16_384 - HEADER_BYTES)
                                                               / (0.25 * 1.05))
    ratios.reset("t", codec, 0.5)
    assert ratios.estimate("t", codec) == 1.0


def test_well_compressed_data_grows_batches_only_up_to_the_uncompressed_cap() -> None:
    """At a 1:100 ratio the estimate alone would open batches of ~100 x batch.size; the
    accumulator stops them at max_batch_uncompressed_bytes (the producer's max.request.size),
    and never below batch.size."""
    codec = Compression.ZSTD
    capped = _accumulator(batch_size_bytes=16_384, buffer_memory_bytes=1 << 30,
                          compression=codec, max_batch_uncompressed_bytes=100_000)
    uncapped = _accumulator(batch_size_bytes=16_384, buffer_memory_bytes=1 << 30,
                            compression=codec)
    for acc in (capped, uncapped):
        for _ in range(300):
            acc.ratios.observe("t", codec, 0.01)
    assert uncapped.batch_limit_bytes("t") > 1_000_000  # what the estimate alone allows
    assert capped.batch_limit_bytes("t") == 100_000
    first = None
    for index in range(2_000):
        batch, _, _ = capped.append("t", 0, None, VALUE, index, None, SIZE, now_ms=0)  # type: ignore[misc]
        first = first or batch
        if batch is not first:
            break
    assert first is not None and first.closed
    assert 100_000 - SIZE < first.size_bytes <= 100_000
    # A cap under batch.size is raised to it: batch.size is what the user asked for.
    small = _accumulator(batch_size_bytes=16_384, max_batch_uncompressed_bytes=1_000)
    assert small.batch_limit_bytes("t") == 16_384 - HEADER_BYTES


def test_a_batch_that_stops_being_the_open_one_is_closed() -> None:
    """The producer's lane appends to a batch while it is not closed: every way a batch stops
    being its partition's newest queued one must close it, or records would land behind
    newer ones (or in a batch nobody sends)."""
    acc = _accumulator()
    first = acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0)
    assert first is not None and not first[0].closed
    # Full: a record that does not fit opens the next batch.
    appended = [acc.append("t", 0, None, VALUE, 1, None, SIZE, now_ms=0) for _ in range(10)]
    assert first[0].closed and appended[-1] is not None and not appended[-1][0].closed
    # append_many opening a batch closes the one it could not fill.
    open_batch = appended[-1][0]
    touched: list = []
    values = [VALUE] * 10
    cumulative = [SIZE * i for i in range(11)]
    acc.append_many("t", 0, None, values, [1] * 10, cumulative, 0, 0, touched)
    assert open_batch in touched and open_batch.closed and not touched[-1].closed
    # Expired while still open (queued alone, linger not passed).
    late = acc.append("t", 1, None, VALUE, 1, None, SIZE, now_ms=0)
    assert late is not None and not late[0].closed
    assert late[0] in acc.expired(5_000) and late[0].closed
    # Removed (an abort drops batches never sent).
    dropped = acc.append("t", 2, None, VALUE, 1, None, SIZE, now_ms=6_000)
    assert dropped is not None
    assert acc.remove_queued(lambda batch: batch.partition == 2) == [dropped[0]]
    assert dropped[0].closed
