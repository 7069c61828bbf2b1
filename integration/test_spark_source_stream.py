"""Streaming behaviour of ``format("pykafka")`` beside Spark's JVM connector.

Restarts from a checkpoint while data keeps arriving (every record exactly once in a file
sink), rate limits (the same micro-batches as the JVM connector for the same backlog),
Trigger.AvailableNow and Once, minOffsetsPerTrigger, discovery of new partitions and pattern
topics, deleted topics under both failOnDataLoss settings, a topic that never existed, lag
reporting and offset commits for lag tools.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.errors import StreamingQueryException

from integration.fetch_helpers import produce, produce_values
from integration.harness.cluster import KafkaCluster
from integration.spark_source_util import (
    FORMATS,
    assert_same,
    batch_sizes,
    read_batch,
    reader_options,
    run_available_now,
    unique_name,
    wait_for_rows,
    wait_until,
)
from kafka_ds.client.admin import Admin
from kafka_ds.spark.progress import offsets_behind_latest


class _Feeder:
    """Writes ``id-<n>`` records (n = 0, 1, 2 ...) round-robin over partitions until stopped."""

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 5})
        self.topic, self.partitions = topic, partitions
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(20):
                self.producer.produce(self.topic, value=b"id-%d" % self.sent,
                                      partition=self.sent % self.partitions)
                self.sent += 1
            self.producer.flush(10)
            self._stop.wait(0.02)

    def __enter__(self) -> _Feeder:
        self._thread.start()
        return self

    def stop(self) -> int:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(30)
            assert self.producer.flush(30) == 0
        return self.sent

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _progress_batches(query: Any) -> int:
    return sum(1 for p in query.recentProgress if p["numInputRows"])


def test_restart_from_checkpoint_reads_every_record_exactly_once(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    topic = topic_factory(partitions=3)
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(starting: str) -> Any:
        options = reader_options(kafka, subscribe=topic, startingOffsets=starting,
                                 maxOffsetsPerTrigger=150)
        return (spark.readStream.format("pykafka").options(**options).load()
                .selectExpr("CAST(value AS STRING) AS id", "partition", "offset")
                .writeStream.format("parquet").option("path", output)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds").start())

    with _Feeder(kafka, topic, 3) as feeder:
        wait_until(lambda: feeder.sent >= 300, 60, "the first records")
        first = start("earliest")
        try:
            wait_until(lambda: _progress_batches(first) >= 3, 180, "three batches")
        finally:
            first.stop()
        # startingOffsets only applies to a new query: "latest" here must change nothing.
        second = start("latest")
        try:
            wait_until(lambda: _progress_batches(second) >= 3, 180, "three more batches")
            total = feeder.stop()
            second.processAllAvailable()
            resumed = next(p for p in second.recentProgress if p["numInputRows"])
        finally:
            second.stop()
    assert resumed["sources"][0]["startOffset"] is not None  # continued, not started anew
    rows = spark.read.parquet(output)
    ids = [row.id for row in rows.select("id").collect()]
    assert len(ids) == total, f"{len(ids)} rows for {total} records"
    assert sorted(ids, key=lambda v: int(v[3:])) == [f"id-{n}" for n in range(total)]


def test_batch_0_replayed_after_a_crash_reads_partitions_added_meanwhile_as_new(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        tmp_path: Path) -> None:
    """Batch 0 fails after Spark logged its offsets; a partition is added while the query is
    down. On restart Spark replays batch 0 and asks the source for its initial offsets again
    (the JVM connector keeps them in the checkpoint): the new partition is in that start and
    not in batch 0's end. It must be read as new in the next batch, not reported as a
    deleted partition (a failure with the default failOnDataLoss=true), and every record
    must come out once, as the JVM connector's query writes them."""
    topic = topic_factory(partitions=2)
    for partition in range(2):
        produce_values(kafka, topic, 30, partition=partition)
    starts: dict[str, tuple[str, Callable[[], Any]]] = {}
    for fmt in FORMATS:
        out, checkpoint = str(tmp_path / f"{fmt}-out"), str(tmp_path / f"{fmt}-checkpoint")
        failed: list[int] = []

        def write(df: Any, batch_id: int, out: str = out, failed: list[int] = failed) -> None:
            if batch_id == 0 and not failed:
                failed.append(batch_id)
                raise RuntimeError("the query dies in batch 0")
            df.write.mode("append").parquet(out)

        def start(fmt: str = fmt, checkpoint: str = checkpoint,
                  write: Callable[[Any, int], None] = write) -> Any:
            return (spark.readStream.format(fmt)
                    .options(**reader_options(kafka, subscribe=topic,
                                              startingOffsets="earliest")).load()
                    .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
                    .writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
                    .trigger(availableNow=True).start())

        query = start()
        with pytest.raises(StreamingQueryException, match="dies in batch 0"):
            query.awaitTermination(120)
        starts[fmt] = (out, start)
    with Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        admin.create_partitions(topic, 3)
    produce_values(kafka, topic, 20, partition=2)
    for fmt, (_, start) in starts.items():
        query = start()
        assert query.awaitTermination(300), f"{fmt} did not finish"
        assert query.exception() is None, f"{fmt}: {query.exception()}"
    ours, jvm = (spark.read.parquet(starts[fmt][0]) for fmt in FORMATS)
    assert_same(ours, jvm)
    assert ours.count() == 80


