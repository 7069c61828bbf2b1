"""Source options: Spark's names, defaults, precedence and errors (no broker, no JVM).

The real-Spark test ``integration/test_spark_source_options.py`` checks the same invalid
options against the JVM connector; here each rule is pinned down quickly, including ours.
"""

from __future__ import annotations

import pytest

from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.source import kafka_schema, source_schema
from kafka_ds.spark.source_options import (
    ASSIGN,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    parse_source_options,
)

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}


def _options(**extra: str) -> dict[str, str]:
    return {**BASE, **{key.replace("__", "."): value for key, value in extra.items()}}


def test_defaults_match_the_jvm_connector() -> None:
    stream = parse_source_options(BASE, "stream")
    batch = parse_source_options(BASE, "batch")
    assert stream.strategy == SUBSCRIBE and stream.topics == ("t",)
    assert stream.starting.kind == "latest" and batch.starting.kind == "earliest"
    assert batch.ending.kind == "latest"
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_offsets_per_trigger is None and stream.min_partitions is None
    assert stream.max_trigger_delay_ms == 15 * 60_000
    assert stream.poll_timeout_ms == 120_000
    assert (stream.fetch_offset_num_retries, stream.fetch_offset_retry_interval_ms) == (3, 1000)


def test_keys_are_case_insensitive_and_values_parsed() -> None:
    parsed = parse_source_options({
        "KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": " top.* ",
        "FAILONDATALOSS": "False", "includeHeaders": "TRUE", "maxOffsetsPerTrigger": "500",
        "minOffsetsPerTrigger": "+100", "maxTriggerDelay": "30s", "minPartitions": "8",
        "maxRecordsPerPartition": "1000", "kafkaConsumer.pollTimeoutMs": "5000",
    }, "stream")
    assert parsed.strategy == SUBSCRIBE_PATTERN and parsed.pattern == "top.*"
    assert not parsed.fail_on_data_loss and parsed.include_headers
    assert (parsed.max_offsets_per_trigger, parsed.min_offsets_per_trigger) == (500, 100)
    assert parsed.max_trigger_delay_ms == 30_000
    assert (parsed.min_partitions, parsed.max_records_per_partition) == (8, 1000)
    assert parsed.fetch_properties()["fetch.timeout.ms"] == "5000"
    assert parsed.client == {"bootstrap.servers": "h:1"}


def test_subscribe_splits_trims_and_drops_empty_items() -> None:
    parsed = parse_source_options(_options(subscribe=" a, ,b ,a,"), "stream")
    assert parsed.topics == ("a", "b")


def test_assign_lists_partitions() -> None:
    parsed = parse_source_options({"kafka.bootstrap.servers": "h:1",
                                   "assign": '{"x": [1, 0]}'}, "batch")
    assert parsed.strategy == ASSIGN
    assert parsed.assigned == (TopicPartition("x", 0), TopicPartition("x", 1))


def test_timestamp_precedence() -> None:
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    parsed = parse_source_options(_options(
        startingTimestamp="1000", startingOffsetsByTimestamp='{"t": {"0": 5}}',
        startingOffsets="earliest"), "stream")
    assert parsed.starting.kind == "timestamp" and parsed.starting.timestamp_ms == 1000
    parsed = parse_source_options(_options(
        startingOffsetsByTimestamp='{"t": {"0": 5}}', startingOffsets="earliest",
        startingOffsetsByTimestampStrategy="LATEST"), "stream")
    assert parsed.starting.kind == "timestamps" and parsed.starting.no_match_latest
    assert parsed.starting.offsets == {TopicPartition("t", 0): 5}
    # endingTimestamp is not rejected on a stream (Spark ignores it there too)
    assert parse_source_options(_options(endingTimestamp="5"), "stream").ending.kind == (
        "timestamp")


