"""The fetcher against a real broker: sessions on the wire, Arrow output, edges, transactions.

Data is written by confluent-kafka (the independent client) and, where it matters, read back by
it too: our Arrow rows must equal librdkafka's row for row.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from integration.fetch_helpers import (
    arrow_rows,
    by_partition,
    confluent_rows,
    produce,
    produce_values,
)
from integration.harness.cluster import KafkaCluster
from integration.producer_util import wait_until_stable
from integration.props import kafka_ds_properties
from kafka_ds.client.admin import Admin
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.protocol.errors import DataLossError, DecodeError, KafkaTimeoutError
from kafka_ds.protocol.record_columns import SPARK_SCHEMA, SPARK_SCHEMA_WITH_HEADERS
from kafka_ds.protocol.types import IsolationLevel, TopicPartition

FetcherFactory = Callable[..., Fetcher]


@pytest.fixture
def make_fetcher(kafka: KafkaCluster) -> Iterator[FetcherFactory]:
    made: list[Fetcher] = []

    def make(**options: Any) -> Fetcher:
        props = {**kafka_ds_properties(kafka), **{k.replace("_", "."): str(v).lower()
                                                  if isinstance(v, bool) else str(v)
                                                  for k, v in options.items()}}
        fetcher = Fetcher.from_properties(props)
        made.append(fetcher)
        return fetcher

    yield make
    for fetcher in made:
        fetcher.close()


def _latest(fetcher: Fetcher, topic: str, partitions: int,
            isolation: int = IsolationLevel.READ_UNCOMMITTED) -> dict[int, int]:
    found = latest_offsets(fetcher.cluster, [TopicPartition(topic, p) for p in range(partitions)],
                           isolation_level=isolation)
    return {tp.partition: offset for tp, offset in found.items()}


def _mixed_records(partitions: int, count: int) -> list[dict[str, Any]]:
    base_ms = int(time.time() * 1000) - 3_600_000
    records = []
    for i in range(count):
        record: dict[str, Any] = {
            "partition": i % partitions, "timestamp": base_ms + i * 7,
            "key": None if i % 5 == 0 else b"key-%d" % i,
            "value": None if i % 11 == 0 else (b"v%d-" % i) * (1 + i % 40),
        }
        if i % 3 == 0:
            record["headers"] = [("h1", b"a%d" % i), ("dup", None), ("dup", b""), ("é", b"\x00")]
        elif i % 3 == 1:
            record["headers"] = [("only", b"x" * (i % 7))]
        records.append(record)
    return records


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_arrow_equals_confluent_row_for_row(kafka: KafkaCluster, topic_factory: Callable[..., str],
                                            make_fetcher: FetcherFactory,
                                            compression: str) -> None:
    topic = topic_factory(partitions=3)
    produce(kafka, topic, _mixed_records(3, 3000), **{"compression.type": compression})
    fetcher = make_fetcher(include_headers=True, max_partition_fetch_bytes=32_768)
    ends = _latest(fetcher, topic, 3)
    batches = list(fetcher.read_arrow([(topic, p, 0, ends[p]) for p in range(3)]))
    assert all(batch.schema == SPARK_SCHEMA_WITH_HEADERS for batch in batches)
    ours = by_partition(arrow_rows(batches))
    for partition in range(3):
        theirs = confluent_rows(kafka, topic, partition, 0, ends[partition])
        assert len(theirs) == ends[partition] == 1000
        assert ours[partition] == theirs
    # Without headers: Spark's 7-column schema, same rows otherwise.
    plain = list(fetcher.read_arrow([(topic, 1, 10, 20)], include_headers=False))
    assert plain[0].schema == SPARK_SCHEMA
    assert plain[0].column("offset").to_pylist() == list(range(10, 20))


def test_log_append_time_and_plain_records(kafka: KafkaCluster,
                                           topic_factory: Callable[..., str],
                                           make_fetcher: FetcherFactory) -> None:
    topic = topic_factory(config={"message.timestamp.type": "LogAppendTime"})
    produce(kafka, topic, _mixed_records(1, 200), **{"compression.type": "lz4"})
    fetcher = make_fetcher(include_headers=True)
    rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 200)])))
    assert rows == confluent_rows(kafka, topic, 0, 0, 200)
    assert {row["timestampType"] for row in rows} == {1}
    # The plain record iterator gives the same records as objects.
    records = list(fetcher.read_records([(topic, 0, 0, 200)]))
    assert [r.offset for _, r in records] == list(range(200))
    assert [(r.key, r.value, r.timestamp_ms, r.timestamp_type) for _, r in records] == [
        (row["key"], row["value"], row["timestamp_ms"], row["timestampType"]) for row in rows]
    assert [r.headers for _, r in records] == [
        [(h["key"], h["value"]) for h in row["headers"] or []] for row in rows]


def test_sessions_are_incremental_on_the_wire(kafka: KafkaCluster,
                                              topic_factory: Callable[..., str],
                                              make_fetcher: FetcherFactory) -> None:
    topic = topic_factory(partitions=2)
    produce_values(kafka, topic, 100, partition=0)
    produce_values(kafka, topic, 50, partition=1)
    fetcher = make_fetcher(fetch_max_wait_ms=100)
    # p0's range ends past what exists: the fetcher waits for it while p1 is long done.
    late = threading.Timer(1.5, produce_values, (kafka, topic, 50), {"partition": 0})
    late.start()
    try:
        rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 150), (topic, 1, 0, 50)])))
    finally:
        late.join()
    assert [r["offset"] for r in rows if r["partition"] == 0] == list(range(150))
    assert [r["offset"] for r in rows if r["partition"] == 1] == list(range(50))

    sent = fetcher.sent_requests
    first, *steady, close = sent
    assert first.is_full and first.request.session_id == 0 and first.request.session_epoch == 0
    assert {(t.topic_id, p.partition) for t in first.request.topics for p in t.partitions} == {
        (first.request.topics[0].topic_id, 0), (first.request.topics[0].topic_id, 1)}
    session_id = steady[0].request.session_id
    assert session_id != 0
    epochs = [s.request.session_epoch for s in steady]
    assert epochs == list(range(1, len(steady) + 1)), "one session, epoch + 1 each time"
    assert all(not s.is_full and s.request.session_id == session_id for s in steady)
    # p1 finished in the first response: the next request forgets it.
    assert [f.partitions for f in steady[0].request.forgotten_topics_data] == [[1]]
    # While nothing changes (waiting for p0's data), requests carry no partitions at all.
    empty = [s for s in steady if not s.request.topics and not s.request.forgotten_topics_data]
    assert len(empty) >= 3, [s.request for s in steady]
    # Done: the session is closed with epoch -1.
    assert (close.request.session_id, close.request.session_epoch) == (session_id, -1)
    assert fetcher.metrics.full_requests == 1 and fetcher.metrics.session_resets == 0


@pytest.mark.parametrize("decode_threads", [0, 2])
def test_prefetch_and_memory_bounds(kafka: KafkaCluster, topic_factory: Callable[..., str],
                                    make_fetcher: FetcherFactory, decode_threads: int) -> None:
    topic = topic_factory()
    produce_values(kafka, topic, 20_000, value_bytes=200, **{"batch.size": 16_384})
    fetcher = make_fetcher(max_partition_fetch_bytes=65_536, arrow_batch_rows=2_000,
                           decode_threads=decode_threads)
    batches = fetcher.read_arrow([(topic, 0, 0, 20_000)])
    first = next(batches)
    # The second Fetch went out before the first response was decoded and handed out.
    assert len(fetcher.sent_requests) >= 2
    rest = list(batches)
    offsets = [o for b in [first, *rest] for o in b.column("offset").to_pylist()]
    assert offsets == list(range(20_000))
    assert max(b.num_rows for b in [first, *rest]) <= 2_000
    # Each position was asked for once: positions only move forward, no data fetched twice.
    fetch_offsets = [p.fetch_offset for s in fetcher.sent_requests for t in s.request.topics
                     for p in t.partitions]
    assert fetch_offsets == sorted(set(fetch_offsets))
    assert fetcher.metrics.records == 20_000
    # Responses stay within max.partition.fetch.bytes (plus at most one batch, KIP-74).
    assert fetcher.metrics.bytes < 20_000 * 230
    assert fetcher.metrics.fetch_requests >= 20_000 * 200 // (65_536 + 16_384)


@pytest.mark.parametrize("decode_threads", [0, 1, 2])
@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_compressed_topics_read_like_librdkafka(kafka: KafkaCluster,
                                                topic_factory: Callable[..., str],
                                                make_fetcher: FetcherFactory, codec: str,
                                                decode_threads: int) -> None:
    """Batches compressed by librdkafka's codecs, read in every decode mode (the pool scans and
    decompresses chunks ahead while the calling thread finishes earlier ones)."""
    # Half text that compresses, half random bytes that do not (lz4 stores such blocks
    # uncompressed): about 1.2 MB per partition.
    topic = _half_random_topic(kafka, topic_factory, codec, 2_000, lambda i: 10 + i % 50, 300,
                               batch_bytes=65_536)
    # Small fetches: many responses, so that several chunks are scanned ahead at once.
    fetcher = make_fetcher(max_partition_fetch_bytes=65_536, decode_threads=decode_threads,
                           include_headers=True)
    _assert_reads_like_librdkafka(kafka, fetcher, topic, 2_000)
    assert fetcher.metrics.fetch_requests >= 6


def _half_random_topic(kafka: KafkaCluster, topic_factory: Callable[..., str], codec: str,
                       records: int, text_repeats: Callable[[int], int], random_bytes: int,
                       batch_bytes: int) -> str:
    """A 2-partition topic written by librdkafka with ``codec``: ``records`` per partition,
    each value a repeated text part then ``random_bytes`` random ones."""
    topic = topic_factory(partitions=2)
    rnd = random.Random(codec)
    for partition in range(2):
        produce(kafka, topic, [{"value": (b"%06d-" % i) * text_repeats(i)
                                + rnd.randbytes(random_bytes),
                                "key": b"k%d" % i, "partition": partition}
                               for i in range(records)],
                **{"compression.type": codec, "batch.size": batch_bytes, "linger.ms": 50})
    return topic


def _assert_reads_like_librdkafka(kafka: KafkaCluster, fetcher: Fetcher, topic: str,
                                  records: int) -> None:
    ours = by_partition(arrow_rows(list(fetcher.read_arrow(
        [(topic, p, 0, records) for p in range(2)]))))
    for partition in range(2):
        assert ours[partition] == confluent_rows(kafka, topic, partition, 0, records)


@pytest.mark.parametrize("receive_ahead", [True, False])
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_receiving_ahead_reads_like_librdkafka(kafka: KafkaCluster,
                                               topic_factory: Callable[..., str],
                                               make_fetcher: FetcherFactory, codec: str,
                                               receive_ahead: bool) -> None:
    """Chunks of 1 MiB and more are decoded while a helper thread receives the next response
    (``receive.ahead``): the rows are librdkafka's either way, and the helper did run
    (counted per fetcher) only where it is on."""
    # 1.5 KB values, half text, half random bytes: about 3-4 MB per partition compressed
    # (librdkafka writes a batch uncompressed when the codec would not shrink it).
    topic = _half_random_topic(kafka, topic_factory, codec, 4_000, lambda i: 100, 800,
                               batch_bytes=131_072)
    fetcher = make_fetcher(max_partition_fetch_bytes=1_500_000, receive_ahead=receive_ahead,
                           include_headers=True)
    _assert_reads_like_librdkafka(kafka, fetcher, topic, 4_000)
    if receive_ahead:
        assert fetcher.metrics.received_ahead >= 1
    else:
        assert fetcher.metrics.received_ahead == 0


def test_decode_threads_keep_the_decompression_cap(kafka: KafkaCluster,
                                                   topic_factory: Callable[..., str],
                                                   make_fetcher: FetcherFactory) -> None:
    topic = topic_factory()
    produce(kafka, topic, [{"value": bytes(200_000), "partition": 0} for _ in range(20)],
            **{"compression.type": "zstd", "batch.size": 4_000_000, "linger.ms": 100,
               "message.max.bytes": 8_000_000})
    fetcher = make_fetcher(fetch_max_decompressed_bytes=1_000_000, decode_threads=1)
    with pytest.raises(DecodeError, match="decompressed data would exceed 1000000 bytes"):
        list(fetcher.read_arrow([(topic, 0, 0, 20)]))


def test_range_edges(kafka: KafkaCluster, topic_factory: Callable[..., str],
                     make_fetcher: FetcherFactory) -> None:
    topic = topic_factory()
    # Big compressed batches: offsets 37 and 512 fall inside batches.
    produce_values(kafka, topic, 1000, **{"compression.type": "lz4", "linger.ms": 200,
                                          "batch.size": 1_000_000})
    fetcher = make_fetcher()
    rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 37, 512)])))
    assert [r["offset"] for r in rows] == list(range(37, 512))
    assert rows[0]["value"].startswith(b"00000037")
    # An empty range sends nothing and yields nothing.
    assert list(fetcher.read_arrow([(topic, 0, 5, 5)])) == []
    assert fetcher.sent_requests == []
    # One-record ranges at the start, inside a batch and at the very end.
    for offset in (0, 399, 999):
        got = arrow_rows(list(fetcher.read_arrow([(topic, 0, offset, offset + 1)])))
        assert [r["offset"] for r in got] == [offset]
    with pytest.raises(ValueError, match="start <= end"):
        list(fetcher.read_arrow([(topic, 0, 9, 3)]))


def test_deleted_records_are_data_loss(kafka: KafkaCluster, topic_factory: Callable[..., str],
                                       make_fetcher: FetcherFactory) -> None:
    topic = topic_factory()
    produce_values(kafka, topic, 100)
    fetcher = make_fetcher()
    Admin(fetcher.cluster).delete_records({TopicPartition(topic, 0): 40})
    with pytest.raises(DataLossError) as caught:
        list(fetcher.read_arrow([(topic, 0, 10, 100)]))
    loss = caught.value
    assert (loss.topic, loss.partition, loss.requested_offset, loss.available_offset) == (
        topic, 0, 10, 40)
    assert "fail.on.data.loss" in str(loss)

    skipping = make_fetcher(fail_on_data_loss=False)
    rows = arrow_rows(list(skipping.read_arrow([(topic, 0, 10, 100)])))
    assert [r["offset"] for r in rows] == list(range(40, 100))
    assert skipping.metrics.data_loss_incidents == 1
    assert skipping.metrics.offsets_skipped == 30
    # A range that was deleted entirely yields nothing.
    assert list(skipping.read_arrow([(topic, 0, 0, 30)])) == []


def _transactional_log(kafka: KafkaCluster, topic: str) -> None:
    """Three transactional producers (different codecs), commits and aborts interleaved in the
    log, plus plain records between them."""
    codecs = ["lz4", "zstd", "gzip"]
    producers = []
    for index, codec in enumerate(codecs):
        producer = Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": 2,
                             "compression.type": codec,
                             "transactional.id": f"fetch-txn-{index}-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions()
        producers.append(producer)
    plain = Producer({"bootstrap.servers": kafka.bootstrap(), "compression.type": "snappy"})
    for round_index in range(4):
        for producer in producers:
            producer.begin_transaction()
        for chunk in range(3):  # interleave the open transactions in the log
            for index, producer in enumerate(producers):
                for j in range(15):
                    value = b"p%d-r%d-c%d-%d" % (index, round_index, chunk, j)
                    producer.produce(topic, value=value, partition=0)
                producer.flush()
            value = b"plain-r%d-c%d" % (round_index, chunk)
            plain.produce(topic, value=value, partition=0)
            plain.flush()
        for index, producer in enumerate(producers):
            if (index + round_index) % 3 == 0:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    assert plain.flush(10) == 0


@pytest.mark.parametrize("decode_threads", [0, 2])
def test_transactions_read_committed_and_uncommitted(kafka: KafkaCluster,
                                                     topic_factory: Callable[..., str],
                                                     make_fetcher: FetcherFactory,
                                                     decode_threads: int) -> None:
    topic = topic_factory()
    _transactional_log(kafka, topic)
    # Under transactions v1 (Kafka 3.x) the markers are written after EndTxn returns: the
    # last transaction is below the LSO only once they are.
    wait_until_stable(kafka.bootstrap(), topic)
    committed_reader = make_fetcher(isolation_level="read_committed", include_headers=True,
                                    max_partition_fetch_bytes=4_096,
                                    decode_threads=decode_threads)
    lso = _latest(committed_reader, topic, 1, IsolationLevel.READ_COMMITTED)[0]
    ours = arrow_rows(list(committed_reader.read_arrow([(topic, 0, 0, lso)])))
    theirs = confluent_rows(kafka, topic, 0, 0, lso, isolation="read_committed")
    assert ours == theirs
    values = [r["value"] for r in ours]
    # Exactly the committed records: producer i's round r committed unless (i + r) % 3 == 0.
    expected_producers = {(i, r) for i in range(3) for r in range(4) if (i + r) % 3}
    from_txns = {tuple(int(x[1:]) for x in v.split(b"-")[:2]) for v in values
                 if not v.startswith(b"plain")}
    assert from_txns == expected_producers
    assert len(values) == len(expected_producers) * 45 + 12
    offsets = [r["offset"] for r in ours]
    assert offsets == sorted(offsets)

    uncommitted_reader = make_fetcher(max_partition_fetch_bytes=4_096, include_headers=True)
    all_rows = arrow_rows(list(uncommitted_reader.read_arrow([(topic, 0, 0, lso)])))
    assert all_rows == confluent_rows(kafka, topic, 0, 0, lso)
    assert len(all_rows) == 12 * 45 + 12  # every data record, no transaction markers
    assert {r["value"] for r in ours} < {r["value"] for r in all_rows}


def test_read_committed_waits_for_an_open_transaction(kafka: KafkaCluster,
                                                      topic_factory: Callable[..., str],
                                                      make_fetcher: FetcherFactory) -> None:
    topic = topic_factory()
    produce_values(kafka, topic, 10)
    producer = Producer({"bootstrap.servers": kafka.bootstrap(),
                         "transactional.id": f"open-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"open-%d" % i, partition=0)
    producer.flush()
    fetcher = make_fetcher(isolation_level="read_committed", fetch_timeout_ms=2_000,
                           fetch_max_wait_ms=100)
    high = _latest(fetcher, topic, 1)[0]
    assert high == 15 and _latest(fetcher, topic, 1, IsolationLevel.READ_COMMITTED)[0] == 10
    # Planned past the LSO (read_uncommitted end): the read waits, then fails naming the LSO.
    with pytest.raises(KafkaTimeoutError, match="last stable offset is 10"):
        list(fetcher.read_arrow([(topic, 0, 0, high)]))
    # If the transaction ends meanwhile, the same read completes (the marker is offset 15).
    patient = make_fetcher(isolation_level="read_committed", fetch_timeout_ms=30_000,
                           fetch_max_wait_ms=100)
    commit = threading.Timer(1.0, producer.commit_transaction)
    commit.start()
    try:
        rows = arrow_rows(list(patient.read_arrow([(topic, 0, 0, 16)])))
    finally:
        commit.join()
    assert [r["offset"] for r in rows] == list(range(15))


def test_options_are_checked(kafka: KafkaCluster, make_fetcher: FetcherFactory) -> None:
    from kafka_ds.protocol.errors import ConfigError

    with pytest.raises(ConfigError, match=r"isolation\.level"):
        make_fetcher(isolation_level="serializable")
    with pytest.raises(ConfigError, match=r"fetch\.max\.bytes"):
        make_fetcher(fetch_max_bytes="lots")
    with pytest.raises(ConfigError, match=r"check\.crcs"):
        make_fetcher(check_crcs="maybe")


def test_arrow_batches_cross_partitions_keep_per_partition_order(
        kafka: KafkaCluster, topic_factory: Callable[..., str],
        make_fetcher: FetcherFactory) -> None:
    topic = topic_factory(partitions=4)
    for partition in range(4):
        produce_values(kafka, topic, 3_000 + partition, partition=partition)
    fetcher = make_fetcher(max_partition_fetch_bytes=16_384, arrow_batch_rows=10_000,
                           decode_threads=2)
    table = pa.Table.from_batches(list(fetcher.read_arrow(
        [(topic, p, 100, 3_000) for p in range(4)])))
    for partition in range(4):
        offsets = table.filter(pa.compute.equal(table["partition"], partition))["offset"]
        assert offsets.to_pylist() == list(range(100, 3_000))


@pytest.mark.parametrize("damage", ["unknown_session", "wrong_epoch"])
def test_session_errors_from_the_broker_fall_back_to_a_full_fetch(
        kafka: KafkaCluster, topic_factory: Callable[..., str], make_fetcher: FetcherFactory,
        damage: str) -> None:
    """A broker that lost our session (evicted, restarted) or disagrees on the epoch answers
    FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH: we fetch in full and go on."""
    topic = topic_factory()
    produce_values(kafka, topic, 5_000, **{"batch.size": 16_384})
    fetcher = make_fetcher(max_partition_fetch_bytes=16_384, arrow_batch_rows=500)
    batches = fetcher.read_arrow([(topic, 0, 0, 5_000)])
    got = [next(batches) for _ in range(2)]
    loop = fetcher._loop
    assert loop is not None
    (node,) = loop._nodes.values()
    original_id = node.session.session_id
    # Damage the session as the broker would see it, as if it had moved on without us. The
    # request already in flight commits when its answer arrives: damage what it leaves behind.
    session = node.session
    commit = session.on_response

    def damaged(*args: Any) -> Any:
        outcome = commit(*args)
        session.on_response = commit  # type: ignore[method-assign]
        if damage == "unknown_session":
            session.session_id = 0x7FFF0001
        else:
            session.next_epoch += 5
        return outcome

    session.on_response = damaged  # type: ignore[method-assign]
    got += list(batches)
    assert [o for b in got for o in b.column("offset").to_pylist()] == list(range(5_000))
    assert fetcher.metrics.session_resets == 1
    assert fetcher.metrics.full_requests == 2
    full_after = [s for s in fetcher.sent_requests[1:] if s.is_full
                  and s.request.session_epoch == 0]
    # Not found: start from scratch (0, 0). Wrong epoch: retire the session we had (id, 0).
    expected_id = 0 if damage == "unknown_session" else original_id
    assert full_after and full_after[0].request.session_id == expected_id
