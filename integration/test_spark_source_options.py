"""Invalid options fail at query start, for Spark's JVM connector and for ``format("pykafka")``.

Table-driven: every invalid option of the reference table is tried with both formats, batch
or streaming as the option concerns. Both must fail (the JVM connector's behaviour is the
oracle for *whether* it is an error); ours must also say which option is wrong, which Spark's
messages do not always do. Cases that only we reject (a stricter check) are at the end, with
the JVM connector's behaviour noted.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from integration.fetch_helpers import produce_values
from integration.harness.cluster import KafkaCluster
from integration.spark_source_util import unique_name


@pytest.fixture(scope="module")
def topic2(kafka: KafkaCluster) -> str:
    """A 2-partition topic with 5 records in partition 0 and 3 in partition 1."""
    topic = f"src-options-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, 2)
    produce_values(kafka, topic, 5, partition=0)
    produce_values(kafka, topic, 3, partition=1)
    return topic


def _error(spark: Any, fmt: str, options: dict[str, str], mode: str,
           schema: str | None = None) -> str | None:
    """The error text of loading and running the read, or None if it succeeded."""
    try:
        reader = spark.read if mode == "batch" else spark.readStream
        if schema is not None:
            reader = reader.schema(schema)
        df = reader.format(fmt).options(**options).load()
        if mode == "batch":
            df.collect()
            return None
        query = (df.writeStream.format("memory").queryName(unique_name("opt"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
            error = query.exception()
            return None if error is None else str(error)
        finally:
            query.stop()
    except Exception as exc:
        return str(exc)


# (id, mode, options without bootstrap ({topic} is filled in), what our error must name)
CASES: list[tuple[str, str, dict[str, str], str]] = [
    ("no-strategy", "batch", {}, "subscribe, subscribePattern, assign"),
    ("two-strategies", "stream", {"subscribe": "{topic}", "subscribePattern": "x.*"},
     "Only one of"),
    ("assign-not-json", "batch", {"assign": "{topic}:0"}, "'assign'"),
    ("assign-malformed", "batch", {"assign": '{"{topic}": 0}'}, "'assign'"),
    ("subscribe-empty", "batch", {"subscribe": " , "}, "'subscribe'"),
    ("pattern-empty", "stream", {"subscribePattern": "  "}, "'subscribePattern'"),
    ("no-bootstrap", "batch", {"subscribe": "{topic}", "kafka.bootstrap.servers": None},
     "'kafka.bootstrap.servers'"),
    ("auto-offset-reset", "stream", {"subscribe": "{topic}", "kafka.auto.offset.reset": "latest"},
     "'kafka.auto.offset.reset'"),
    ("key-deserializer", "batch", {"subscribe": "{topic}", "kafka.key.deserializer": "x"},
     "'kafka.key.deserializer'"),
    ("value-deserializer", "batch", {"subscribe": "{topic}", "kafka.value.deserializer": "x"},
     "'kafka.value.deserializer'"),
    ("enable-auto-commit", "stream", {"subscribe": "{topic}", "kafka.enable.auto.commit": "true"},
     "'kafka.enable.auto.commit'"),
    ("interceptors", "batch", {"subscribe": "{topic}", "kafka.interceptor.classes": "x"},
     "'kafka.interceptor.classes'"),
    ("min-partitions-zero", "batch", {"subscribe": "{topic}", "minPartitions": "0"},
     "'minPartitions'"),
    ("min-partitions-not-int", "stream", {"subscribe": "{topic}", "minPartitions": "two"},
     "'minPartitions'"),
    ("max-records-zero", "batch", {"subscribe": "{topic}", "maxRecordsPerPartition": "0"},
     "'maxRecordsPerPartition'"),
    ("min-above-max", "stream", {"subscribe": "{topic}", "minOffsetsPerTrigger": "10",
                                 "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger"),
    ("max-offsets-not-long", "stream", {"subscribe": "{topic}", "maxOffsetsPerTrigger": "lots"},
     "'maxOffsetsPerTrigger'"),
    ("max-trigger-delay", "stream", {"subscribe": "{topic}", "minOffsetsPerTrigger": "1",
                                     "maxTriggerDelay": "soon"}, "'maxTriggerDelay'"),
    ("fail-on-data-loss", "batch", {"subscribe": "{topic}", "failOnDataLoss": "maybe"},
     "'failOnDataLoss'"),
    ("include-headers", "stream", {"subscribe": "{topic}", "includeHeaders": "yes"},
     "'includeHeaders'"),
    ("starting-json", "stream", {"subscribe": "{topic}", "startingOffsets": "{oops"},
     "'startingOffsets'"),
    ("batch-starting-latest", "batch", {"subscribe": "{topic}", "startingOffsets": "latest"},
     "'startingOffsets'"),
    ("batch-starting-json-latest", "batch",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": -1, "1": 0}}'},
     "'startingOffsets'"),
    ("batch-ending-earliest", "batch", {"subscribe": "{topic}", "endingOffsets": "earliest"},
     "'endingOffsets'"),
    ("batch-ending-json-earliest", "batch",
     {"subscribe": "{topic}", "endingOffsets": '{"{topic}": {"0": -2, "1": -1}}'},
     "'endingOffsets'"),
    ("stream-ending-offsets", "stream", {"subscribe": "{topic}", "endingOffsets": "latest"},
     "'endingOffsets'"),
    ("stream-ending-by-timestamp", "stream",
     {"subscribe": "{topic}", "endingOffsetsByTimestamp": '{"{topic}": {"0": 1, "1": 1}}'},
     "'endingOffsetsByTimestamp'"),
    ("starting-timestamp-not-long", "batch", {"subscribe": "{topic}",
                                              "startingTimestamp": "yesterday"},
     "'startingTimestamp'"),
    ("timestamp-strategy", "batch", {"subscribe": "{topic}", "startingTimestamp": "0",
                                     "startingOffsetsByTimestampStrategy": "closest"},
     "'startingOffsetsByTimestampStrategy'"),
    ("starting-partitions-mismatch-batch", "batch",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": 0}}'},
     "KAFKA_START_OFFSET_DOES_NOT_MATCH_ASSIGNED"),
    ("starting-partitions-mismatch-stream", "stream",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"1": 0}}'},
     "'startingOffsets'"),
    ("by-timestamp-partitions-mismatch", "batch",
     {"subscribe": "{topic}", "startingOffsetsByTimestamp": '{"{topic}": {"0": 0}}'},
     "'startingOffsetsByTimestamp'"),
    ("start-end-partitions-differ", "batch",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": 0, "1": 0}}',
      "endingOffsets": '{"{topic}": {"0": 1}}'},
     "MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET"),
    ("start-after-end", "batch",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": 4, "1": 0}}',
      "endingOffsets": '{"{topic}": {"0": 2, "1": 1}}'},
     "UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET"),
    ("start-beyond-latest", "batch",
     {"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": 50, "1": 0}}'},
     "RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET"),
    ("no-timestamp-match", "batch", {"subscribe": "{topic}",
                                     "startingTimestamp": "99999999999999"},
     "'startingTimestamp'"),
]


def _fill(options: dict[str, Any], topic: str, bootstrap: str) -> dict[str, str]:
    filled = {"kafka.bootstrap.servers": bootstrap}
    for key, value in options.items():
        if value is None:
            filled.pop(key, None)
        else:
            filled[key] = value.replace("{topic}", topic)
    return filled


@pytest.mark.parametrize("case_id, mode, options, named", CASES, ids=[c[0] for c in CASES])
def test_invalid_option_fails_at_start_like_the_jvm_connector(
        spark: Any, kafka: KafkaCluster, topic2: str, case_id: str, mode: str,
        options: dict[str, str], named: str) -> None:
    filled = _fill(options, topic2, kafka.bootstrap())
    jvm_error = _error(spark, "kafka", filled, mode)
    assert jvm_error is not None, f"the JVM connector accepted {case_id}: the table is wrong"
    ours = _error(spark, "pykafka", filled, mode)
    assert ours is not None, f"format('pykafka') accepted {case_id}"
    assert named in ours, f"our error for {case_id} does not name {named!r}:\n{ours[-2000:]}"


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_custom_schema_is_rejected(spark: Any, kafka: KafkaCluster, topic2: str,
                                   mode: str) -> None:
    options = _fill({"subscribe": "{topic}"}, topic2, kafka.bootstrap())
    assert _error(spark, "kafka", options, mode, schema="value BINARY") is not None
    ours = _error(spark, "pykafka", options, mode, schema="value BINARY")
    assert ours is not None and "fixed schema" in ours


def test_stricter_than_spark(spark: Any, kafka: KafkaCluster, topic2: str) -> None:
    """Values the JVM connector accepts and then misbehaves on, which we refuse up front:
    maxOffsetsPerTrigger=0 (a stream that never advances) and a negative offset other than
    the -1/-2 sentinels (fails later, in a task)."""
    never_advances = _fill({"subscribe": "{topic}", "maxOffsetsPerTrigger": "0"}, topic2,
                           kafka.bootstrap())
    ours = _error(spark, "pykafka", never_advances, "stream")
    assert ours is not None and "'maxOffsetsPerTrigger' must be positive" in ours
    negative = _fill({"subscribe": "{topic}", "startingOffsets": '{"{topic}": {"0": -7, "1": 0}}'},
                     topic2, kafka.bootstrap())
    ours = _error(spark, "pykafka", negative, "batch")
    assert ours is not None and "'startingOffsets'" in ours
