"""The source behind ``format("pykafka")``: batch and micro-batch reads of Kafka topics.

``PyKafkaDataSource`` (``datasource``) calls in here: ``source_schema``, ``create_batch_reader``
and ``create_stream_reader``. The readers live in two places at once:

* on Spark's planner side (a Python process per query), a reader finds partitions and offsets
  with an ``OffsetReader`` and plans ``KafkaInputPartition``s (offset ranges);
* on executors, Spark unpickles a copy of the reader and calls ``read(partition)``: it leases a
  connection from the worker's ``FetcherPool`` and yields ``Fetcher.read_arrow``'s Arrow
  batches as they come, already in Spark's Kafka schema (nothing per row is done here).

Streaming offsets are Spark's JSON (``{"topic": {"0": 42}}``), one entry per partition, the
next offset to read. "Latest" starting positions stay the sentinel -1 in the initial offset
and are resolved when the first batch is planned: Spark asks ``initialOffset`` again when it
replays batch 0 after a restart, and a fresh "latest" then would no longer match the batch's
recorded end. So batch 0 of a query started at "latest" reads nothing; reading starts from the
offsets it recorded.

What the Python DataSource API of Spark 4.3 carries, and what it cannot:

* admission control (``latestOffset(start, limit)``, ``getDefaultReadLimit``,
  ``reportLatestOffset``) and ``Trigger.AvailableNow`` (``SupportsTriggerAvailableNow``): yes.
  One default read limit only: with both ``maxOffsetsPerTrigger`` and ``minOffsetsPerTrigger``
  the engine is given ``ReadMaxRows`` and the minimum is applied from the options.
* source metrics (Spark's ``ReportsSourceMetrics``: ``minOffsetsBehindLatest`` ...): no; the
  Python stream has no hook for them, so ``progress.sources[i].metrics`` stays empty. The
  latest offsets do reach ``progress.sources[i].latestOffset`` (``reportLatestOffset``);
  ``kafka_ds.spark.progress.offsets_behind_latest`` computes Spark's three metrics from a
  progress entry.
* preferred locations for tasks: no; ``InputPartition`` has no such field, so Spark places
  tasks freely. The worker pool keeps connections per broker set, not per partition, so reuse
  does not depend on placement.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_ds.client.offset_range import OffsetRange
from kafka_ds.protocol.errors import DataLossError
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark import errors
from kafka_ds.spark.offset_reader import OffsetReader
from kafka_ds.spark.offsets_json import (
    EARLIEST,
    LATEST,
    OffsetMap,
    format_offsets,
    offsets_from_json,
)
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.planning import (
    byte_limit,
    group_ranges,
    rate_limit,
    should_delay,
    split_ranges,
)
from kafka_ds.spark.source_options import Mode, SourceOptions, parse_source_options
from kafka_ds.spark.worker_gc import freeze_worker_heap

log = logging.getLogger(__name__)

# Sampled bytes-per-offset estimates (maxBytesPerTrigger) are refreshed this often.
_ESTIMATE_TTL_S = 60.0

_HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                      StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema: 7 columns, 8 with ``headers``; every field nullable."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS_TYPE))
    return StructType(fields)


def source_schema(options: Mapping[str, str]) -> StructType:
    """The schema for ``options`` (checked as far as both read modes share them)."""
    parsed = parse_source_options(options, "any")
    return kafka_schema(parsed.include_headers)


def _checked(options: Mapping[str, str], schema: StructType, mode: Mode) -> SourceOptions:
    parsed = parse_source_options(options, mode)
    if schema != kafka_schema(parsed.include_headers):
        raise KafkaOptionError("Kafka source has a fixed schema and cannot be set with a custom "
                               "one: remove .schema(...) from the reader (use includeHeaders "
                               "to add the headers column)")
    return parsed


def create_batch_reader(options: Mapping[str, str], schema: StructType) -> KafkaBatchReader:
    return KafkaBatchReader(_checked(options, schema, "batch"))


def create_stream_reader(options: Mapping[str, str], schema: StructType) -> KafkaStreamReader:
    return KafkaStreamReader(_checked(options, schema, "stream"))


# --- tasks -----------------------------------------------------------------------------------

class KafkaInputPartition(InputPartition):
    """One Spark task: one or more offset ranges, read together over one fetch session."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(None)
        self.ranges = tuple(OffsetRange(*r) for r in ranges)

    def __repr__(self) -> str:
        return "KafkaInputPartition(" + ", ".join(
            f"{r.topic}-{r.partition}[{r.start}, {r.end})" for r in self.ranges) + ")"


