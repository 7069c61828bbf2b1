"""Fetch responses damaged on their way into Spark tasks: our error, or the JVM's rows.

A ``format("pykafka")`` read goes through the fault proxy, which damages one Fetch response
carrying records (``integration.fetch_fuzz``: seeded mutation classes, each with the outcome
it calls for). For a batch read (``spark.read``) and a micro-batch of a stream
(``readStream``, Trigger.AvailableNow, damage after the first micro-batch), the Spark job must:

* fail, within a bounded time, with our error in Spark's error text: ``CorruptRecordError``
  naming the topic-partition and the batch's offset, or ``DecodeError`` naming the
  partitions and offsets the Fetch asked for; or
* where the damage hits a field the read does not depend on, return the very rows the JVM
  connector reads from the broker directly (chispa, rows taken from one execution).

Never a hang (short client timeouts; ``pytest.mark.timeout`` far above the seconds a case
takes), never other rows. The session runs ``local[2]``: one task failure fails the job, so
Spark's retries do not hide the error. The plain client runs the same classes with more
seeds in ``test_fetcher_fuzz.py``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from chispa import assert_df_equality

from integration.fetch_fuzz import (
    ANY_ERROR,
    CORRUPT,
    DECODE,
    MUTATIONS,
    PARTITIONS,
    PER_PARTITION,
    SAME,
    after,
    cases,
    seeded,
    write_fuzz_topic,
)
from integration.harness.proxy import FETCH, ProxiedKafkaCluster
from integration.spark_source_util import unique_name

pytestmark = [pytest.mark.spark]

# Seeds 0..N-1 per class (CI: 1; the client-level fuzz covers 8 per class); ``make fuzz``
# runs 20.
SEEDS_PER_CLASS = int(os.environ.get("KAFKA_DS_SPARK_FUZZ_SEEDS", "1"))
# Short client timeouts: a stall would end in our timeout error well inside the test's own.
CLIENT_OPTIONS = {"kafka.max.partition.fetch.bytes": "2048", "kafka.request.timeout.ms": "5000",
                  "kafka.fetch.max.wait.ms": "100", "kafkaConsumer.pollTimeoutMs": "30000",
                  "includeHeaders": "true"}
STREAM_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def fuzz_topic(spark: Any, proxied_kafka: ProxiedKafkaCluster) -> Iterator[tuple[str, Any]]:
    """A topic of many small batches per partition, and the JVM connector's rows of it."""
    topic = unique_name("spark-fetch-fuzz")
    write_fuzz_topic(proxied_kafka, topic)
    jvm = (spark.read.format("kafka").option("kafka.bootstrap.servers", proxied_kafka.bootstrap())
           .option("subscribe", topic).option("includeHeaders", "true").load())
    rows = jvm.collect()
    assert len(rows) == PARTITIONS * PER_PARTITION
    yield topic, spark.createDataFrame(rows, jvm.schema)


def _options(cluster: ProxiedKafkaCluster, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cluster.proxy_bootstrap(), "subscribe": topic,
            **CLIENT_OPTIONS}


def _assert_rows_equal(spark: Any, rows: list[Any], schema: Any, jvm: Any) -> None:
    """Rows collected once (a second execution would not meet the damage) against the JVM's."""
    ours = spark.createDataFrame(rows, schema)
    order = ["topic", "partition", "offset"]
    assert_df_equality(ours.orderBy(*order), jvm.orderBy(*order))


def _assert_our_error(expect: str, text: str, topic: str, description: str) -> None:
    """Spark's error text carries our exception's class and what it names."""
    if expect == CORRUPT:
        assert "kafka_ds.protocol.errors.CorruptRecordError" in text, (description, text[-3000:])
        match = re.search(r"at offset (\d+) of partition (\d+)", description)
        assert match, description
        offset, partition = match.groups()
        assert f"record batch at offset {offset} of {topic}-{partition}" in text, \
            (description, text[-3000:])
    elif expect == DECODE:
        assert "kafka_ds.protocol.errors.DecodeError" in text, (description, text[-3000:])
        assert "cannot decode the Fetch response of node" in text, (description, text[-3000:])
        assert re.search(rf"{re.escape(topic)}-\d at offset \d+", text), \
            (description, text[-3000:])
    else:
        assert expect == ANY_ERROR, (description, text[-3000:])
        assert re.search(r"kafka_ds\.[a-z_.]+\.[A-Za-z]+Error", text), (description, text[-3000:])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,seed", cases(SEEDS_PER_CLASS))