INVALID = [
    # (options, mode, text the error must contain)
    ({"kafka.bootstrap.servers": "h:1"}, "any", "subscribe, subscribePattern, assign"),
    (_options(assign='{"t":[0]}'), "any", "Only one of"),
    (_options(subscribe=" , "), "any", "'subscribe'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "  "}, "any", "'subscribePattern'"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "a("}, "any", "'subscribePattern'"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "t:0"}, "any", "'assign'"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"t": 0}'}, "any", "'assign'"),
    ({"subscribe": "t"}, "any", "'kafka.bootstrap.servers'"),
    (_options(kafka__auto__offset__reset="earliest"), "any", "'kafka.auto.offset.reset'"),
    (_options(kafka__key__deserializer="x"), "any", "'kafka.key.deserializer'"),
    (_options(kafka__value__deserializer="x"), "any", "'kafka.value.deserializer'"),
    (_options(kafka__enable__auto__commit="false"), "any", "'kafka.enable.auto.commit'"),
    (_options(kafka__interceptor__classes="x"), "any", "'kafka.interceptor.classes'"),
    (_options(kafka__isolation__level="serializable"), "any", "'kafka.isolation.level'"),
    (_options(minPartitions="0"), "any", "'minPartitions' must be positive"),
    (_options(minPartitions="x"), "any", "'minPartitions'"),
    (_options(minPartitions="3000000000"), "any", "'minPartitions'"),
    (_options(maxRecordsPerPartition="-5"), "any", "'maxRecordsPerPartition' must be positive"),
    (_options(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"), "any",
     "minOffsetsPerTrigger(10)"),
    (_options(maxOffsetsPerTrigger="1.5"), "any", "'maxOffsetsPerTrigger'"),
    (_options(maxOffsetsPerTrigger="0"), "any", "'maxOffsetsPerTrigger' must be positive"),
    (_options(maxTriggerDelay="soon"), "any", "'maxTriggerDelay'"),
    (_options(maxBytesPerTrigger="0"), "any", "'maxBytesPerTrigger'"),
    (_options(failOnDataLoss="yes"), "any", "'failOnDataLoss'"),
    (_options(includeHeaders="1"), "any", "'includeHeaders'"),
    (_options(startingOffsets="{bad"), "any", "'startingOffsets'"),
    (_options(startingOffsets='{"t": {"0": -3}}'), "any", "'startingOffsets'"),
    (_options(startingTimestamp="yesterday"), "any", "'startingTimestamp'"),
    (_options(startingTimestamp="-1"), "any", "'startingTimestamp'"),
    (_options(startingOffsetsByTimestamp='{"t": {"0": "x"}}'), "any",
     "'startingOffsetsByTimestamp'"),
    (_options(startingOffsetsByTimestampStrategy="closest"), "any",
     "'startingOffsetsByTimestampStrategy'"),
    (_options(commitOffsetsToGroup=" "), "any", "'commitOffsetsToGroup'"),
    (_options(endingOffsets="latest"), "stream", "'endingOffsets'"),
    (_options(endingOffsetsByTimestamp='{"t": {"0": 1}}'), "stream",
     "'endingOffsetsByTimestamp'"),
    (_options(startingOffsets="latest"), "batch", "'startingOffsets'"),
    (_options(startingOffsets='{"t": {"0": -1}}'), "batch", "'startingOffsets'"),
    (_options(endingOffsets="earliest"), "batch", "'endingOffsets'"),
    (_options(endingOffsets='{"t": {"0": -2}}'), "batch", "'endingOffsets'"),
    (_options(startingOffsets='{"t": {"0": 5}}', endingOffsets='{"t": {"1": 9}}'), "batch",
     "MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET"),
    (_options(startingOffsets='{"t": {"0": 9}}', endingOffsets='{"t": {"0": 5}}'), "batch",
     "UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET"),
]


@pytest.mark.parametrize("options, mode, fragment", INVALID,
                         ids=[f"{i}-{frag[:30]}" for i, (_, _, frag) in enumerate(INVALID)])
def test_invalid_options_fail_naming_the_problem(options: dict[str, str], mode: str,
                                                 fragment: str) -> None:
    with pytest.raises(KafkaOptionError) as info:
        parse_source_options(options, mode)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_secrets_never_appear_in_errors_or_reprs() -> None:
    secret = "hunter2-very-secret"
    options = _options(**{"kafka__sasl__jaas__config": f'x required password="{secret}";',
                          "kafka__ssl__key__password": secret})
    parsed = parse_source_options(options, "stream")
    assert secret not in repr(parsed)
    with pytest.raises(KafkaOptionError) as info:
        parse_source_options({**options, "kafka.ssl.truststore.password": secret,
                              "minPartitions": "0"}, "stream")
    assert secret not in str(info.value)


def test_schema_follows_include_headers() -> None:
    assert source_schema(BASE) == kafka_schema(False)
    assert len(source_schema(_options(includeHeaders="true")).fields) == 8
    assert all(field.nullable for field in kafka_schema(True).fields)