def read_partition(properties: Mapping[str, str], include_headers: bool, pool_capacity: int,
                   pool_idle_timeout_ms: int, partition: KafkaInputPartition, *,
                   freeze_gc: bool = False) -> Iterator[pa.RecordBatch]:
    """The executor side of a task: Arrow batches of the partition's ranges; with
    ``freeze_gc``, ``freeze_worker_heap`` once the read has finished."""
    # Imported here: the planner process (driver side) never reads, and need not load the
    # fetch engine and its decoders.
    from kafka_ds.spark.fetcher_pool import worker_pool

    pool = worker_pool(pool_capacity, pool_idle_timeout_ms)
    # A pooled fetcher's metadata may predate partitions planned since: the fetcher looks a
    # partition it does not know up again (``FetchLoop._locate``).
    with pool.lease(properties) as fetcher:
        try:
            yield from fetcher.read_arrow(partition.ranges, include_headers=include_headers)
        except DataLossError as exc:
            raise errors.could_not_read_offset_range(
                TopicPartition(exc.topic, exc.partition), exc.requested_offset,
                next((r.end for r in partition.ranges
                      if (r.topic, r.partition) == (exc.topic, exc.partition)), -1),
                f"{exc.reason}. Set the "
                "source option failOnDataLoss to false to skip missing offsets instead"
            ) from exc
    if freeze_gc:
        freeze_worker_heap()