@pytest.fixture(scope="module")
def uneven_topic(kafka: KafkaCluster) -> str:
    """4 partitions with 1000, 300, 50 and 1 records: an uneven backlog."""
    topic = f"src-uneven-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, 4)
    for partition, count in enumerate([1000, 300, 50, 1]):
        produce_values(kafka, topic, count, partition=partition, value_bytes=40)
    return topic


def test_max_offsets_per_trigger_makes_the_jvm_connectors_batches(
        spark: Any, kafka: KafkaCluster, uneven_topic: str) -> None:
    options = reader_options(kafka, subscribe=uneven_topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger=137)
    ours, ours_progress = run_available_now(spark, "pykafka", options)
    jvm, jvm_progress = run_available_now(spark, "kafka", options)
    assert batch_sizes(ours_progress) == batch_sizes(jvm_progress)
    # AvailableNow drains in several bounded batches (137 plus at most one per partition)
    assert len(batch_sizes(ours_progress)) >= 8
    assert all(size <= 137 + 4 for size in batch_sizes(ours_progress))
    ends = [[json.loads(p["sources"][0]["endOffset"]) for p in progress if p["numInputRows"]]
            for progress in (ours_progress, jvm_progress)]
    assert ends[0] == ends[1]
    assert_same(ours, jvm)
    # Lag: Spark's source metrics, recomputed from our progress entries, equal the JVM's.
    for mine, theirs in zip([p for p in ours_progress if p["numInputRows"]],
                            [p for p in jvm_progress if p["numInputRows"]], strict=True):
        assert offsets_behind_latest(mine["sources"][0]) == theirs["sources"][0]["metrics"]
        assert json.loads(mine["sources"][0]["latestOffset"]) == json.loads(
            theirs["sources"][0]["latestOffset"])


def test_trigger_once_reads_everything_in_one_batch(spark: Any, kafka: KafkaCluster,
                                                    uneven_topic: str) -> None:
    options = reader_options(kafka, subscribe=uneven_topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger=137)
    ours, progress = run_available_now(spark, "pykafka", options, once=True)
    jvm, jvm_progress = run_available_now(spark, "kafka", options, once=True)
    assert batch_sizes(progress) == batch_sizes(jvm_progress) == [1351]
    assert_same(ours, jvm)


def test_available_now_stops_at_the_offsets_latest_when_it_started(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    produce_values(kafka, topic, 400, partition=0)
    produce_values(kafka, topic, 200, partition=1)
    name = unique_name("avnow")
    query = (spark.readStream.format("pykafka")
             .options(**reader_options(kafka, subscribe=topic, startingOffsets="earliest",
                                       maxOffsetsPerTrigger=50))
             .load().writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).start())
    try:
        # The target is fixed by the first batch's planning; then more data arrives while
        # the query still has ten bounded batches to go.
        wait_until(lambda: len(batch_sizes(query.recentProgress)) >= 1, 120, "batch 0")
        produce_values(kafka, topic, 300, partition=0)
        produce_values(kafka, topic, 300, partition=1)
        assert query.isActive, "the query ended before the late data was written"
        query.awaitTermination(300)
        assert query.exception() is None
    finally:
        query.stop()
    assert spark.table(name).count() == 600
    assert len(batch_sizes(query.recentProgress)) >= 10  # 600 rows, at most 50 + 2 each


def _start_memory(spark: Any, fmt: str, options: dict[str, str]) -> tuple[Any, str]:
    name = unique_name(f"mem_{fmt}")
    query = (spark.readStream.format(fmt).options(**options).load().writeStream
             .format("memory").queryName(name).trigger(processingTime="300 milliseconds")
             .start())
    return query, name


