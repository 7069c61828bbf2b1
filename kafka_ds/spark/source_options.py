"""The source's options: the JVM connector's names, defaults, precedence and checks.

``parse_source_options(options, mode)`` reads Spark's option map once, on the driver, and
returns a frozen, picklable ``SourceOptions``; every malformed or forbidden option raises
``KafkaOptionError`` naming the option and what it accepts. ``mode`` is ``"any"`` when only the
options both read modes share can be checked (``DataSource.schema`` does not know whether a
batch or a stream asked), ``"batch"`` or ``"stream"`` when the reader is built.

Precedence of where to start (and, in batch, where to end), as in Spark:
``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets``; a lower option
given beside a higher one is ignored.

Options that are ours, not the JVM connector's (all optional):

* ``maxBytesPerTrigger``: a cap on the bytes (as stored in Kafka, i.e. compressed) per
  micro-batch, spread over partitions like ``maxOffsetsPerTrigger``.
* ``commitOffsetsToGroup``: a consumer group to which each committed micro-batch's end
  offsets are written, for lag tools. Never read back: the checkpoint stays the truth.
* ``mergeRangesBelowOffsets`` (5000): offset ranges smaller than this that share a leader are
  read by one task, over one fetch session. 0 turns merging off; ``minPartitions`` does too.
* ``fetcherPool.capacity`` (16) and ``fetcherPool.idleTimeoutMs`` (300000): the per-Python-
  worker pool of broker connections kept between tasks.
* ``workerGcFreeze`` (true): freeze the Python worker's long-lived objects out of the cyclic
  garbage collector once (``gc.freeze``), see ``worker_gc.freeze_worker_heap``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kafka_ds.protocol.types import IsolationLevel, TopicPartition
from kafka_ds.spark.offsets_json import (
    EARLIEST,
    LATEST,
    TIMESTAMPS_EXAMPLE,
    OffsetMap,
    describe,
    parse_offsets,
    parse_partitions,
)
from kafka_ds.spark.options import (
    KafkaOptionError,
    client_properties,
    option_bool,
    shown,
)

log = logging.getLogger(__name__)

Mode = Literal["any", "batch", "stream"]

ASSIGN = "assign"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribepattern"
_STRATEGY_NAMES = {ASSIGN: "assign", SUBSCRIBE: "subscribe",
                   SUBSCRIBE_PATTERN: "subscribePattern"}
_STRATEGIES_TEXT = "subscribe, subscribePattern, assign"

DEFAULT_POLL_TIMEOUT_MS = 120_000  # spark.network.timeout (120 s), as the JVM connector
DEFAULT_MAX_TRIGGER_DELAY = "15m"

# Kafka consumer settings the source must own (Spark rejects the same ones).
_FORBIDDEN = {
    "auto.offset.reset": (
        "Kafka option 'kafka.auto.offset.reset' is not supported: set the source option "
        "'startingOffsets' to 'earliest' or 'latest' instead. The query tracks its offsets in "
        "its checkpoint, and startingOffsets applies only when a query starts for the first "
        "time."),
    "key.deserializer": (
        "Kafka option 'kafka.key.deserializer' is not supported: keys are always returned as "
        "bytes (the binary 'key' column); deserialize them with DataFrame operations, e.g. "
        "col('key').cast('string')."),
    "value.deserializer": (
        "Kafka option 'kafka.value.deserializer' is not supported: values are always returned "
        "as bytes (the binary 'value' column); deserialize them with DataFrame operations, e.g. "
        "from_json(col('value').cast('string'), schema)."),
    "enable.auto.commit": (
        "Kafka option 'kafka.enable.auto.commit' is not supported: the query keeps its offsets "
        "in its checkpoint. To let lag tools see the query, set 'commitOffsetsToGroup' to a "
        "consumer group name instead."),
    "interceptor.classes": (
        "Kafka option 'kafka.interceptor.classes' is not supported: interceptors could change "
        "records under the query."),
}

_GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' is set. format(\"pykafka\") never joins a consumer group, so "
    "it does not affect what is read; it is accepted for compatibility with format(\"kafka\"), "
    "whose consumers in one group can interfere. To publish the query's progress to a group, "
    "use the option 'commitOffsetsToGroup'.")


@dataclass(frozen=True)
class OffsetLimit:
    """Where to start or end: ``earliest``, ``latest``, per-partition offsets or timestamps,
    or one timestamp for every partition (as Spark's ``KafkaOffsetRangeLimit``)."""

    kind: Literal["earliest", "latest", "offsets", "timestamps", "timestamp"]
    option: str = ""  # the option it came from, for messages
    offsets: OffsetMap = field(default_factory=dict)  # offsets, or timestamps per partition
    topic_sentinels: dict[str, int] = field(default_factory=dict)  # {"t": "earliest"} form
    timestamp_ms: int | None = None
    no_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest


EARLIEST_LIMIT = OffsetLimit("earliest")
LATEST_LIMIT = OffsetLimit("latest")


@dataclass(frozen=True)
class SourceOptions:
    """Every source option, parsed and checked. Picklable: it travels to Spark's workers."""

    strategy: str  # ASSIGN, SUBSCRIBE or SUBSCRIBE_PATTERN
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern
    assigned: tuple[TopicPartition, ...] = ()  # assign
    # The kafka.* options without the prefix: secrets inside, so never in a repr.
    client: dict[str, str] = field(default_factory=dict, repr=False)
    starting: OffsetLimit = LATEST_LIMIT
    ending: OffsetLimit = LATEST_LIMIT
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    max_bytes_per_trigger: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    commit_group: str | None = None
    merge_ranges_below_offsets: int = 5000
    pool_capacity: int = 16
    pool_idle_timeout_ms: int = 300_000
    worker_gc_freeze: bool = True

    @property
    def isolation_level(self) -> int:
        return IsolationLevel.parse(self.client.get("isolation.level", "read_uncommitted"))

    @property
    def has_custom_group_id(self) -> bool:
        return "group.id" in self.client

    def describe_subscription(self) -> str:
        if self.strategy == SUBSCRIBE:
            return f"subscribe={','.join(self.topics)}"
        if self.strategy == SUBSCRIBE_PATTERN:
            return f"subscribePattern={self.pattern}"
        return f"assign={describe(self.assigned)}"

    def fetch_properties(self) -> dict[str, str]:
        """Client + fetch properties for the executors' fetchers (Java names)."""
        properties = dict(self.client)
        properties.setdefault("fetch.timeout.ms", str(self.poll_timeout_ms))
        properties["fail.on.data.loss"] = "true" if self.fail_on_data_loss else "false"
        properties["include.headers"] = "true" if self.include_headers else "false"
        return properties


# --- scalar parsing, Java-strict -------------------------------------------------------------

_LONG = re.compile(r"^[+-]?\d+$")
_TIME = re.compile(r"^(-?\d+)([a-z]+)?$")
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}


