"""The sink's options and input columns, checked on the driver when the query starts.

Layer: spark. ``parse_sink_options`` turns Spark's option map into ``SinkOptions`` (small,
picklable: it travels to every task); ``input_columns`` checks the DataFrame's schema against
the columns the sink reads, with Spark's own messages where Spark has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_ds.client.config import redact
from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.spark.options import (
    KafkaOptionError,
    client_properties,
    option_bool,
    option_int,
    shown,
)

# Option names (Spark lower-cases keys; these are matched case-insensitively).
TOPIC = "topic"
DELIVERY_GUARANTEE = "deliveryGuarantee"
TRANSACTIONAL_ID_PREFIX = "transactionalIdPrefix"
INTENT_TOPIC = "intentTopic"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_ROWS_PER_SEND = "maxRowsPerSend"
WORKER_GC_FREEZE = "workerGcFreeze"
WORKER_MEMORY_REUSE = "workerMemoryReuse"

# Producer settings the sink chooses when the user did not (kafka.<name> overrides them).
# Big batches: the columnar encoder's cost is per batch, and the broker's per request.
# Requests of several such batches are humongous objects in a broker whose G1 regions are
# 1 MiB (heaps under 2 GiB), and start concurrent marks; 128 KiB batches avoid that at 4
# partitions, but cost the task 0.4-1 us more per 1 KiB row, more than the broker saved
# (bench_broker_cost, and inside Spark; 2026-11-24): kept.
SINK_PRODUCER_DEFAULTS = {
    "batch.size": "524288",
    "max.request.size": "4194304",
    "buffer.memory": "67108864",
}
# The broker's default transaction.max.timeout.ms, and our default transaction timeout: the
# time a crashed query has to come back and roll its last batch forward (section "limits").
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# kafka.* options the sink refuses, and why.
_REFUSED = {
    "key.serializer": "keys are sent as bytes: cast the key column to string or binary",
    "value.serializer": "values are sent as bytes: cast the value column to string or binary",
    "transactional.id": "the sink manages transactional ids (one per Spark partition): set "
                        f"the option {TRANSACTIONAL_ID_PREFIX} instead",
}


class Guarantee(Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


@dataclass(frozen=True)
class SinkOptions:
    """What every task and the driver's commit need, parsed once on the driver."""

    properties: Mapping[str, str] = field(repr=False)  # the producer's (kafka.* + defaults)
    topic: str | None
    guarantee: Guarantee
    transactional_id_prefix: str | None  # None: derived from the streaming query id
    intent_topic: str | None  # None: derived from the prefix
    transaction_timeout_ms: int | None  # None: the default, capped by the broker's maximum
    fail_on_data_loss: bool
    max_rows_per_send: int
    checkpoint_location: str | None = None  # Spark passes it as an option when set so
    worker_gc_freeze: bool = True  # see worker_gc
    worker_memory_reuse: bool = True  # see sink_memory

    @property
    def exactly_once(self) -> bool:
        return self.guarantee is Guarantee.EXACTLY_ONCE

    def __repr__(self) -> str:
        return (f"SinkOptions(topic={self.topic!r}, guarantee={self.guarantee.value}, "
                f"transactionalIdPrefix={self.transactional_id_prefix!r}, "
                f"properties={redact(self.properties)})")

    def producer_properties(self, transactional_id: str | None,
                            transaction_timeout_ms: int | None) -> dict[str, str]:
        props = dict(self.properties)
        if transactional_id is not None:
            props["transactional.id"] = transactional_id
            props["transaction.timeout.ms"] = str(
                transaction_timeout_ms or self.transaction_timeout_ms
                or DEFAULT_TRANSACTION_TIMEOUT_MS)
        return props

    def intent_topic_for(self, prefix: str) -> str:
        """The topic holding this sink's commit intents (see ``sink_intent``)."""
        return self.intent_topic or f"{prefix}.intent"


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check every option the sink reads; errors name the option and what it accepts."""
    lowered = {str(key).lower(): str(value) for key, value in options.items()}
    properties = client_properties(lowered)
    if not properties.get("bootstrap.servers"):
        raise KafkaOptionError("option 'kafka.bootstrap.servers' is required: the Kafka "
                               "brokers to write to, e.g. 'broker1:9092,broker2:9092'")
    for name, why in _REFUSED.items():
        if name in properties:
            raise KafkaOptionError(f"Kafka option 'kafka.{name}' is not supported by the "
                                   f"pykafka sink: {why}")
    guarantee = _guarantee(lowered.get(DELIVERY_GUARANTEE.lower()))
    if guarantee is Guarantee.EXACTLY_ONCE:
        _require_exactly_once_settings(properties)
    timeout_ms = option_int(lowered, "kafka.transaction.timeout.ms", minimum=1)
    for name, value in SINK_PRODUCER_DEFAULTS.items():
        properties.setdefault(name, value)
    properties.pop("transaction.timeout.ms", None)  # set per producer, after the broker check
    try:
        ProducerConfig.from_properties(properties)
    except ValueError as exc:  # the producer's own check, with the option's Spark name
        raise KafkaOptionError(f"invalid Kafka option for the pykafka sink: {exc} (set as "
                               "kafka.<property>)") from None
    topic = lowered.get(TOPIC)
    topic = topic.strip() if topic is not None else None
    if topic == "":
        raise KafkaOptionError("option 'topic' is empty: give a topic name, or drop the option "
                               "and provide a 'topic' column")
    prefix = lowered.get(TRANSACTIONAL_ID_PREFIX.lower())
    intent_topic = lowered.get(INTENT_TOPIC.lower())
    if prefix is not None and not prefix.strip():
        raise KafkaOptionError(f"option '{TRANSACTIONAL_ID_PREFIX}' is empty")
    if intent_topic is not None and not _TOPIC_NAME.match(intent_topic):
        raise KafkaOptionError(f"option '{INTENT_TOPIC}' must be a valid Kafka topic name "
                               f"(letters, digits, '.', '_', '-'), got {intent_topic!r}")
    if prefix is not None and intent_topic is None and not _TOPIC_NAME.match(f"{prefix}.intent"):
        raise KafkaOptionError(
            f"option '{TRANSACTIONAL_ID_PREFIX}'={prefix!r} cannot name the intent topic "
            f"'{prefix}.intent' (topic names allow letters, digits, '.', '_', '-'): use such a "
            f"prefix, or name the topic with the option '{INTENT_TOPIC}'")
    max_rows = option_int(lowered, MAX_ROWS_PER_SEND.lower(), minimum=1, default=200_000)
    assert max_rows is not None
    return SinkOptions(
        properties=properties, topic=topic, guarantee=guarantee,
        transactional_id_prefix=prefix, intent_topic=intent_topic,
        transaction_timeout_ms=timeout_ms,
        fail_on_data_loss=option_bool(lowered, FAIL_ON_DATA_LOSS.lower(), True),
        max_rows_per_send=max_rows, checkpoint_location=lowered.get("checkpointlocation"),
        worker_gc_freeze=option_bool(lowered, WORKER_GC_FREEZE.lower(), True),
        worker_memory_reuse=option_bool(lowered, WORKER_MEMORY_REUSE.lower(), True))


def _guarantee(raw: str | None) -> Guarantee:
    if raw is None:
        return Guarantee.EXACTLY_ONCE
    text = raw.strip().lower().replace("_", "-")
    for guarantee in Guarantee:
        if text == guarantee.value:
            return guarantee
    raise KafkaOptionError(f"option '{DELIVERY_GUARANTEE}' must be 'exactly-once' (the "
                           f"default) or 'at-least-once', got {shown(DELIVERY_GUARANTEE, raw)}")


def _require_exactly_once_settings(properties: Mapping[str, str]) -> None:
    acks = properties.get("acks", "all").strip().lower()
    if acks not in ("all", "-1"):
        raise KafkaOptionError(
            f"kafka.acks={acks} cannot be used with deliveryGuarantee=exactly-once: "
            "transactions need acks=all. Remove kafka.acks or use at-least-once")
    if properties.get("enable.idempotence", "true").strip().lower() == "false":
        raise KafkaOptionError(
            "kafka.enable.idempotence=false cannot be used with deliveryGuarantee="
            "exactly-once: transactions need the idempotent producer. Remove the option or "
            "use at-least-once")


# --- input columns ---------------------------------------------------------------------------

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType(), True),
                                     StructField("value", BinaryType(), True)]), True)


@dataclass(frozen=True)
class InputColumns:
    """Where the sink's columns are in the input (None: absent), checked at query start."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None
    timestamp: str | None = None
    timestamp_is_long: bool = False  # a long column holds epoch milliseconds


