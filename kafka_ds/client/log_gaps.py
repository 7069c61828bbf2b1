"""What offsets missing from a partition's log mean for a read: the data-loss verdicts.

Layer: client. A read meets a gap three ways: a response that starts past the position
(retention or DeleteRecords removed the offsets before they were read), OFFSET_OUT_OF_RANGE
(the log no longer spans the position, at either end), and a partition that stalls because
its log ends below the range (an unclean leader election truncated it, or an end offset was
given beyond latest). Each verdict here takes what the read knows (its range, its position)
and what the log says (its start, its end, the first offset a response held), and returns
the loss to report with the offset to resume at, or None when nothing is missing.
``FetchLoop._data_loss`` acts on it: fail, or skip under fail.on.data.loss=false.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka_ds.client.cluster import Cluster
from kafka_ds.client.fetch_state import PartitionRead
from kafka_ds.client.offsets import earliest_offsets, latest_offsets
from kafka_ds.protocol.errors import DataLossError
from kafka_ds.protocol.types import TopicPartition


class Gap(NamedTuple):
    loss: DataLossError
    resume_at: int  # the first offset there is to read (the range's end: none left)


def deleted_before_read(part: PartitionRead, first_offset: int, log_start: int) -> Gap | None:
    """A response whose first record is past the position, with the log starting past it
    too: the offsets between were deleted. (A gap the log start does not explain is
    compaction or transaction markers: nothing is missing.)"""
    position = part.position
    if first_offset <= position or log_start <= position:
        return None
    return Gap(_loss(part, log_start, f"offsets up to {first_offset - 1} were deleted before "
                                      "they were read"), log_start)


def outside_log(part: PartitionRead, log_start: int, log_end: int) -> Gap | None:
    """OFFSET_OUT_OF_RANGE, judged by the log's ends: None when the position is inside
    them (a leader change raced the fetch: ask again)."""
    if part.position < log_start:
        return Gap(_loss(part, log_start, "the log start moved past it (retention or "
                                          "DeleteRecords)"), log_start)
    if part.position > log_end:
        return Gap(_loss(part, log_end, f"the log ends at {log_end}, below it (truncated, or "
                                        "the topic was recreated)"), part.end)
    return None


def ended_below(part: PartitionRead, log_end: int) -> Gap | None:
    """A partition that made no progress for fetch.timeout.ms: a loss if its log ends at or
    before the position (the offsets it waits for do not exist), as the JVM connector says
    after its poll timeout; None if records exist past it (a real stall)."""
    if part.position < log_end:
        return None
    return Gap(_loss(part, log_end, f"the log ends at {log_end}, below the range's end "
                                    f"{part.end} (truncated, or an end offset beyond the "
                                    "latest one)"), part.end)


def log_bounds(cluster: Cluster, tp: TopicPartition, timeout_ms: int, *,
               with_start: bool) -> tuple[int, int]:
    """(log start offset, or -1 unless ``with_start``; high watermark) of ``tp``."""
    start = earliest_offsets(cluster, [tp], timeout_ms=timeout_ms)[tp] if with_start else -1
    return start, latest_offsets(cluster, [tp], timeout_ms=timeout_ms)[tp]


def _loss(part: PartitionRead, available_offset: int, reason: str) -> DataLossError:
    return DataLossError(part.tp.topic, part.tp.partition, part.position, available_offset,
                         reason)
