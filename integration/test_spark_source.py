"""``format("pykafka")`` reads what Spark's JVM connector reads, batch and streaming.

Real broker, real Spark; the JVM connector (``format("kafka")``) is the oracle and chispa
compares the DataFrames row for row, schemas included. One topic per codec (none, gzip,
snappy, lz4, zstd), each with several partitions, keys, null keys and values, and headers
(duplicates, empty values, non-ASCII keys), all read by one query per format; then a
transactional topic with commits, aborts and a transaction still open, under both isolation
levels.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from integration.fetch_helpers import produce
from integration.harness.cluster import KafkaCluster
from integration.spark_source_util import (
    assert_same,
    mixed_records,
    read_batch,
    reader_options,
    run_available_now,
)
from kafka_ds.client.admin import Admin
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark import PyKafkaDataSource

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def codec_topics(kafka: KafkaCluster) -> dict[str, str]:
    """codec -> topic (3 partitions, 600 mixed records written with that codec)."""
    run = uuid.uuid4().hex[:6]
    topics = {}
    for codec in CODECS:
        topic = f"src-codec-{run}-{codec}"
        kafka.create_topic(topic, 3)
        produce(kafka, topic, mixed_records(3, 600, codec), **{"compression.type": codec,
                                                              "linger.ms": 20})
        topics[codec] = topic
    return topics


@pytest.mark.parametrize("include_headers", [True, False])
def test_batch_read_equals_jvm_for_every_codec(spark: Any, kafka: KafkaCluster,
                                               codec_topics: dict[str, str],
                                               include_headers: bool) -> None:
    options = reader_options(kafka, subscribe=",".join(codec_topics.values()),
                             includeHeaders=str(include_headers).lower())
    ours = read_batch(spark, "pykafka", options)
    jvm = read_batch(spark, "kafka", options)
    assert_same(ours, jvm)
    assert ours.count() == 5 * 600
    assert ours.select("topic").distinct().count() == 5


def test_stream_available_now_equals_jvm_for_every_codec(spark: Any, kafka: KafkaCluster,
                                                         codec_topics: dict[str, str]) -> None:
    run = next(iter(codec_topics.values())).split("-")[2]
    options = reader_options(kafka, subscribePattern=f"^src-codec-{run}-",
                             startingOffsets="earliest", includeHeaders="true")
    ours, _ = run_available_now(spark, "pykafka", options)
    jvm, _ = run_available_now(spark, "kafka", options)
    assert_same(ours, jvm)
    assert ours.count() == 5 * 600


def test_explicit_registration_and_bounded_batch(spark: Any, kafka: KafkaCluster,
                                                 codec_topics: dict[str, str]) -> None:
    # Registering the class by hand works beside the automatic registration.
    spark.dataSource.register(PyKafkaDataSource)
    topic = codec_topics["lz4"]
    options = reader_options(kafka, assign=f'{{"{topic}": [0, 2]}}',
                             startingOffsets=f'{{"{topic}": {{"0": 10, "2": -2}}}}',
                             endingOffsets=f'{{"{topic}": {{"0": 150, "2": -1}}}}')
    ours = read_batch(spark, "pykafka", options)
    assert_same(ours, read_batch(spark, "kafka", options))
    assert ours.count() == 140 + 200


# --- transactions --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def transactional_topic(kafka: KafkaCluster) -> Iterator[tuple[str, Producer]]:
    """2 partitions: committed and aborted transactions interleaved with plain records, and
    one transaction left open while the tests read (aborted at teardown)."""
    topic = f"src-txn-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, 2)
    producers = []
    for index, codec in enumerate(["lz4", "zstd"]):
        producer = Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": 2,
                             "compression.type": codec,
                             "transactional.id": f"src-txn-{index}-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions()
        producers.append(producer)
    plain = Producer({"bootstrap.servers": kafka.bootstrap()})
    for round_index in range(3):
        for producer in producers:
            producer.begin_transaction()
        for chunk in range(2):
            for index, producer in enumerate(producers):
                for j in range(20):
                    producer.produce(topic, partition=j % 2, key=b"p%d" % index,
                                     value=b"p%d-r%d-c%d-%d" % (index, round_index, chunk, j))
                producer.flush()
            plain.produce(topic, partition=chunk % 2, value=b"plain-r%d-c%d" % (round_index,
                                                                                 chunk))
            plain.flush()
        for index, producer in enumerate(producers):
            if (index + round_index) % 2 == 0:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    # Committed records after an open transaction: read_committed must stop before them.
    open_txn = producers[0]
    open_txn.begin_transaction()
    for j in range(10):
        open_txn.produce(topic, partition=j % 2, value=b"open-%d" % j)
    open_txn.flush()
    producers[1].begin_transaction()
    for j in range(6):
        producers[1].produce(topic, partition=j % 2, value=b"after-open-%d" % j)
    producers[1].commit_transaction()
    assert plain.flush(10) == 0
    yield topic, open_txn
    open_txn.abort_transaction()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_transactions_equal_jvm(spark: Any, kafka: KafkaCluster,
                                transactional_topic: tuple[str, Producer],
                                isolation: str) -> None:
    topic, _ = transactional_topic
    options = reader_options(kafka, subscribe=topic, **{"kafka.isolation.level": isolation})
    ours = read_batch(spark, "pykafka", options)
    assert_same(ours, read_batch(spark, "kafka", options))
    values = {row.value for row in ours.select("value").collect()}
    aborted = {v for v in values if v.startswith(b"p0-r0") or v.startswith(b"p1-r1")}
    if isolation == "read_committed":
        # aborted transactions dropped; the open one and what follows it not yet readable
        assert not aborted
        assert not any(v.startswith((b"open-", b"after-open-")) for v in values)
        assert any(v.startswith(b"p1-r0") for v in values)
    else:
        assert aborted and any(v.startswith(b"open-") for v in values)

    stream_options = {**options, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "70"}
    ours_stream, progress = run_available_now(spark, "pykafka", stream_options)
    jvm_stream, _ = run_available_now(spark, "kafka", stream_options)
    assert_same(ours_stream, jvm_stream)
    assert_same(ours_stream, ours)
    assert len([p for p in progress if p["numInputRows"]]) >= 2


# --- timestamps and data loss --------------------------------------------------------------------

def test_timestamp_options_equal_jvm(spark: Any, kafka: KafkaCluster,
                                     codec_topics: dict[str, str]) -> None:
    topic = codec_topics["zstd"]
    # Timestamps of the records at offsets 50 and 150 of partition 0 (mixed_records spaces
    # record timestamps 3 ms apart, increasing with the offset in every partition).
    stamps = {row.offset: row.timestamp for row in read_batch(
        spark, "kafka", reader_options(kafka, assign=f'{{"{topic}": [0]}}'))
        .where("offset in (50, 150)").select("offset", "timestamp").collect()}
    start_ms, end_ms = (int(stamps[o].timestamp() * 1000) for o in (50, 150))
    cases = [
        {"startingTimestamp": start_ms, "endingTimestamp": end_ms},
        {"startingOffsetsByTimestamp": json.dumps({topic: {"0": start_ms, "1": 0, "2": end_ms}}),
         "endingOffsetsByTimestamp": json.dumps({topic: {"0": end_ms, "1": end_ms,
                                                         "2": end_ms + 10**9}})},
    ]
    for extra in cases:
        options = reader_options(kafka, subscribe=topic, **extra)
        ours = read_batch(spark, "pykafka", options)
        assert_same(ours, read_batch(spark, "kafka", options))
        assert 0 < ours.count() < 600
    stream_options = reader_options(kafka, subscribe=topic, startingTimestamp=start_ms)
    ours, _ = run_available_now(spark, "pykafka", stream_options)
    jvm, _ = run_available_now(spark, "kafka", stream_options)
    assert_same(ours, jvm)
    assert 0 < ours.count() < 600


def _same_data_loss(spark: Any, options: dict[str, str], fail_on_data_loss: bool,
                    offsets: list[int], needles: list[str]) -> None:
    """A batch read that meets missing offsets: with failOnDataLoss=false both connectors
    return the same rows (at ``offsets``); otherwise both fail, ours naming ``needles``."""
    if not fail_on_data_loss:
        ours = read_batch(spark, "pykafka", options)
        assert_same(ours, read_batch(spark, "kafka", options))
        assert [row.offset for row in ours.select("offset").collect()] == offsets
        return
    for fmt in ("kafka", "pykafka"):
        with pytest.raises(Exception) as info:
            read_batch(spark, fmt, options).collect()
        if fmt == "pykafka":
            assert "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE" in str(info.value)
            assert all(needle in str(info.value) for needle in needles), str(info.value)


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_records_deleted_before_they_are_read(spark: Any, kafka: KafkaCluster,
                                              topic_factory: Any,
                                              fail_on_data_loss: bool) -> None:
    topic = topic_factory(partitions=1)
    produce(kafka, topic, [{"value": b"r%d" % i} for i in range(100)])
    with Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        assert admin.delete_records({TopicPartition(topic, 0): 40}) == {
            TopicPartition(topic, 0): 40}
    options = reader_options(kafka, subscribe=topic,
                             startingOffsets=json.dumps({topic: {"0": 10}}),
                             failOnDataLoss=str(fail_on_data_loss).lower())
    _same_data_loss(spark, options, fail_on_data_loss, list(range(40, 100)),
                    [f"{topic}-0", "failOnDataLoss"])


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
def test_an_ending_offset_beyond_the_log_end(spark: Any, kafka: KafkaCluster,
                                             topic_factory: Any,
                                             fail_on_data_loss: bool) -> None:
    """endingOffsets names offset 60 of a partition whose log ends at 50 (the same as a log
    truncated under a planned range). After the poll timeout both connectors report data
    loss: the rows that exist and nothing else with failOnDataLoss=false, a failure that
    names the partition otherwise (ours used to time out either way)."""
    topic = topic_factory(partitions=1)
    produce(kafka, topic, [{"value": b"r%d" % i} for i in range(50)])
    options = reader_options(kafka, subscribe=topic,
                             endingOffsets=json.dumps({topic: {"0": 60}}),
                             failOnDataLoss=str(fail_on_data_loss).lower(),
                             **{"kafkaConsumer.pollTimeoutMs": "3000"})
    _same_data_loss(spark, options, fail_on_data_loss, list(range(50)),
                    [f"{topic}-0", "the log ends at 50"])


def test_nothing_to_read(spark: Any, kafka: KafkaCluster, topic: str) -> None:
    # an empty topic, and a pattern that matches no topic: empty results, no error
    for options in (reader_options(kafka, subscribe=topic),
                    reader_options(kafka, subscribePattern=f"^{uuid.uuid4().hex}$")):
        ours = read_batch(spark, "pykafka", options)
        assert_same(ours, read_batch(spark, "kafka", options))
        assert ours.count() == 0