@pytest.fixture
def both_streams(spark: Any) -> Iterator[Callable[[dict[str, str]], dict[str, tuple[Any, str]]]]:
    """Start the same processing-time stream with both formats. Idle triggers report progress
    every 200 ms here (Spark's default is every 10 s), so tests can watch triggers go by."""
    interval_conf = "spark.sql.streaming.noDataProgressEventInterval"
    previous = spark.conf.get(interval_conf, None)
    spark.conf.set(interval_conf, "200ms")
    started: list[Any] = []

    def start(options: dict[str, str]) -> dict[str, tuple[Any, str]]:
        queries = {fmt: _start_memory(spark, fmt, options) for fmt in FORMATS}
        started.extend(query for query, _ in queries.values())
        return queries

    try:
        yield start
    finally:
        for query in started:
            query.stop()
        if previous is None:
            spark.conf.unset(interval_conf)
        else:
            spark.conf.set(interval_conf, previous)


def test_min_offsets_per_trigger_waits_for_enough_data(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        both_streams: Callable[[dict[str, str]], dict[str, tuple[Any, str]]]) -> None:
    topic = topic_factory(partitions=2)
    produce_values(kafka, topic, 10)
    queries = both_streams(reader_options(kafka, subscribe=topic, startingOffsets="earliest",
                                          minOffsetsPerTrigger=50, maxTriggerDelay="10m"))
    for query, _ in queries.values():  # the first trigger always runs
        wait_until(lambda q=query: batch_sizes(q.recentProgress) == [10], 120, "batch 0")
    produce_values(kafka, topic, 20, partition=1)  # 20 < 50: held back
    for query, _ in queries.values():  # a few more triggers go by without a batch
        seen = len(query.recentProgress)
        wait_until(lambda q=query, s=seen: len(q.recentProgress) >= s + 3, 120, "idle triggers")
    produce_values(kafka, topic, 30, partition=0)  # 50 now: one batch with all of them
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 60)
        # The memory sink holds a batch's rows before Spark posts that trigger's progress
        # (its offset and commit logs come after addBatch): wait for the progress too.
        wait_until(lambda q=query: sum(batch_sizes(q.recentProgress)) >= 60, 60,
                   "the second batch's progress")
        assert batch_sizes(query.recentProgress) == [10, 50]
    assert_same(spark.table(queries["pykafka"][1]), spark.table(queries["kafka"][1]))


def test_starting_at_latest_reads_what_arrives_after_the_start(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        both_streams: Callable[[dict[str, str]], dict[str, tuple[Any, str]]]) -> None:
    topic = topic_factory(partitions=2)
    produce_values(kafka, topic, 50)  # before the start: never read
    queries = both_streams(reader_options(kafka, subscribe=topic))
    for query, _ in queries.values():
        wait_until(lambda q=query: len(q.recentProgress) >= 2, 120, "the first triggers")
    produce_values(kafka, topic, 30, partition=1)
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 30)
    assert_same(spark.table(queries["pykafka"][1]), spark.table(queries["kafka"][1]))


def test_new_partitions_and_pattern_topics_are_discovered(
        spark: Any, kafka: KafkaCluster,
        both_streams: Callable[[dict[str, str]], dict[str, tuple[Any, str]]]) -> None:
    run = uuid.uuid4().hex[:6]
    first, second = f"disc-{run}-a", f"disc-{run}-b"
    kafka.create_topic(first, 2)
    produce_values(kafka, first, 40)
    queries = both_streams(reader_options(kafka, subscribePattern=f"disc-{run}-.*",
                                          startingOffsets="earliest"))
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 40)
    with Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        admin.create_partitions(first, 3)
    produce_values(kafka, first, 25, partition=2)  # a new partition starts at earliest
    kafka.create_topic(second, 2)
    produce_values(kafka, second, 15, partition=1)  # a new topic matching the pattern
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 80)
    ours, jvm = (spark.table(queries[fmt][1]) for fmt in FORMATS)
    assert_same(ours, jvm)
    assert ours.count() == 80
    assert {(r.topic, r.partition) for r in ours.select("topic", "partition").collect()} == {
        (first, 0), (first, 2), (second, 1)}


def _kept_and_doomed(kafka: KafkaCluster, prefix: str) -> tuple[str, str, str]:
    """A run id and two new topics of it (2 partitions, 20 records each): one to keep, one
    a test deletes."""
    run = uuid.uuid4().hex[:6]
    kept, doomed = f"{prefix}-{run}-kept", f"{prefix}-{run}-doomed"
    for topic in (kept, doomed):
        kafka.create_topic(topic, 2)
        produce_values(kafka, topic, 20)
    return run, kept, doomed


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_topic_goes_through_fail_on_data_loss(
        spark: Any, kafka: KafkaCluster, fail_on_data_loss: bool,
        both_streams: Callable[[dict[str, str]], dict[str, tuple[Any, str]]]) -> None:
    run, kept, doomed = _kept_and_doomed(kafka, "del")
    queries = both_streams(reader_options(kafka, subscribePattern=f"del-{run}-.*",
                                          startingOffsets="earliest",
                                          failOnDataLoss=str(fail_on_data_loss).lower()))
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 40)
    with Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        admin.delete_topics([doomed])
    produce_values(kafka, kept, 10, partition=1)
    if fail_on_data_loss:
        for fmt, (query, _) in queries.items():
            wait_until(lambda q=query: q.exception() is not None, 120, f"{fmt} to fail")
            assert "data may have been lost" in str(query.exception()).lower()
        ours = str(queries["pykafka"][0].exception())
        assert "KAFKA_DATA_LOSS.PARTITIONS_DELETED" in ours and doomed in ours
        return
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 50)
    for query, _ in queries.values():
        assert query.exception() is None and query.isActive
    assert_same(spark.table(queries["pykafka"][1]), spark.table(queries["kafka"][1]))