def _long(options: Mapping[str, str], key: str, name: str, *, minimum: int | None = None,
          bits: int = 64, must: str = "") -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    text = str(raw).strip()
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    kind = "a long" if bits == 64 else "an int"
    if not _LONG.match(text) or not low <= int(text) <= high:
        raise KafkaOptionError(f"option '{name}' must be a whole number ({kind}), got "
                               f"{shown(name, raw)}")
    value = int(text)
    if minimum is not None and value < minimum:
        raise KafkaOptionError(f"option '{name}' must be {must or f'at least {minimum}'}, "
                               f"got {value}")
    return value


def _bool(options: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    return option_bool({name: options[key]} if key in options else {}, name, default)


def _time_ms(options: Mapping[str, str], key: str, name: str, default: str) -> int:
    raw = options.get(key, default)
    match = _TIME.match(str(raw).strip().lower())
    if match is None or (match.group(2) and match.group(2) not in _TIME_UNITS_MS):
        raise KafkaOptionError(
            f"option '{name}' must be a duration such as 500ms, 30s, 15m, 1h or 2d (a bare "
            f"number is milliseconds), got {raw!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "ms"])


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): value for key, value in options.items() if value is not None}


# --- the strategy ----------------------------------------------------------------------------

def _strategy(options: Mapping[str, str]) -> tuple[str, tuple[str, ...], str,
                                                   tuple[TopicPartition, ...]]:
    given = [key for key in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if key in options]
    if not given:
        raise KafkaOptionError(f"One of the following options must be specified for Kafka "
                               f"source: {_STRATEGIES_TEXT}. Set 'subscribe' to a comma-"
                               "separated list of topics, for example.")
    if len(given) > 1:
        names = ", ".join(_STRATEGY_NAMES[key] for key in given)
        raise KafkaOptionError(f"Only one of the following options can be specified for Kafka "
                               f"source: {_STRATEGIES_TEXT}; got {names}")
    key = given[0]
    value = str(options[key])
    if key == SUBSCRIBE:
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise KafkaOptionError(f"option 'subscribe' names no topic (got {value!r}): give "
                                   "a comma-separated list of topics")
        return key, topics, "", ()
    if key == SUBSCRIBE_PATTERN:
        pattern = value.strip()
        if not pattern:
            raise KafkaOptionError(f"option 'subscribePattern' is empty (got {value!r}): give "
                                   "a regular expression matching topic names")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaOptionError(f"option 'subscribePattern' is not a valid regular "
                                   f"expression ({exc}): {pattern!r}") from None
        return key, (), pattern, ()
    if not value.strip().startswith("{"):
        raise KafkaOptionError(f"No topicpartitions to assign as specified value for option "
                               f"'assign' is {value!r}: expected e.g. "
                               '{"topicA":[0,1],"topicB":[2,4]}')
    assigned = tuple(parse_partitions("assign", value))
    if not assigned:
        raise KafkaOptionError(f"option 'assign' lists no partition (got {value!r})")
    return key, (), "", assigned


