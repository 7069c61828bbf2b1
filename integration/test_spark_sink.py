"""The pykafka sink in the shared SparkSession, against a real broker.

Everything written is read back by an independent client (confluent-kafka) at
isolation.level=read_committed and compared with the input row by row. Covers batch writes
under every codec (keys, null keys, headers, timestamps, partition column, ignored columns),
a streaming copy topic -> topic whose output must equal its input partition by partition,
keyed placement against Spark's JVM sink (chispa), the column and option errors at query
start, failed batches and streams whose records stay invisible and hold no transaction open,
at-least-once mode, and error summaries.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all, read_committed
from kafka_ds.client.admin import Admin
from kafka_ds.client.producer import Producer
from kafka_ds.spark import PyKafkaDataSource

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Recent (a whole minute, ten minutes ago): records years old are deleted by the broker's
# time-based retention (7 days) at its next check, every 5 minutes and first 30 s after it
# starts, which is when this module's first write lands if it runs first. A read of them
# then finds none (test_batch_write_every_codec[none] saw 0 of 3,000 committed records).
BASE_MS = (int(time.time()) // 60 - 10) * 60_000


@pytest.fixture
def session(spark: Any) -> Iterator[Any]:
    spark.dataSource.register(PyKafkaDataSource)
    yield spark
    for query in spark.streams.active:  # a failed test must not leave a query running
        query.stop()


def _rows_df(spark: Any, count: int, partitions: int = 2) -> Any:
    """key (string, some null), value (binary), headers (some), timestamp, partition (some),
    and a column the sink ignores."""
    return spark.range(0, count, 1, partitions).selectExpr(
        "CASE WHEN id % 11 = 0 THEN NULL ELSE concat('key-', CAST(id % 97 AS STRING)) END "
        "AS key",
        "CAST(concat('value-', CAST(id AS STRING)) AS BINARY) AS value",
        "CASE WHEN id % 5 = 0 THEN array(named_struct('key', 'h', 'value', "
        "CAST(CAST(id AS STRING) AS BINARY)), named_struct('key', 'n', 'value', "
        "CAST(NULL AS BINARY))) END AS headers",
        f"timestamp_millis({BASE_MS} + id) AS timestamp",
        "CASE WHEN id % 7 = 0 THEN CAST(id % 3 AS INT) END AS partition",
        "id AS ignored")


def _expected(kafka: KafkaCluster, topic_factory: Callable[..., str], count: int,
              partitions: int) -> dict[bytes, tuple[Any, ...]]:
    """value -> (key, headers, timestamp, partition or None for "any"): the oracle."""
    keys = [None if i % 11 == 0 else f"key-{i % 97}".encode() for i in range(count)]
    scratch = topic_factory(partitions=partitions, cluster=kafka)
    placed = iter(confluent_partitions(kafka.bootstrap(), scratch,
                                       [k for k in keys if k is not None]))
    expected = {}
    for i, key in enumerate(keys):
        keyed = next(placed) if key is not None else None
        headers = [("h", str(i).encode()), ("n", None)] if i % 5 == 0 else []
        expected[f"value-{i}".encode()] = (key, headers, BASE_MS + i,
                                           i % 3 if i % 7 == 0 else keyed)
    return expected


def _check(read: list[Any], expected: dict[bytes, tuple[Any, ...]]) -> None:
    assert len(read) == len(expected)
    got = {r.value: (r.key, r.headers, r.timestamp_ms, r.partition) for r in read}
    assert set(got) == set(expected)  # every row, once
    for value, (key, headers, timestamp, partition) in expected.items():
        record = got[value]
        assert record[:3] == (key, headers, timestamp), value
        if partition is not None:
            assert record[3] == partition, value


def _write(df: Any, bootstrap: str, **options: str) -> None:
    writer = df.write.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def _open_transactions(bootstrap: str, prefix: str) -> list[str]:
    with Admin.from_properties({"bootstrap.servers": bootstrap}) as admin:
        return sorted(t.transactional_id for t in admin.list_transactions(states=["Ongoing"])
                      if t.transactional_id.startswith(prefix))


@pytest.mark.parametrize("codec", CODECS)
def test_batch_write_every_codec(session: Any, kafka: KafkaCluster,
                                 topic_factory: Callable[..., str], codec: str) -> None:
    topic = topic_factory(partitions=3)
    _write(_rows_df(session, 3000), kafka.bootstrap(), topic=topic,
           **{"kafka.compression.type": codec})
    _check(read_committed(kafka.bootstrap(), topic, 3000),
           _expected(kafka, topic_factory, 3000, 3))


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_value_only_rows_of_fixed_and_varying_width(session: Any, kafka: KafkaCluster,
                                                    topic_factory: Callable[..., str],
                                                    codec: str) -> None:
    # No key, no headers: the encoder's values-only path, with strided copies when every
    # value has one width (here per Spark partition) and a join otherwise. Batches of 64 kB
    # make offset deltas cross the 1-byte varint bound in every batch.
    fixed, varying = topic_factory(partitions=3), topic_factory(partitions=3)
    df = session.range(0, 6000, 1, 2)
    started_ms = int(time.time() * 1000)
    _write(df.selectExpr("lpad(CAST(id AS STRING), 300, 'x') AS value"), kafka.bootstrap(),
           topic=fixed, **{"kafka.compression.type": codec, "kafka.batch.size": "65536"})
    _write(df.selectExpr("repeat(CAST(id AS STRING), CAST(id % 50 AS INT)) AS value"),
           kafka.bootstrap(), topic=varying,
           **{"kafka.compression.type": codec, "kafka.batch.size": "65536"})
    for topic, value_of in ((fixed, lambda i: str(i).rjust(300, "x")),
                            (varying, lambda i: str(i) * (i % 50))):
        read = read_committed(kafka.bootstrap(), topic, 6000)
        assert sorted(r.value for r in read) == sorted(value_of(i).encode()
                                                       for i in range(6000))
        assert {(r.key, tuple(r.headers)) for r in read} == {(None, ())}
        assert min(r.timestamp_ms for r in read) >= started_ms


def test_batch_write_with_a_topic_column_and_at_least_once(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    first, second = topic_factory(partitions=2), topic_factory(partitions=1)
    df = session.range(0, 1000, 1, 2).selectExpr(
        f"CASE WHEN id % 3 = 0 THEN '{second}' ELSE '{first}' END AS topic",
        "CAST(id AS STRING) AS value")
    _write(df, kafka.bootstrap(), deliveryGuarantee="at-least-once")
    one = read_all(kafka.bootstrap(), first, expect=666)
    two = read_all(kafka.bootstrap(), second, expect=334)
    assert sorted(int(r.value) for r in one) == [i for i in range(1000) if i % 3]
    assert sorted(int(r.value) for r in two) == list(range(0, 1000, 3))
    # No transactions: read_committed sees the same records, at once.
    assert len(read_all(kafka.bootstrap(), first, read_committed=True)) == 666


@pytest.fixture(scope="module")
def kafka_tv1(kafka_version: str) -> Iterator[KafkaCluster]:
    """A broker whose finalized transaction.version is 1 (AddPartitionsToTxn, EndTxn v4)."""
    if kafka_version.startswith("3."):
        pytest.skip("Kafka 3.x has only transactions v1: the main broker covers it")
    with KafkaCluster(nodes=1, version=kafka_version,
                      features={"transaction.version": 1}) as cluster:
        yield cluster


def test_batch_write_on_a_transactions_v1_broker(session: Any, kafka_tv1: KafkaCluster,
                                                 topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3, cluster=kafka_tv1)
    _write(_rows_df(session, 2000), kafka_tv1.bootstrap(), topic=topic)
    _check(read_committed(kafka_tv1.bootstrap(), topic, 2000),
           _expected(kafka_tv1, topic_factory, 2000, 3))


def test_empty_input_writes_nothing(session: Any, kafka: KafkaCluster, topic: str) -> None:
    _write(session.range(0).selectExpr("CAST(id AS STRING) AS value"), kafka.bootstrap(),
           topic=topic)
    assert read_all(kafka.bootstrap(), topic, timeout_s=3) == []


def test_keyed_rows_land_where_the_jvm_sink_puts_them(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    from chispa import assert_df_equality

    jvm_topic, our_topic = topic_factory(partitions=7), topic_factory(partitions=7)
    df = session.range(0, 5000, 1, 3).selectExpr(
        "concat('k', CAST(id * 7919 % 100003 AS STRING), repeat('x', CAST(id % 9 AS INT))) "
        "AS key", "CAST(id AS STRING) AS value")
    (df.write.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap())
     .option("topic", jvm_topic).save())
    _write(df, kafka.bootstrap(), topic=our_topic)

    def placed(topic: str) -> Any:
        return (session.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap())
                .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
                .load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                                   "partition"))

    jvm, ours = placed(jvm_topic), placed(our_topic)
    assert ours.count() == 5000
    assert_df_equality(jvm, ours, ignore_row_order=True)


def test_large_lz4_batches_are_read_by_the_jvm_connector(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    # The sink's default batch.size (512 KiB) makes LZ4 frames of many 64 KiB blocks, framed
    # by us around lz4.block: the JVM connector's consumer (Java's Lz4BlockInputStream) must
    # read them back as written.
    from chispa import assert_df_equality

    topic = topic_factory(partitions=2)
    df = session.range(0, 60_000, 1, 2).selectExpr(
        "CAST(substr(concat(lpad(CAST(id AS STRING), 12, '0'), repeat(sha2(CAST(id % 4096 AS "
        "STRING), 256), 2)), 1, 50 + CAST(id % 101 AS INT)) AS BINARY) AS value")
    _write(df, kafka.bootstrap(), topic=topic, **{"kafka.compression.type": "lz4"})
    read = (session.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap())
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
            .load().select("value"))
    assert_df_equality(df, read, ignore_row_order=True)


@pytest.mark.parametrize("codec", CODECS)
def test_streaming_copy_keeps_every_record_in_place(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        codec: str) -> None:
    source, target = topic_factory(partitions=3), topic_factory(partitions=3)
    now_ms = int(time.time() * 1000) - 60_000
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "5"}) as producer:
        for i in range(1500):
            producer.send(source, None if i % 13 == 0 else f"v{i}".encode(),
                          key=None if i % 4 == 0 else f"k{i}".encode(),
                          headers=[("i", str(i).encode())] if i % 2 else None,
                          partition=i % 3, timestamp_ms=now_ms + i)
        producer.flush()
    checkpoint = tempfile.mkdtemp(prefix="sink-stream-")
    query = (session.readStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap()).option("subscribe", source)
             .option("startingOffsets", "earliest").option("includeHeaders", "true")
             .option("maxOffsetsPerTrigger", "500").load()
             .selectExpr("key", "value", "headers", "timestamp", "partition")
             .writeStream.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
             .option("topic", target).option("kafka.compression.type", codec)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3  # several micro-batches, each its own transactions
    expected = read_all(kafka.bootstrap(), source, expect=1500)
    got = read_committed(kafka.bootstrap(), target, 1500)

    def content(records: list[Any]) -> list[tuple[Any, ...]]:
        return [(r.partition, r.key, r.value, r.headers, r.timestamp_ms) for r in records]

    assert content(got) == content(expected)  # same partitions, same order in each
    prefix = f"pykafka-{query.id}"
    assert _open_transactions(kafka.bootstrap(), prefix) == []


def _stream(session: Any, kafka: KafkaCluster, source: str, target: str,
            **options: str) -> Any:
    writer = (session.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap()).option("subscribe", source)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load()
              .select("value").writeStream.format("pykafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap()).option("topic", target)
              .option("checkpointLocation", tempfile.mkdtemp(prefix="sink-stream-")))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None
    return query


def test_a_new_query_reusing_a_prefix_starts_afresh(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    first, second, target = (topic_factory(partitions=2) for _ in range(3))
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        for i in range(1200):
            producer.send(first if i < 600 else second, f"row-{i}".encode(), partition=i % 2)
        producer.flush()
    prefix = f"shared-{uuid.uuid4().hex[:8]}"
    _stream(session, kafka, first, target, transactionalIdPrefix=prefix)  # batches 0..1
    # A new checkpoint, the same prefix: the old query's intent (batch 1) is not this
    # query's, whose batches 0 and 1 must be written, not skipped as replays.
    _stream(session, kafka, second, target, transactionalIdPrefix=prefix)
    got = read_committed(kafka.bootstrap(), target, 1200)
    assert sorted(int(r.value[4:]) for r in got) == list(range(1200))
    assert _open_transactions(kafka.bootstrap(), prefix) == []


@pytest.mark.parametrize(("select", "options", "message"), [
    (["CAST(id AS STRING) AS key"], {}, "Required attribute 'value' not found"),
    (["id AS value"], {}, "value attribute unsupported type bigint. value must be a(n) string "
                          "or binary"),
    (["'v' AS value", "id AS key"], {}, "key attribute unsupported type bigint"),
    (["'v' AS value", "CAST(id AS STRING) AS partition"], {},
     "partition attribute unsupported type string. partition must be a(n) int"),
    (["'v' AS value", "array('a') AS headers"], {},
     "headers attribute unsupported type array<string>"),
    (["'v' AS value", "'x' AS timestamp"], {}, "timestamp attribute unsupported type string"),
    (["'v' AS value"], {"topic": None},
     "topic option required when no 'topic' attribute is present"),
    (["'v' AS value"], {"kafka.bootstrap.servers": None},
     "option 'kafka.bootstrap.servers' is required"),
    (["'v' AS value"], {"kafka.key.serializer": "x"}, "'kafka.key.serializer' is not supported"),
    (["'v' AS value"], {"kafka.transactional.id": "x"}, "set the option transactionalIdPrefix"),
    (["'v' AS value"], {"kafka.acks": "1"}, "kafka.acks=1 cannot be used with "
                                            "deliveryGuarantee=exactly-once"),
    (["'v' AS value"], {"deliveryGuarantee": "twice"},
     "option 'deliveryGuarantee' must be 'exactly-once'"),
    (["'v' AS value"], {"kafka.transaction.timeout.ms": "3600000"},
     "kafka.transaction.timeout.ms=3600000 is above the broker's transaction.max.timeout.ms "
     "(900000)"),
    (["'v' AS value"], {"topic": "no-such-topic-anywhere"},
     "topic 'no-such-topic-anywhere' (option 'topic') does not exist"),
])
def test_column_and_option_errors_at_query_start(session: Any, kafka: KafkaCluster, topic: str,
                                                 select: list[str], options: dict[str, Any],
                                                 message: str) -> None:
    settings = {"kafka.bootstrap.servers": kafka.bootstrap(), "topic": topic, **options}
    writer = session.range(3).selectExpr(*select).write.format("pykafka")
    for key, value in settings.items():
        if value is not None:
            writer = writer.option(key, value)
    with pytest.raises(Exception, match=re.escape(message)):
        writer.mode("append").save()
    assert read_all(kafka.bootstrap(), topic, timeout_s=2) == []


def test_overwrite_mode_is_refused(session: Any, kafka: KafkaCluster, topic: str) -> None:
    with pytest.raises(Exception, match="Save mode Overwrite not allowed for Kafka"):
        (session.range(3).selectExpr("'v' AS value").write.format("pykafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap()).option("topic", topic)
         .mode("overwrite").save())


def test_streaming_option_error_fails_the_query(session: Any, kafka: KafkaCluster,
                                                topic: str) -> None:
    query = (session.readStream.format("rate").load().selectExpr("value AS value")
             .writeStream.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
             .option("topic", topic)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="sink-error-")).start())
    with pytest.raises(Exception, match="value attribute unsupported type bigint"):
        query.awaitTermination(120)
    query.stop()


def test_null_topic_in_the_data_fails_with_a_summary(session: Any, kafka: KafkaCluster,
                                                     topic: str) -> None:
    df = session.range(0, 100, 1, 1).selectExpr(
        f"CASE WHEN id % 10 = 3 THEN NULL ELSE '{topic}' END AS topic",
        "CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as error:
        _write(df, kafka.bootstrap())
    text = str(error.value)
    assert "Null topic present in the data (10 row(s) of this task: row 3 (topic null), row 13 "\
           "(topic null), row 23 (topic null) and 7 more)" in text
    assert read_all(kafka.bootstrap(), topic, read_committed=True, timeout_s=2) == []


def test_rejected_records_are_summarised_not_listed(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=1, config={"message.timestamp.before.max.ms": "60000"})
    df = session.range(0, 1000, 1, 1).selectExpr(
        "CAST(id AS STRING) AS value", "timestamp_millis(978307200000 + id) AS timestamp")
    with pytest.raises(Exception) as error:
        _write(df, kafka.bootstrap(), topic=topic)
    text = str(error.value)
    assert "INVALID_TIMESTAMP" in text
    assert "1000 record(s) rejected" in text and "and 997 more" in text
    assert len(re.findall(r"record \d+:", text)) <= 6  # a few named, never one per record


def _failing_value(spark: Any, fail_on: str, bootstrap: str, topic: str,
                   sent_at_least: int) -> Any:
    """A UDF passing values through, but failing on ``fail_on`` once ``topic`` holds at least
    ``sent_at_least`` records (committed or not): the rows before it have then reached the
    sink and been sent, so the abort that follows has something to undo. Waiting on the topic,
    not on a clock, keeps this true on a loaded machine."""
    from pyspark.sql.functions import udf

    def value(text: str) -> str:
        if text == fail_on:
            _wait_for_records(bootstrap, topic, sent_at_least, timeout_s=120)
            raise ValueError("injected input failure")
        return text

    return udf(value, "string")


def _wait_for_records(bootstrap: str, topic: str, count: int, timeout_s: float) -> None:
    """Until the high watermarks of ``topic`` add up to ``count`` (or the time is up: the
    test's own assertion then reports what was there)."""
    from confluent_kafka import Consumer, TopicPartition

    # read_uncommitted: librdkafka's watermark query follows the consumer's isolation level,
    # and its default (read_committed) answers the last stable offset, which an open
    # transaction holds back: the wait then always ran out (120 s) before the failure.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks",
                         "isolation.level": "read_uncommitted"})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                        for p in partitions)
            if total >= count:
                return
            time.sleep(0.2)
    finally:
        consumer.close()


