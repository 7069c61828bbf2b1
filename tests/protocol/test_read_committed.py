"""read_committed filtering: aborted transactions, markers, interleaved producers."""

from __future__ import annotations

from kafka_ds.protocol.read_committed import aborted_batches, committed_mask, filter_committed
from kafka_ds.protocol.record_builder import NewRecord, encode_batch, encode_control_batch
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.records import ControlRecordType

ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


class Log:
    """A partition log built batch by batch, offsets assigned in order."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.next_offset = 0

    def data(self, producer_id: int, count: int = 2, *, transactional: bool = True) -> Log:
        records = [NewRecord(f"p{producer_id}".encode(), str(self.next_offset + i).encode())
                   for i in range(count)]
        self.parts.append(encode_batch(records, base_offset=self.next_offset,
                                       producer_id=producer_id, producer_epoch=0,
                                       base_sequence=0, is_transactional=transactional))
        self.next_offset += count
        return self

    def plain(self, count: int = 1) -> Log:
        records = [NewRecord(b"plain", str(self.next_offset + i).encode()) for i in range(count)]
        self.parts.append(encode_batch(records, base_offset=self.next_offset))
        self.next_offset += count
        return self

    def marker(self, producer_id: int, kind: ControlRecordType) -> Log:
        self.parts.append(encode_control_batch(kind, producer_id=producer_id, producer_epoch=0,
                                               base_offset=self.next_offset))
        self.next_offset += 1
        return self

    def committed_offsets(self, aborted: list[tuple[int, int]]) -> list[int]:
        columns = decode_columns(b"".join(self.parts))
        kept = filter_committed(columns, aborted)
        assert kept.offsets.tolist() == columns.offsets[committed_mask(columns,
                                                                       aborted)].tolist()
        return kept.offsets.tolist()


def test_no_aborted_transactions_keeps_all_data() -> None:
    log = Log().data(1).marker(1, COMMIT).plain()
    assert log.committed_offsets([]) == [0, 1, 3]


def test_aborted_transaction_is_dropped() -> None:
    log = Log().data(1).data(1).marker(1, ABORT).plain()
    assert log.committed_offsets([(1, 0)]) == [5]


def test_interleaved_producers() -> None:
    # offsets: p1 0-1, p2 2-3, p1 4-5, p2 6-7, p1 ABORT 8, p2 COMMIT 9, p1 10-11 (committed later)
    log = (Log().data(1).data(2).data(1).data(2).marker(1, ABORT).marker(2, COMMIT).data(1)
           .marker(1, COMMIT))
    assert log.committed_offsets([(1, 0)]) == [2, 3, 6, 7, 10, 11]


def test_commit_then_abort_of_the_same_producer() -> None:
    # p1 commits 0-1 (marker 2), then aborts 3-4 (marker 5), then plain data.
    log = Log().data(1).marker(1, COMMIT).data(1).marker(1, ABORT).plain()
    assert log.committed_offsets([(1, 3)]) == [0, 1, 6]


def test_abort_then_commit_of_the_same_producer() -> None:
    # p1 aborts 0-1 (marker 2), then commits 3-4 (marker 5): the second transaction survives
    # because the ABORT marker ended the first one.
    log = Log().data(1).marker(1, ABORT).data(1).marker(1, COMMIT)
    assert log.committed_offsets([(1, 0)]) == [3, 4]


def test_two_aborted_transactions_of_one_producer_in_any_list_order() -> None:
    log = (Log().data(1).marker(1, ABORT).data(1).marker(1, COMMIT).data(1)
           .marker(1, ABORT).data(1))
    # Aborted: 0-1 and 6-7; committed 3-4; 9-10 is still open (no marker yet): kept, since
    # the broker only returns up to the last stable offset and never lists it as aborted.
    assert log.committed_offsets([(1, 6), (1, 0)]) == [3, 4, 9, 10]


def test_aborted_range_spanning_batches_and_other_producers() -> None:
    log = (Log().data(1, 3).data(2, 1).data(1, 3).plain(2).data(1, 1).marker(1, ABORT)
           .data(2, 1).marker(2, ABORT))
    # p1's 0-2, 4-6 and 9 are aborted; p2's 3 is kept (its aborted range starts at 11).
    assert log.committed_offsets([(1, 0), (2, 11)]) == [3, 7, 8]


def test_non_transactional_batches_of_an_active_producer_are_kept() -> None:
    log = Log().data(1).data(1, transactional=False).marker(1, ABORT)
    assert log.committed_offsets([(1, 0)]) == [2, 3]


def test_aborted_entry_before_the_fetched_range_and_control_batches() -> None:
    # The fetch starts inside an aborted transaction whose first offset we never see.
    log = Log().data(1).marker(1, ABORT).data(2).marker(2, COMMIT)
    columns = decode_columns(b"".join(log.parts[1:]))
    drop = aborted_batches(columns.batches, [(1, 0)])
    assert drop.tolist() == [True, False, True]  # control batches are never kept
    assert filter_committed(columns, [(1, 0)]).offsets.tolist() == [3, 4]


def test_markers_below_the_start_offset_still_close_transactions() -> None:
    # The abort marker at 2 lies before start_offset; the batch metadata keeps it, so p1's
    # later committed data is not dropped.
    log = Log().data(1).marker(1, ABORT).data(1).marker(1, COMMIT)
    columns = decode_columns(b"".join(log.parts), start_offset=3)
    assert filter_committed(columns, [(1, 0)]).offsets.tolist() == [3, 4]