class _ReaderBase:
    """What the batch and stream readers share: options, planning, reading."""

    options: SourceOptions

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._fetch_properties = options.fetch_properties()
        self._offsets: OffsetReader | None = None

    # Spark pickles the reader to send it to executors: connections stay behind.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_fetch_properties": self._fetch_properties}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._offsets = None

    @property
    def offset_reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    def close_driver(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None

    def _plan(self, ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
        options = self.options
        pieces = split_ranges(ranges, min_partitions=options.min_partitions,
                              max_records_per_partition=options.max_records_per_partition)
        merge_below = options.merge_ranges_below_offsets
        if options.min_partitions is not None or options.max_records_per_partition is not None:
            merge_below = 0  # the user asked for more tasks, not fewer
        leaders = self.offset_reader.leaders() if merge_below else {}
        return [KafkaInputPartition(task) for task in group_ranges(pieces, leaders, merge_below)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            # A batch plan with no range at all: Spark still runs one task, with a bare
            # InputPartition(None), and expects no rows from it.
            return iter(())
        options = self.options
        return read_partition(self._fetch_properties, options.include_headers,
                              options.pool_capacity, options.pool_idle_timeout_ms, partition,
                              freeze_gc=options.worker_gc_freeze)


# --- batch -----------------------------------------------------------------------------------

class KafkaBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("pykafka")``: one bounded read, planned on the driver."""

    def partitions(self) -> list[InputPartition]:
        reader = self.offset_reader
        options = self.options
        try:
            reader.check_topics_exist()
            topic_partitions = reader.partitions()
            start = reader.resolve(options.starting, topic_partitions, starting=True,
                                   keep_latest=False)
            end = reader.resolve(options.ending, topic_partitions, starting=False,
                                 keep_latest=False)
            ranges = []
            for tp in topic_partitions:
                if end[tp] < start[tp]:
                    start_option = options.starting.option or "startingOffsets"
                    end_option = options.ending.option or "endingOffsets"
                    raise KafkaOptionError(
                        f"[RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] the start offset "
                        f"{start[tp]} resolved from '{start_option}' is greater than the end "
                        f"offset {end[tp]} resolved from '{end_option}' for topic {tp.topic} "
                        f"partition {tp.partition}: check the start is not beyond the end or the "
                        "latest available offset")
                ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
            planned: list[InputPartition] = list(self._plan(ranges))
        finally:
            self.close_driver()
        return planned


# --- streaming -------------------------------------------------------------------------------

class KafkaStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pykafka")``: micro-batches with admission control."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._initial: OffsetMap | None = None
        self._latest: OffsetMap = {}
        self._available_now = False
        self._prefetched: OffsetMap | None = None
        self._topics_checked = False
        self._last_trigger_ms = 0
        self._byte_estimates: dict[TopicPartition, tuple[float, float]] = {}
        self._committed_to_group: OffsetMap = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._initial, self._latest, self._prefetched = None, {}, None
        self._available_now, self._topics_checked, self._last_trigger_ms = False, False, 0
        self._byte_estimates = {}
        self._committed_to_group = {}

    # --- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        if self._initial is None:
            reader = self.offset_reader
            reader.check_topics_exist()
            self._topics_checked = True
            self._initial = reader.resolve(self.options.starting, reader.partitions(),
                                           starting=True, keep_latest=True)
            log.info("initial offsets of %s: %s", self.options.describe_subscription(),
                     format_offsets(self._initial))
        return format_offsets(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def reportLatestOffset(self) -> dict | None:
        return format_offsets(self._latest) if self._latest else None

    def _resolve_start(self, start: Mapping[TopicPartition, int],
                       latest: Mapping[TopicPartition, int]) -> OffsetMap:
        """``start`` with sentinels replaced: -1 by ``latest`` (planning time), -2 by earliest."""
        earliest_needed = [tp for tp, offset in start.items() if offset == EARLIEST]
        earliest = self.offset_reader.earliest(earliest_needed) if earliest_needed else {}
        resolved: OffsetMap = {}
        for tp, offset in start.items():
            if offset == LATEST:
                if tp in latest:
                    resolved[tp] = latest[tp]
            elif offset == EARLIEST:
                if tp in earliest:
                    resolved[tp] = earliest[tp]
            else:
                resolved[tp] = offset
        return resolved

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        reader = self.offset_reader
        options = self.options
        start_map = offsets_from_json(start)
        has_sentinels = any(offset < 0 for offset in start_map.values())
        self._commit_to_group(start_map)
        if not self._topics_checked:
            reader.check_topics_exist(known=start_map)
            self._topics_checked = True
        if self._available_now and self._prefetched is not None:
            latest = self._prefetched
        else:
            latest = reader.latest(known={tp: o for tp, o in start_map.items() if o >= 0})
            if self._available_now:
                self._prefetched = latest
        self._latest = latest
        begin = self._resolve_start(start_map, latest)
        end: OffsetMap = dict(latest)
        if not isinstance(limit, ReadAllAvailable):
            if (options.min_offsets_per_trigger is not None and not self._available_now
                    and not has_sentinels):
                now_ms = int(time.time() * 1000)
                delay, self._last_trigger_ms = should_delay(
                    options.min_offsets_per_trigger, begin, latest, now_ms,
                    self._last_trigger_ms, options.max_trigger_delay_ms)
                if delay:
                    log.debug("delaying the batch: fewer than minOffsetsPerTrigger=%d new "
                              "offsets", options.min_offsets_per_trigger)
                    return start
            max_rows = (limit.max_rows if isinstance(limit, ReadMaxRows)
                        else options.max_offsets_per_trigger)
            if max_rows is not None:
                end = rate_limit(max_rows, begin, end, reader.earliest)
            max_bytes = (limit.max_bytes if isinstance(limit, ReadMaxBytes)
                         else options.max_bytes_per_trigger)
            if max_bytes is not None:
                end = byte_limit(max_bytes, begin, end, self._bytes_per_offset(begin, end))
        if not end:
            return {}
        if end == begin and not has_sentinels:
            return start  # nothing new: the same JSON, so Spark skips the trigger
        return format_offsets(end)

    def _bytes_per_offset(self, begin: Mapping[TopicPartition, int],
                          end: Mapping[TopicPartition, int]) -> dict[TopicPartition, float]:
        """Bytes per offset of partitions with a backlog: sampled at their start offset, and
        sampled again after ``_ESTIMATE_TTL_S``."""
        from kafka_ds.client.sampling import bytes_per_offset

        now = time.monotonic()
        wanted = {tp: begin[tp] for tp, offset in end.items()
                  if tp in begin and offset > begin[tp]
                  and now - self._byte_estimates.get(tp, (0.0, -1e9))[1] > _ESTIMATE_TTL_S}
        if wanted:
            sampled = bytes_per_offset(self.offset_reader.cluster, wanted,
                                       self.options.isolation_level)
            self._byte_estimates.update({tp: (value, now) for tp, value in sampled.items()})
        estimates = {tp: value for tp, (value, _) in self._byte_estimates.items()}
        fallback = sum(estimates.values()) / len(estimates) if estimates else 1.0
        return {tp: estimates.get(tp, fallback) for tp in end}

    # --- planning ----------------------------------------------------------------------------

    def _verify_available_now(self, end: Mapping[TopicPartition, int]) -> None:
        prefetched = self._prefetched
        assert prefetched is not None
        if set(prefetched) != set(end):
            raise errors.available_now_error(
                "MISMATCHED_TOPIC_PARTITIONS_BETWEEN_END_OFFSET_AND_PREFETCHED",
                "The end offset does not cover the same topic-partitions as the offsets "
                "prefetched at the start", "prefetched", set(prefetched), set(end))
        if any(end[tp] > prefetched[tp] for tp in end):
            raise errors.available_now_error(
                "END_OFFSET_HAS_GREATER_OFFSET_FOR_TOPIC_PARTITION_THAN_PREFETCHED",
                "An end offset is beyond the offsets prefetched at the start",
                "prefetched", prefetched, end)
        latest = self.offset_reader.latest(known=end)
        if not set(end) <= set(latest):
            raise errors.available_now_error(
                "LOST_TOPIC_PARTITIONS_IN_END_OFFSET_WITH_TRIGGER_AVAILABLENOW",
                "Topic-partitions were lost while the query ran", "latest", set(latest),
                set(end))
        if any(end[tp] > latest[tp] for tp in end):
            raise errors.available_now_error(
                "END_OFFSET_HAS_GREATER_OFFSET_FOR_TOPIC_PARTITION_THAN_LATEST_WITH_TRIGGER_"
                "AVAILABLENOW", "A partition reports a latest offset below the end offset",
                "latest", latest, end)

    def _replaying_first_batch(self, start: OffsetMap) -> bool:
        """Whether ``start`` is this run's initial offsets, planned without a latestOffset
        call in this run: batch 0, replayed from the offset log."""
        return self._initial is not None and start == self._initial and not self._latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        reader = self.offset_reader
        options = self.options
        start_map = offsets_from_json(start)
        end_map = offsets_from_json(end)
        if self._prefetched is not None:
            self._verify_available_now(end_map)
        begin = {tp: (end_map.get(tp, offset) if offset == LATEST else offset)
                 for tp, offset in start_map.items()}
        begin = self._resolve_start(begin, end_map)
        fail = options.fail_on_data_loss
        new = sorted(set(end_map) - set(begin))
        new_starts = reader.earliest(new) if new else {}
        missing = sorted(set(new) - set(new_starts))
        if missing:
            errors.report_data_loss(fail, errors.initial_offsets_not_found(missing))
        for tp in sorted(new_starts):
            if new_starts[tp] != 0:
                errors.report_data_loss(fail, errors.added_partition_not_from_zero(
                    tp, new_starts[tp]))
        deleted = sorted(set(begin) - set(end_map))
        if deleted and self._replaying_first_batch(start_map):
            # Spark asks initialOffset() again when it replays batch 0 after a restart (the
            # JVM connector keeps its first offsets in the checkpoint; a Python source cannot
            # reach it). Partitions added since batch 0 was planned are in that start and
            # not in its end: not deleted, new. Batch 1 reads them from earliest.
            log.info("batch 0 is replayed after a restart: %s were added since it was "
                     "planned; the next batch reads them from the earliest offset",
                     ", ".join(map(str, deleted)))
            for tp in deleted:
                del begin[tp]
            deleted = []
        if deleted:
            errors.report_data_loss(fail, errors.partitions_deleted(
                deleted, options.has_custom_group_id))
        begin.update(new_starts)
        ranges = []
        for tp in sorted(end_map):
            if tp not in begin:
                continue
            if end_map[tp] < begin[tp]:
                errors.report_data_loss(fail, errors.partition_offset_changed(
                    tp, begin[tp], end_map[tp]))
            ranges.append(OffsetRange(tp.topic, tp.partition, begin[tp], end_map[tp]))
        return self._plan(ranges)

    def commit(self, end: dict) -> None:
        self._commit_to_group(offsets_from_json(end))

    def _commit_to_group(self, offsets: Mapping[TopicPartition, int]) -> None:
        """``commitOffsetsToGroup``: publish offsets Spark has finished with to the group.

        Called with ``commit``'s end and with ``latestOffset``'s start: the engine asks for
        the next batch only after the previous one is in its commit log, so a start is always
        finished work, and it comes one trigger before ``commit`` (which Spark calls when the
        following batch starts, and never for the last batch of Trigger.AvailableNow).
        """
        group = self.options.commit_group
        concrete = {tp: o for tp, o in offsets.items() if o >= 0}
        if not group or not concrete or concrete == self._committed_to_group:
            return
        from kafka_ds.client.group_offsets import commit_offsets
        from kafka_ds.protocol.errors import KafkaDsError

        try:
            commit_offsets(self.offset_reader.cluster, group, concrete,
                           metadata="kafka_ds spark source")
            self._committed_to_group = concrete
        except KafkaDsError as exc:
            # Lag reporting only: the checkpoint is the truth, so the query goes on.
            log.warning("could not commit offsets to consumer group %r (commitOffsetsToGroup): "
                        "%s; lag tools will show the previous position", group, exc)

    def stop(self) -> None:
        self.close_driver()