def test_a_failed_batch_write_leaves_nothing_visible_or_open(
        session: Any, kafka: KafkaCluster, topic: str) -> None:
    prefix = f"failing-{uuid.uuid4().hex[:8]}"
    # Row 2,500 of partition 1, once partition 0's task has sent some of its rows.
    fail = _failing_value(session, "7500", kafka.bootstrap(), topic, sent_at_least=100)
    df = session.range(0, 10_000, 1, 2).selectExpr("CAST(id AS STRING) AS text") \
        .select(fail("text").alias("value"))
    with pytest.raises(Exception, match="injected input failure"):
        _write(df, kafka.bootstrap(), topic=topic, transactionalIdPrefix=prefix,
               maxRowsPerSend="100")
    written = read_all(kafka.bootstrap(), topic)  # read_uncommitted: the aborted records
    assert len(written) >= 100  # rows before the failure were sent, then aborted
    assert read_all(kafka.bootstrap(), topic, read_committed=True, timeout_s=5) == []
    assert _open_transactions(kafka.bootstrap(), prefix) == []
    # Nothing holds the last stable offset back: a later write is readable at once.
    _write(session.range(10).selectExpr("CAST(id AS STRING) AS value"), kafka.bootstrap(),
           topic=topic)
    after = read_committed(kafka.bootstrap(), topic, 10)
    assert sorted(int(r.value) for r in after) == list(range(10))


def test_a_failed_micro_batch_leaves_nothing_visible_or_open(
        session: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    source, target = topic_factory(partitions=2), topic_factory(partitions=2)
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        for i in range(3000):
            producer.send(source, f"row-{i}".encode(), partition=i % 2)
        producer.flush()
    # In batch 1, once rows of batch 1 beyond batch 0's 1000 have been sent.
    fail = _failing_value(session, "row-1601", kafka.bootstrap(), target, sent_at_least=1_100)
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    query = (session.readStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap()).option("subscribe", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000").load()
             .selectExpr("CAST(value AS STRING) AS text").select(fail("text").alias("value"))
             .writeStream.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
             .option("topic", target).option("maxRowsPerSend", "100")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="sink-abort-"))
             .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match="injected input failure"):
            query.awaitTermination(300)
    finally:
        session.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    committed = read_committed(kafka.bootstrap(), target, 1000)
    assert sorted(int(r.value[4:]) for r in committed) == list(range(1000))  # batch 0 only
    assert len(read_all(kafka.bootstrap(), target)) > 1000  # batch 1 was sent, then aborted
    assert _open_transactions(kafka.bootstrap(), f"pykafka-{query.id}") == []