# --- offsets and timestamps ------------------------------------------------------------------

def _offset_limit(options: Mapping[str, str], side: Literal["starting", "ending"],
                  default: OffsetLimit, no_match_latest: bool) -> OffsetLimit:
    timestamp_key, by_ts_key, offsets_key = (f"{side}timestamp", f"{side}offsetsbytimestamp",
                                             f"{side}offsets")
    timestamp_name, by_ts_name, offsets_name = (f"{side}Timestamp", f"{side}OffsetsByTimestamp",
                                                f"{side}Offsets")
    if timestamp_key in options:
        raw = str(options[timestamp_key]).strip()
        if not _LONG.match(raw) or not 0 <= int(raw) < 2**63:
            raise KafkaOptionError(f"option '{timestamp_name}' must be one timestamp in "
                                   f"milliseconds since the epoch (a non-negative long), got "
                                   f"{raw!r}")
        return OffsetLimit("timestamp", timestamp_name, timestamp_ms=int(raw),
                           no_match_latest=no_match_latest)
    if by_ts_key in options:
        timestamps, _ = parse_offsets(by_ts_name, str(options[by_ts_key]),
                                      allow_topic_sentinels=False, example=TIMESTAMPS_EXAMPLE)
        negative = sorted(tp for tp, ts in timestamps.items() if ts < 0)
        if negative:
            raise KafkaOptionError(f"option '{by_ts_name}': timestamps must be milliseconds "
                                   f"since the epoch (>= 0); {describe(negative)} are negative")
        return OffsetLimit("timestamps", by_ts_name, offsets=timestamps,
                           no_match_latest=no_match_latest)
    if offsets_key in options:
        text = str(options[offsets_key]).strip()
        if text.lower() == "earliest":
            return OffsetLimit("earliest", offsets_name)
        if text.lower() == "latest":
            return OffsetLimit("latest", offsets_name)
        offsets, sentinels = parse_offsets(offsets_name, text)
        bad = sorted(tp for tp, offset in offsets.items() if offset < EARLIEST)
        if bad:
            raise KafkaOptionError(f"option '{offsets_name}': {describe(bad)} have negative "
                                   "offsets; use an offset >= 0, -1 for latest or -2 for "
                                   "earliest")
        return OffsetLimit("offsets", offsets_name, offsets=offsets, topic_sentinels=sentinels)
    return default


