"""Planning arithmetic: rate limits, batch delays, range splitting, task grouping.

Pure functions over offset maps (no I/O, no clock): the stream and batch readers call them with
offsets they looked up. The rules are the JVM connector's, so the same backlog gives the same
micro-batches and the same tasks:

* ``rate_limit`` (``maxOffsetsPerTrigger``): each partition gets ``limit * backlog / total``
  offsets, rounded down, except that a share below one offset is rounded up so that a small
  partition is never starved. The batch is therefore about ``limit``, a little above or below.
* ``should_delay`` (``minOffsetsPerTrigger`` with ``maxTriggerDelay``): skip the trigger while
  fewer new offsets than the minimum are available, unless the delay has passed since the last
  batch that ran. The first trigger of a reader always runs.
* ``split_ranges`` (``maxRecordsPerPartition``, then ``minPartitions``): ranges above the cap are
  cut into ``ceil(size / cap)`` even parts; then, if there are still fewer ranges than
  ``minPartitions``, large ranges are cut in proportion to their share of the total (ranges whose
  share rounds to one part stay whole and leave the proportional math).
* ``group_ranges`` (ours): ranges smaller than ``merge_below`` offsets that share a leader go to
  one task, which reads them over one fetch session. Spark's per-task cost (tens of ms) is paid
  once instead of once per small partition.

"Size" is always ``end - start``: offsets, not records (compaction and transaction markers make
it an estimate), as in Spark.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from kafka_ds.client.offset_range import OffsetRange
from kafka_ds.protocol.types import TopicPartition

OffsetMap = dict[TopicPartition, int]
_LONG_MAX = 2**63 - 1


def _java_round(value: float) -> int:
    """Java's ``Math.round``: half up (Python's ``round`` is half to even)."""
    return math.floor(value + 0.5)


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               earliest_of: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]]
               ) -> OffsetMap:
    """End offsets admitting about ``limit`` offsets from ``start`` towards ``latest``.

    Partitions in ``latest`` but not in ``start`` are new: they count from their earliest
    offset, looked up (only if needed) with ``earliest_of``. A new partition whose earliest
    offset cannot be found is left at ``latest`` for planning to report.
    """
    new = sorted(set(latest) - set(start))
    new_starts: Mapping[TopicPartition, int] = earliest_of(new) if new else {}
    sizes: dict[TopicPartition, int] = {}
    begins: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, new_starts.get(tp))
        if begin is None:
            continue
        begins[tp] = begin
        if end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    limited: OffsetMap = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            limited[tp] = end
            continue
        share = limit * (size / total)
        admitted = math.ceil(share) if share < 1 else math.floor(share)
        begin = begins[tp]
        offset = _LONG_MAX if admitted > _LONG_MAX - begin else begin + admitted
        limited[tp] = min(end, offset)
    return limited


def should_delay(min_offsets: int, start: Mapping[TopicPartition, int],
                 latest: Mapping[TopicPartition, int], now_ms: int,
                 last_trigger_ms: int, max_delay_ms: int) -> tuple[bool, int]:
    """(skip this trigger?, the new last-trigger time).

    A partition missing from ``start`` counts its whole latest offset as new, as in Spark.
    """
    if now_ms - last_trigger_ms >= max_delay_ms:
        return False, now_ms
    available = sum(end - start.get(tp, 0) for tp, end in latest.items())
    if available < min_offsets:
        return True, last_trigger_ms
    return False, now_ms


def byte_limit(max_bytes: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               bytes_per_offset: Mapping[TopicPartition, float]) -> OffsetMap:
    """End offsets admitting about ``max_bytes`` (``maxBytesPerTrigger``, ours).

    Each partition's byte backlog is its offset backlog times its estimated bytes per offset;
    the byte budget is shared in proportion to it, and converted back to offsets. At least one
    offset per partition with a backlog, so that a batch larger than the cap still moves on.
    """
    backlog_bytes: dict[TopicPartition, float] = {}
    for tp, end in latest.items():
        begin = start.get(tp)
        if begin is not None and end > begin:
            backlog_bytes[tp] = (end - begin) * max(bytes_per_offset.get(tp, 1.0), 1e-9)
    total = sum(backlog_bytes.values())
    if total <= max_bytes:
        return dict(latest)
    limited: OffsetMap = {}
    for tp, end in latest.items():
        if tp not in backlog_bytes:
            limited[tp] = end
            continue
        share_bytes = max_bytes * (backlog_bytes[tp] / total)
        offsets = max(1, math.floor(share_bytes / max(bytes_per_offset.get(tp, 1.0), 1e-9)))
        limited[tp] = min(end, start[tp] + offsets)
    return limited


def _divide(parts: int, piece: OffsetRange) -> list[OffsetRange]:
    """``parts`` consecutive pieces; integer division, the last one takes the remainder."""
    remaining = piece.end - piece.start
    begin = piece.start
    pieces = []
    for index in range(parts):
        size = remaining // (parts - index)
        remaining -= size
        end = min(begin + size, piece.end)
        pieces.append(OffsetRange(piece.topic, piece.partition, begin, end))
        begin = end
    return pieces


def _part_count(size: int, total: int, min_parts: int) -> int:
    return max(_java_round(size / total * min_parts), 1)


def split_ranges(ranges: Iterable[OffsetRange], *, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges and split large ones (Spark's ``KafkaOffsetRangeCalculator``)."""
    kept = [r for r in ranges if r.end - r.start > 0]
    if ((min_partitions is None or len(kept) >= min_partitions)
            and max_records_per_partition is None):
        return kept
    divided = kept
    if max_records_per_partition is not None:
        divided = [piece for r in kept
                   for piece in _divide(math.ceil((r.end - r.start) / max_records_per_partition),
                                        r)
                   if piece.end - piece.start > 0]
    if min_partitions is None or min_partitions <= len(divided):
        return divided
    total = sum(r.end - r.start for r in divided)
    unsplit = [r for r in divided if _part_count(r.end - r.start, total, min_partitions) == 1]
    unsplit_total = sum(r.end - r.start for r in unsplit)
    # Keyed by partition, as Spark does: a partition already cut by maxRecordsPerPartition
    # counts as unsplit in every piece if one of its pieces is.
    unsplit_partitions = {r.topic_partition for r in unsplit}
    split_total = total - unsplit_total
    split_min = max(min_partitions - len(unsplit), 1)
    result: list[OffsetRange] = []
    for r in divided:
        parts = (1 if r.topic_partition in unsplit_partitions
                 else _part_count(r.end - r.start, split_total, split_min))
        result.extend(piece for piece in _divide(parts, r) if piece.end - piece.start > 0)
    return result