def test_a_subscribed_topic_deleted_mid_query_fails_the_query_as_the_jvm_connectors(
        spark: Any, kafka: KafkaCluster,
        both_streams: Callable[[dict[str, str]], dict[str, tuple[Any, str]]]) -> None:
    """``subscribe`` names its topics: one deleted while the query runs is not dropped as
    "partitions deleted" (with failOnDataLoss=false that would go on without it, then read
    it all again from earliest once a broker lists it again). Both connectors fail the
    query after their lookup retries; ours names the topic and the option."""
    _, kept, doomed = _kept_and_doomed(kafka, "gone")
    queries = both_streams(reader_options(kafka, subscribe=f"{kept},{doomed}",
                                          startingOffsets="earliest", failOnDataLoss="false",
                                          **{"fetchOffset.retryIntervalMs": "200"}))
    for query, name in queries.values():
        wait_for_rows(spark, query, name, 40)
    with Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        admin.delete_topics([doomed])
    produce_values(kafka, kept, 10, partition=1)
    for fmt, (query, _) in queries.items():
        wait_until(lambda q=query: q.exception() is not None, 120, f"{fmt} to fail")
    ours = str(queries["pykafka"][0].exception())
    assert f"'{doomed}'" in ours and "no longer exist" in ours and "'subscribe'" in ours
    assert doomed in str(queries["kafka"][0].exception()) or "UnknownTopicOrPartition" in str(
        queries["kafka"][0].exception())


def test_a_topic_that_never_existed_is_named(spark: Any, kafka: KafkaCluster,
                                             topic: str) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:6]}"
    for options in (reader_options(kafka, subscribe=f"{topic},{missing}"),
                    reader_options(kafka, assign=f'{{"{missing}": [0]}}')):
        with pytest.raises(Exception) as info:
            read_batch(spark, "pykafka", options).collect()
        text = str(info.value)
        assert f"'{missing}'" in text and "does not exist" in text
        assert "deleted" not in text.split("does not exist")[0][-200:]
    query = (spark.readStream.format("pykafka")
             .options(**reader_options(kafka, subscribe=missing)).load()
             .writeStream.format("memory").queryName(unique_name("missing"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(120)
    assert f"'{missing}'" in str(failed.value) and "does not exist" in str(failed.value)


def test_offsets_are_committed_to_a_group_for_lag_tools(spark: Any, kafka: KafkaCluster,
                                                        uneven_topic: str) -> None:
    group = f"lag-{uuid.uuid4().hex[:6]}"
    options = reader_options(kafka, subscribe=uneven_topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger=500, commitOffsetsToGroup=group)
    _, progress = run_available_now(spark, "pykafka", options)
    last_end = json.loads([p for p in progress if p["numInputRows"]][-1]["sources"][0][
        "endOffset"])[uneven_topic]
    out = kafka.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                         "--bootstrap-server", kafka.bootstrap(), "--describe", "--group", group,
                         quick_start=True).stdout
    committed = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0] == group and fields[1] == uneven_topic:
            committed[fields[2]] = int(fields[3])
    assert committed == {partition: int(offset) for partition, offset in last_end.items()}
    assert committed == {"0": 1000, "1": 300, "2": 50, "3": 1}


def test_max_bytes_per_trigger_bounds_batches(spark: Any, kafka: KafkaCluster,
                                              topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    produce(kafka, topic, [{"value": bytes([65 + i % 26]) * 1000, "partition": i % 2}
                           for i in range(400)], **{"linger.ms": 50})
    options = reader_options(kafka, subscribe=topic, startingOffsets="earliest",
                             maxBytesPerTrigger=60_000)
    rows, progress = run_available_now(spark, "pykafka", options)
    sizes = batch_sizes(progress)
    assert rows.count() == 400 and sum(sizes) == 400
    # ~1.07 KB per stored record: 60 KB admits about 56 records per batch
    assert len(sizes) >= 5
    assert max(sizes) <= 70, sizes
