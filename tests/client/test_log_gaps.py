"""The data-loss verdicts of a read (``log_gaps``), at their boundaries.

The oracle is the rule each verdict documents, offset by offset: an offset is missing only
when the log's start or end says so, and a read resumes at the log start, or at the range's
end when the log ends below the position. The real-broker cases are in
integration/test_fetcher_faults.py (DeleteRecords, a range past the log end) and
integration/test_fetcher.py.
"""

from __future__ import annotations

from kafka_ds.client import log_gaps
from kafka_ds.client.fetch_state import PartitionRead
from kafka_ds.protocol.types import TopicPartition


def _part(position: int) -> PartitionRead:
    return PartitionRead(TopicPartition("t", 3), start=0, end=100, position=position,
                         last_progress_ms=0)


def test_records_past_the_position_are_a_loss_only_when_the_log_start_moved_past_it() -> None:
    assert log_gaps.deleted_before_read(_part(10), 10, 40) is None  # starts at the position
    assert log_gaps.deleted_before_read(_part(10), 15, 0) is None  # compaction or markers
    gap = log_gaps.deleted_before_read(_part(10), 45, 40)
    assert gap is not None and gap.resume_at == 40
    assert gap.loss.requested_offset == 10 and gap.loss.available_offset == 40
    assert "offsets up to 44 were deleted" in str(gap.loss) and "t-3" in str(gap.loss)


def test_out_of_range_is_a_loss_at_either_end_and_a_retry_inside() -> None:
    assert log_gaps.outside_log(_part(10), 10, 50) is None
    assert log_gaps.outside_log(_part(50), 10, 50) is None
    below = log_gaps.outside_log(_part(9), 10, 50)
    assert below is not None and below.resume_at == 10 and "log start" in str(below.loss)
    above = log_gaps.outside_log(_part(51), 10, 50)
    assert above is not None and above.resume_at == 100  # nothing of the range is left
    assert above.loss.available_offset == 50 and "the log ends at 50" in str(above.loss)


def test_a_stall_is_a_loss_only_at_or_past_the_log_end() -> None:
    assert log_gaps.ended_below(_part(49), 50) is None
    gap = log_gaps.ended_below(_part(50), 50)
    assert gap is not None and gap.resume_at == 100
    assert "below the range's end 100" in str(gap.loss)