def group_ranges(ranges: Sequence[OffsetRange], leader_of: Mapping[TopicPartition, int],
                 merge_below: int) -> list[tuple[OffsetRange, ...]]:
    """Tasks: one per large range; small ranges with the same leader share a task, up to
    ``merge_below`` offsets per task. ``merge_below`` 0 gives one task per range."""
    ordered = sorted(ranges, key=lambda r: (r.topic, r.partition, r.start))
    if merge_below <= 0:
        return [(r,) for r in ordered]
    tasks: list[tuple[OffsetRange, ...]] = []
    small: dict[int, list[OffsetRange]] = defaultdict(list)
    for r in ordered:
        if r.end - r.start >= merge_below:
            tasks.append((r,))
        else:
            small[leader_of.get(r.topic_partition, -1)].append(r)
    for leader in sorted(small):
        group: list[OffsetRange] = []
        group_size = 0
        seen: set[TopicPartition] = set()
        for r in small[leader]:
            # One read takes one range per partition: pieces of a split partition go apart.
            if group and (group_size + (r.end - r.start) > merge_below
                          or r.topic_partition in seen):
                tasks.append(tuple(group))
                group, group_size, seen = [], 0, set()
            group.append(r)
            group_size += r.end - r.start
            seen.add(r.topic_partition)
        if group:
            tasks.append(tuple(group))
    return tasks