def input_columns(schema: StructType, options: SinkOptions) -> InputColumns:
    """Check the DataFrame's schema as Spark's sink does (exact, case-sensitive names; other
    columns ignored), plus our ``timestamp`` column."""
    fields = {field_.name: field_.dataType for field_ in schema.fields}
    if "value" not in fields:
        raise KafkaOptionError("Required attribute 'value' not found")
    _expect(fields, "value", (StringType, BinaryType), "string or binary")
    _expect(fields, "key", (StringType, BinaryType), "string or binary")
    _expect(fields, "topic", (StringType,), "string")
    _expect(fields, "partition", (IntegerType,), "int")
    _expect(fields, "timestamp", (TimestampType, LongType),
            "timestamp or long (epoch milliseconds)")
    if "headers" in fields and not _headers_type_ok(fields["headers"]):
        raise KafkaOptionError(
            f"headers attribute unsupported type {fields['headers'].simpleString()}. headers "
            "must be a(n) array<struct<key:string,value:binary>>")
    if options.topic is None and "topic" not in fields:
        raise KafkaOptionError("topic option required when no 'topic' attribute is present. "
                               "Use the topic option for setting a topic.")
    return InputColumns(
        value="value", key="key" if "key" in fields else None,
        topic="topic" if "topic" in fields and options.topic is None else None,
        partition="partition" if "partition" in fields else None,
        headers="headers" if "headers" in fields else None,
        timestamp="timestamp" if "timestamp" in fields else None,
        timestamp_is_long=isinstance(fields.get("timestamp"), LongType))


def _expect(fields: Mapping[str, DataType], name: str, types: tuple[type, ...],
            wanted: str) -> None:
    if name in fields and not isinstance(fields[name], types):
        raise KafkaOptionError(f"{name} attribute unsupported type "
                               f"{fields[name].simpleString()}. {name} must be a(n) {wanted}")


def _headers_type_ok(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    element = data_type.elementType
    return ([field_.name for field_ in element.fields] == ["key", "value"]
            and isinstance(element.fields[0].dataType, StringType)
            and isinstance(element.fields[1].dataType, BinaryType))
