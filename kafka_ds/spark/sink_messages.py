"""What a sink task tells the driver, and the errors the sink raises.

Layer: spark. Task results travel pickled from executors to the driver's commit process, and
errors from the driver to the user: both must survive pickling with their fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pyspark.sql.datasource import WriterCommitMessage

from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.txn_state import TransactionToken


class TaskOutcome(Enum):
    PREPARED = "prepared"  # records written in an open transaction: the driver ends it
    EMPTY = "empty"  # exactly-once, no records: nothing to end (EndTxn on it is an error)
    SKIPPED = "skipped"  # a replay whose commit intent exists: nothing written
    SENT = "sent"  # at-least-once: records written and acknowledged


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """One task's result: small, picklable, enough for the driver to commit or abort."""

    outcome: TaskOutcome
    sink_id: str  # the transactional id prefix
    partition_id: int  # Spark's partition id of the task
    attempt: int
    batch_id: int | None  # the micro-batch (None for batch writes)
    query_id: str | None
    run_id: str | None
    record_count: int = 0
    token: TransactionToken | None = None
    # (phase, ms) of the task: input (waiting for Spark's first rows), intent, init
    # (InitProducerId), send (encode and hand over), acks (the wait for the last ones)
    phases_ms: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class LostTransaction:
    """A transaction that could not be committed: whose it was and why."""

    transactional_id: str
    partition_id: int  # Spark partition
    kafka_partitions: tuple[tuple[str, int], ...]
    record_count: int
    cause: str


def _lost_lines(lost: Sequence[LostTransaction]) -> str:
    shown = "; ".join(
        f"Spark partition {item.partition_id} ({item.transactional_id}: {item.record_count} "
        f"records to {_partitions_text(item.kafka_partitions)}): {item.cause}"
        for item in lost[:3])
    return shown + (f"; and {len(lost) - 3} more" if len(lost) > 3 else "")


def _partitions_text(partitions: Sequence[tuple[str, int]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ", ".join(f"{topic} partitions {sorted(parts)}" for topic, parts in by_topic.items())


class SinkDataLossError(KafkaDsError):
    """Committed-to records that Kafka no longer holds: the batch is partly written.

    Raised when the commit of batch ``batch_id`` was decided (its intent is written) but some
    of its transactions had already been aborted by the coordinator: they outlived
    ``transaction.timeout.ms`` (a crash or a stall between prepare and commit), or something
    reused their transactional id. Their records will never be visible; the batch's other
    transactions are committed. Nothing is retried: restarting the query raises this again,
    unless the option failOnDataLoss=false accepts the loss.
    """

    def __init__(self, sink_id: str, batch_id: int | None,
                 lost: Sequence[LostTransaction]) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.lost = tuple(lost)
        what = f"batch {batch_id}" if batch_id is not None else "the batch write"
        records = sum(item.record_count for item in lost)
        super().__init__(
            f"data loss in the pykafka sink {sink_id!r}, {what}: {len(lost)} transaction(s) "
            f"holding {records} records were aborted by Kafka before they could be committed:"
            " those records are lost (the batch's other transactions, if any, are committed)."
            f" {_lost_lines(lost)}. Usual cause: the commit came later than "
            "kafka.transaction.timeout.ms after the transaction began (a long stall or a "
            "restart that took too long); raise it (up to the broker's "
            "transaction.max.timeout.ms). To accept the loss and go on, restart with "
            "failOnDataLoss=false")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.sink_id, self.batch_id, self.lost))


class SinkBatchAbortedError(KafkaDsError):
    """A batch was not committed, and nothing of it is visible: the query can be restarted.

    Raised by the driver's commit when a transaction of the batch was already aborted before
    the commit was decided (it timed out, or a zombie task attempt fenced it). The commit
    aborts the batch's other transactions first, so the batch is all-or-nothing: restarting
    a streaming query from its checkpoint writes the batch again, exactly once.
    """

    def __init__(self, sink_id: str, batch_id: int | None,
                 lost: Sequence[LostTransaction]) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.lost = tuple(lost)
        what = f"batch {batch_id}" if batch_id is not None else "the batch write"
        super().__init__(
            f"the pykafka sink {sink_id!r} did not commit {what}: {len(lost)} of its "
            f"transactions were aborted by Kafka before the commit ({_lost_lines(lost)}). "
            "Its other transactions were aborted too, so nothing of it is visible; "
            + ("restarting the query from its checkpoint writes it again. "
               if batch_id is not None else "run the write again. ")
            + "If transactions time out, raise kafka.transaction.timeout.ms")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.sink_id, self.batch_id, self.lost))


class SinkWriteError(KafkaDsError):
    """A task could not write its records (the message summarises many failures)."""