def test_a_batch_read_fails_with_our_error_or_reads_what_the_jvm_reads(
        spark: Any, proxied_kafka: ProxiedKafkaCluster, fuzz_topic: tuple[str, Any],
        name: str, seed: int) -> None:
    topic, jvm = fuzz_topic
    expect, mutator = MUTATIONS[name]
    proxy = proxied_kafka.proxy
    first, before = len(proxy.mutations), proxy.snapshot()
    frame = spark.read.format("pykafka").options(**_options(proxied_kafka, topic)).load()
    proxy.mutate_responses(seeded(mutator, seed), 1, {FETCH})
    started = time.monotonic()
    try:
        rows, error = frame.collect(), None
    except Exception as exc:  # Spark wraps the task's error: its text is what users see
        rows, error = None, exc
    finally:
        proxy.reset()
    took_s = time.monotonic() - started
    assert proxy.since(before)["mutated_responses"] == 1, "the damage never reached the read"
    description = proxy.mutations[first]
    print(f"{name} seed {seed}: {description}: "
          f"{'same rows' if error is None else 'failed'} in {took_s:.1f} s")
    if error is None:
        assert expect in (SAME, ANY_ERROR), f"{description}: the read did not fail"
        _assert_rows_equal(spark, rows, frame.schema, jvm)
    else:
        assert expect != SAME, f"{description}: {str(error)[-3000:]}"
        _assert_our_error(expect, str(error), topic, description)


STREAM_CASES = [("batch_crc", 0), ("records_length_overrun", 0), ("truncated", 1),
                ("throttle_time", 0), ("batch_length_overrun", 0)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name,seed", STREAM_CASES)
def test_a_micro_batch_fails_with_our_error_or_reads_what_the_jvm_reads(
        spark: Any, proxied_kafka: ProxiedKafkaCluster, fuzz_topic: tuple[str, Any],
        tmp_path: Any, name: str, seed: int) -> None:
    topic, jvm = fuzz_topic
    expect, mutator = MUTATIONS[name]
    proxy = proxied_kafka.proxy
    first, before = len(proxy.mutations), proxy.snapshot()
    table = unique_name("fuzz_stream")
    stream = (spark.readStream.format("pykafka").options(**_options(proxied_kafka, topic))
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200")
              .load())
    # The first micro-batch (100 rows of each partition: 7 batches, 3 responses with
    # max.partition.fetch.bytes 2048) reads clean; a later one is damaged.
    proxy.mutate_responses(after(8, seeded(mutator, seed)), 1, {FETCH})
    started = time.monotonic()
    query = (stream.writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        finished = query.awaitTermination(STREAM_TIMEOUT_S)
    except Exception:  # a failed query raises here; query.exception() has it
        finished = True
    finally:
        took_s = time.monotonic() - started
        query.stop()
        proxy.reset()
    assert finished, f"the stream hung for {STREAM_TIMEOUT_S} s"
    assert proxy.since(before)["mutated_responses"] == 1, "the damage never reached the read"
    description = proxy.mutations[first]
    error = query.exception()
    done = [p for p in query.recentProgress if p["numInputRows"]]
    print(f"stream {name} seed {seed}: {description}: "
          f"{'same rows' if error is None else 'failed'} after {len(done)} micro-batches, "
          f"in {took_s:.1f} s")
    if error is None:
        assert expect in (SAME, ANY_ERROR), f"{description}: the stream did not fail"
        rows = spark.table(table).collect()
        _assert_rows_equal(spark, rows, spark.table(table).schema, jvm)
    else:
        assert expect != SAME, f"{description}: {str(error)[-3000:]}"
        assert done, "the damage was meant for a later micro-batch than the first"
        _assert_our_error(expect, str(error), topic, description)
