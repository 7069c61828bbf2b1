"""read_committed: which fetched records belong to aborted transactions.

Layer: protocol (sans-IO). Imports numpy and ``record_columns`` (for its types only). Spec:
KIP-98 ("Transactional consumer"); the algorithm is the Java consumer's
(``CompletedFetch.nextFetchedRecord`` and its aborted-transaction queue).

With isolation level READ_COMMITTED the broker answers up to the last stable offset and lists,
per partition, the transactions that were aborted in the returned range: ``(producer_id,
first_offset)``. It does not filter anything itself. A transactional batch is dropped when its
producer has an aborted transaction that is still open at that batch, where "open" runs from
the transaction's first offset up to the producer's ABORT marker. The walk goes batch by batch,
in offset order:

1. Before looking at a batch, every listed aborted transaction whose first offset is at or
   below the batch's last offset becomes active: its producer id joins the active set. The
   list is consumed in first-offset order, so a producer with two aborted transactions gets
   the second one only once the walk reaches it: after the first one's marker has removed the
   producer again. This is why the list must be sorted (the broker does not promise an order).
2. A control batch of that producer holding an ABORT marker ends the transaction: the producer
   leaves the active set. (A COMMIT marker changes nothing: committed data is kept anyway.)
3. A transactional data batch whose producer is in the active set is dropped whole.
4. Control batches are never returned as records.

Non-transactional batches are always kept, even from an active producer: a producer id only
writes transactional data while in a transaction. The loop below runs once per batch, never
per record; the per-record mask is one numpy gather.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kafka_ds.protocol.record_columns_types import BatchColumns, RecordColumns
from kafka_ds.protocol.records import ControlRecordType

BoolArray = npt.NDArray[np.bool_]


def aborted_batches(batches: BatchColumns,
                    aborted_transactions: Iterable[tuple[int, int]]) -> BoolArray:
    """Per batch: True when it must not be returned (aborted data, or a control batch).

    ``aborted_transactions`` is the Fetch response's list of ``(producer_id, first_offset)``
    for the partition (None-safe: pass ``()`` when the broker sent none).
    """
    drop = batches.is_control.copy()
    pending = sorted(aborted_transactions, key=lambda entry: entry[1])
    if not pending or not batches.is_transactional.any():
        return drop
    next_pending = 0
    active: set[int] = set()
    producer_ids = batches.producer_ids.tolist()
    last_offsets = batches.last_offsets.tolist()
    transactional = batches.is_transactional.tolist()
    control = batches.is_control.tolist()
    control_types = batches.control_types.tolist()
    for index, producer_id in enumerate(producer_ids):
        if producer_id < 0:  # not written by an idempotent/transactional producer
            continue
        last_offset = last_offsets[index]
        while next_pending < len(pending) and pending[next_pending][1] <= last_offset:
            active.add(pending[next_pending][0])
            next_pending += 1
        if control[index]:
            if control_types[index] == ControlRecordType.ABORT:
                active.discard(producer_id)
        elif transactional[index] and producer_id in active:
            drop[index] = True
    return drop


def committed_mask(columns: RecordColumns,
                   aborted_transactions: Iterable[tuple[int, int]]) -> BoolArray:
    """Per record: True for records a read_committed consumer returns."""
    drop = aborted_batches(columns.batches, aborted_transactions)
    return ~drop[columns.batch_index]


def filter_committed(columns: RecordColumns,
                     aborted_transactions: Iterable[tuple[int, int]]) -> RecordColumns:
    """``columns`` without the records of aborted transactions."""
    keep = committed_mask(columns, aborted_transactions)
    return columns if keep.all() else columns.filter(keep)