def _has_sentinel(limit: OffsetLimit, sentinel: int) -> list[str]:
    items = [str(tp) for tp, offset in sorted(limit.offsets.items()) if offset == sentinel]
    items += [topic for topic, value in sorted(limit.topic_sentinels.items()) if value == sentinel]
    return items


def _check_batch_limits(starting: OffsetLimit, ending: OffsetLimit) -> None:
    if starting.kind == "latest":
        raise KafkaOptionError("option 'startingOffsets': starting offset can't be latest for "
                               "batch queries on Kafka (there would be nothing to read); use "
                               "'earliest', offsets or a timestamp")
    latest = _has_sentinel(starting, LATEST)
    if latest:
        raise KafkaOptionError(f"option 'startingOffsets': startingOffsets for "
                               f"{', '.join(latest)} can't be latest (-1) for batch queries on "
                               "Kafka")
    if ending.kind == "earliest":
        raise KafkaOptionError("option 'endingOffsets': ending offset can't be earliest for "
                               "batch queries on Kafka; use 'latest' or offsets")
    earliest = _has_sentinel(ending, EARLIEST)
    if earliest:
        raise KafkaOptionError(f"option 'endingOffsets': ending offset for "
                               f"{', '.join(earliest)} can't be earliest (-2) for batch "
                               "queries on Kafka")
    if starting.kind == "offsets" and ending.kind == "offsets":
        if set(starting.offsets) != set(ending.offsets) or set(starting.topic_sentinels) != set(
                ending.topic_sentinels):
            raise KafkaOptionError(
                "[MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET] options "
                "'startingOffsets' and 'endingOffsets' must list the same topic-partitions; "
                f"start: {describe(starting.offsets)}, end: {describe(ending.offsets)}")
        for tp in sorted(starting.offsets):
            start, end = starting.offsets[tp], ending.offsets[tp]
            if start >= 0 and end >= 0 and start > end:
                raise KafkaOptionError(
                    f"[UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] option "
                    f"'startingOffsets' {start} is greater than 'endingOffsets' {end} for "
                    f"topic {tp.topic} partition {tp.partition}")
    if starting.kind == "timestamps" and ending.kind == "timestamps":
        if set(starting.offsets) != set(ending.offsets):
            raise KafkaOptionError(
                "[MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET] options "
                "'startingOffsetsByTimestamp' and 'endingOffsetsByTimestamp' must list the same "
                f"topic-partitions; start: {describe(starting.offsets)}, end: "
                f"{describe(ending.offsets)}")
        for tp in sorted(starting.offsets):
            if starting.offsets[tp] > ending.offsets[tp]:
                raise KafkaOptionError(
                    f"[UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] option "
                    f"'startingOffsetsByTimestamp' {starting.offsets[tp]} is greater than "
                    f"'endingOffsetsByTimestamp' {ending.offsets[tp]} for topic {tp.topic} "
                    f"partition {tp.partition}")


# --- the whole map ---------------------------------------------------------------------------

def parse_source_options(raw_options: Mapping[str, str], mode: Mode = "any") -> SourceOptions:
    """Check and parse the source options for ``mode``; raise ``KafkaOptionError`` if wrong."""
    options = _lowered(raw_options)
    if mode == "stream":
        if "endingoffsets" in options:
            raise KafkaOptionError("option 'endingOffsets': ending offset not valid in "
                                   "streaming queries (a stream reads on as data arrives); "
                                   "remove it, or read with spark.read for a bounded batch")
        if "endingoffsetsbytimestamp" in options:
            raise KafkaOptionError("option 'endingOffsetsByTimestamp': ending timestamp not "
                                   "valid in streaming queries; remove it, or read with "
                                   "spark.read for a bounded batch")
    strategy, topics, pattern, assigned = _strategy(options)

    min_partitions = _long(options, "minpartitions", "minPartitions", minimum=1, bits=32,
                           must="positive")
    max_records = _long(options, "maxrecordsperpartition", "maxRecordsPerPartition", minimum=1,
                        must="positive")

    client = client_properties(options)
    lowered_client = {key.lower(): key for key in client}
    for name, message in _FORBIDDEN.items():
        if name in lowered_client:
            raise KafkaOptionError(message)
    if not str(client.get("bootstrap.servers", "")).strip():
        raise KafkaOptionError("Option 'kafka.bootstrap.servers' must be specified for "
                               "configuring Kafka consumer: a comma-separated host:port list")
    if "group.id" in client:
        log.warning(_GROUP_ID_WARNING)
    if "isolation.level" in client:
        try:
            IsolationLevel.parse(client["isolation.level"])
        except ValueError:
            raise KafkaOptionError(f"option 'kafka.isolation.level' must be read_uncommitted or "
                                   f"read_committed, got {client['isolation.level']!r}") from None

    max_offsets = _long(options, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = _long(options, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise KafkaOptionError(f"The value of minOffsetsPerTrigger({min_offsets}) is higher "
                               f"than the maxOffsetsPerTrigger({max_offsets}): make "
                               "minOffsetsPerTrigger the smaller one")
    if max_offsets is not None and max_offsets <= 0:
        raise KafkaOptionError(f"option 'maxOffsetsPerTrigger' must be positive, got "
                               f"{max_offsets} (a query would never advance)")
    max_trigger_delay_ms = _time_ms(options, "maxtriggerdelay", "maxTriggerDelay",
                                    DEFAULT_MAX_TRIGGER_DELAY)
    max_bytes = _long(options, "maxbytespertrigger", "maxBytesPerTrigger", minimum=1,
                      must="positive")

    strategy_text = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_text not in ("error", "latest"):
        raise KafkaOptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                               f"'latest', got {options['startingoffsetsbytimestampstrategy']!r}")
    starting_default = EARLIEST_LIMIT if mode == "batch" else LATEST_LIMIT
    starting = _offset_limit(options, "starting", starting_default, strategy_text == "latest")
    ending = _offset_limit(options, "ending", LATEST_LIMIT, False)
    if mode == "batch":
        _check_batch_limits(starting, ending)
        for key, name in (("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
                          ("minoffsetspertrigger", "minOffsetsPerTrigger"),
                          ("maxtriggerdelay", "maxTriggerDelay"),
                          ("maxbytespertrigger", "maxBytesPerTrigger")):
            if key in options:
                log.warning("%s option ignored in batch queries", name)

    poll_timeout_ms = _long(options, "kafkaconsumer.polltimeoutms",
                            "kafkaConsumer.pollTimeoutMs", minimum=1)
    retries = _long(options, "fetchoffset.numretries", "fetchOffset.numRetries", minimum=1,
                    bits=32)
    interval = _long(options, "fetchoffset.retryintervalms", "fetchOffset.retryIntervalMs",
                     minimum=0)
    commit_group = options.get("commitoffsetstogroup")
    if commit_group is not None and not str(commit_group).strip():
        raise KafkaOptionError("option 'commitOffsetsToGroup' is empty: give a consumer group "
                               "name, or leave the option out")
    merge_below = _long(options, "mergerangesbelowoffsets", "mergeRangesBelowOffsets",
                        minimum=0)
    pool_capacity = _long(options, "fetcherpool.capacity", "fetcherPool.capacity", minimum=1,
                          bits=32)
    pool_idle = _long(options, "fetcherpool.idletimeoutms", "fetcherPool.idleTimeoutMs",
                      minimum=1)
    return SourceOptions(
        strategy=strategy, topics=topics, pattern=pattern, assigned=assigned, client=client,
        starting=starting, ending=ending,
        fail_on_data_loss=_bool(options, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(options, "includeheaders", "includeHeaders", False),
        min_partitions=min_partitions, max_records_per_partition=max_records,
        max_offsets_per_trigger=max_offsets, min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_trigger_delay_ms, max_bytes_per_trigger=max_bytes,
        poll_timeout_ms=poll_timeout_ms or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_num_retries=3 if retries is None else retries,
        fetch_offset_retry_interval_ms=1000 if interval is None else interval,
        commit_group=None if commit_group is None else str(commit_group).strip(),
        merge_ranges_below_offsets=5000 if merge_below is None else merge_below,
        pool_capacity=pool_capacity or 16,
        pool_idle_timeout_ms=pool_idle or 300_000,
        worker_gc_freeze=_bool(options, "workergcfreeze", "workerGcFreeze", True),
    )
