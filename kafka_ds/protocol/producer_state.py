"""Idempotent producer state: producer id and epoch, sequences, and what to do with each answer.

Layer: protocol (sans-IO). Specs: KIP-98 (idempotence: producer id, epoch, per-partition
sequences), KIP-360 (an idempotent producer bumps its own epoch, keeping its producer id),
seed 000 (in-flight, unresolved and epoch-bump rules). The broker keeps the last 5 batches
per (producer, partition), hence ``MAX_IN_FLIGHT`` = 5.

Per partition::

    next_sequence         the sequence the next new batch gets (from 0 in every epoch)
    last_acked_sequence   the last sequence the broker confirmed
    in_flight             batches sent and not answered, in sequence order (<= 5)
    unresolved            the last sequence of a batch that failed or expired after it was
                          sent: the broker may hold it or not (its fate is unknown)
    rewind_to             the first sequence known NOT written (a batch split after
                          MESSAGE_TOO_LARGE, or one that never reached the wire): later
                          batches are renumbered from it once nothing is in flight

Until a partition's first batch of an epoch is acknowledged, only that batch is in flight:
a broker with no state for the producer accepts any first sequence, so a later batch must
not overtake it (it would be written first, and the first one could never follow).

The rule that keeps acknowledged records in the log: a sequence that went out on the wire
is never given to another batch in the same epoch. A batch whose reply was lost (a
NETWORK_EXCEPTION, a request timeout, a cut connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
may have been written; if its sequences went to the next batch, the broker would take that
batch for a duplicate of the written one and acknowledge it without writing it. So a sent
batch that fails leaves its partition *unresolved*: a later acknowledgement proves it was
written (the broker takes sequences only in order); otherwise, once nothing is in flight,
the epoch is bumped and every sequence restarts at 0 (a transaction instead becomes
abortable). This is what the Java client does.

How a Produce answer for a sequenced batch is handled (``on_error``)::

    NONE / DUPLICATE_SEQUENCE_NUMBER ............... success (a duplicate was written before)
    retriable (leader moved, timeout, network) ..... RETRY with the same sequence; the
                                                     partition sends one batch at a time
                                                     until it succeeds
    OUT_OF_ORDER_SEQUENCE_NUMBER
        an earlier batch is still unsettled ......... RETRY (the gap is ours, not the broker's)
        batch is the next expected and still OOS .... idempotent: BUMP epoch, renumber, RETRY
                                                     transactional: FAIL (abortable)
    UNKNOWN_PRODUCER_ID ............................ idempotent: BUMP + RETRY; txn: FAIL
    MESSAGE_TOO_LARGE, several records ............. SPLIT (pieces get fresh sequences), or
                                                     FAIL if an earlier attempt was lost
    anything else, or no retry left ................ FAIL; the partition is unresolved

An idempotent producer bumps its epoch only when no batch of the old epoch is in flight.
The bump is local, as in the Java client: same producer id, epoch + 1 (the broker accepts a
higher epoch that starts at sequence 0, and fences the old one). InitProducerId cannot do
it: with no transactional id the broker ignores the id and epoch sent and hands out a new
producer id. Only an exhausted epoch (32767) needs a new producer id.
"""

from __future__ import annotations

import contextlib
from enum import Enum

from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.errors import ErrorCode, is_retriable

MAX_IN_FLIGHT = 5
NO_PRODUCER_ID = -1
MAX_PRODUCER_EPOCH = 32767  # epochs are int16: past this only a new producer id continues
_SEQUENCE_LIMIT = 1 << 31  # sequences are int32 and wrap to 0
# Answers after which the broker may have written the batch anyway: the request timed out
# (our side or the broker's replication wait), the connection broke, or the leader appended
# it and then lacked replicas.
AMBIGUOUS_CODES = frozenset({
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.KAFKA_STORAGE_ERROR,
})


class Decision(Enum):
    SUCCESS = "success"
    RETRY = "retry"
    SPLIT = "split"
    FAIL = "fail"


class PartitionSequence:
    __slots__ = ("in_flight", "last_acked_sequence", "next_sequence", "rewind_to", "unresolved")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.in_flight: list[ProducerBatch] = []
        self.unresolved: int | None = None
        self.rewind_to: int | None = None


class ProducerState:
    """Sequence bookkeeping of one idempotent (possibly transactional) producer."""

    def __init__(self, *, transactional: bool = False, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.transactional = transactional
        self.max_in_flight = min(max_in_flight, MAX_IN_FLIGHT)
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        # Set when only a new epoch can continue (idempotent producers); the client sends
        # InitProducerId with the current id and epoch once nothing is in flight.
        self.bump_required = False
        self.bump_reason = ""
        # Set for a transactional producer when the current transaction cannot commit.
        self.abortable_reason: str | None = None
        self.partitions: dict[tuple[str, int], PartitionSequence] = {}

    # --- producer id -----------------------------------------------------------------------

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """A new id or epoch: every partition's sequence restarts at 0."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.bump_required = False
        self.bump_reason = ""
        for state in self.partitions.values():
            state.next_sequence = 0
            state.last_acked_sequence = -1
            state.unresolved = None
            state.rewind_to = None

    def bump_epoch(self) -> bool:
        """KIP-360 for an idempotent producer: the same producer id with epoch + 1, every
        sequence from 0. False (nothing changed) when the epoch is exhausted: the caller
        then asks InitProducerId for a new producer id."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            return False
        self.set_producer_id(self.producer_id, self.producer_epoch + 1)
        return True

    def request_bump(self, reason: str) -> None:
        if not self.transactional:
            self.bump_required = True
            self.bump_reason = reason
        elif self.abortable_reason is None:
            self.abortable_reason = reason

    def in_flight_count(self) -> int:
        return sum(len(state.in_flight) for state in self.partitions.values())

    def ready_to_bump(self) -> bool:
        return self.bump_required and self.in_flight_count() == 0

    def _state(self, batch: ProducerBatch) -> PartitionSequence:
        key = (batch.topic, batch.partition)
        state = self.partitions.get(key)
        if state is None:
            state = self.partitions[key] = PartitionSequence()
        return state

    # --- sending ---------------------------------------------------------------------------

    def can_send(self, batch: ProducerBatch) -> bool:
        """May ``batch`` (the head of its partition's queue) be sent now?"""
        if not self.has_producer_id or self.bump_required:
            return False
        state = self._state(batch)
        if state.in_flight:
            if len(state.in_flight) >= self.max_in_flight:
                return False
            # A retry, or renumbering, waits until nothing else of the partition is in
            # flight: retries then go one at a time, strictly in sequence order.
            if batch.attempts > 0 or state.rewind_to is not None or state.unresolved is not None:
                return False
            if batch.base_sequence >= 0 and self._current(batch):
                return False  # a sequenced batch put back: only in order, alone
            if state.last_acked_sequence < 0:
                # Until the first batch of this epoch is acknowledged the broker may hold no
                # state for us on this partition, and then it accepts *any* first sequence:
                # a second batch overtaking a first one that hit NOT_LEADER would be written
                # ahead of it, and the first could never follow. So: one batch at a time.
                return False
        elif state.unresolved is not None:
            # Nothing in flight can prove the expired batch was written: assume it was not.
            self.request_bump(f"batch with sequence up to {state.unresolved} of "
                              f"{batch.topic}-{batch.partition} expired with its fate unknown")
            return False
        return True

    def needs_rewind(self, topic: str, partition: int) -> int | None:
        """The sequence later batches must be renumbered from, once nothing is in flight."""
        state = self.partitions.get((topic, partition))
        if state is None or state.rewind_to is None or state.in_flight:
            return None
        return state.rewind_to

    def apply_rewind(self, topic: str, partition: int) -> None:
        state = self.partitions[(topic, partition)]
        if state.rewind_to is not None:
            state.next_sequence = state.rewind_to
            state.rewind_to = None

    def _current(self, batch: ProducerBatch) -> bool:
        return batch.producer_id == self.producer_id and batch.producer_epoch == self.producer_epoch

    def assign(self, batch: ProducerBatch, transactional: bool = False) -> None:
        """Stamp producer id, epoch and (unless it keeps its own) a sequence; in flight now."""
        state = self._state(batch)
        if batch.base_sequence < 0 or not self._current(batch):
            batch.encoded = None
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            batch.base_sequence = state.next_sequence
            state.next_sequence = (state.next_sequence + batch.record_count) % _SEQUENCE_LIMIT
        batch.is_transactional = transactional
        in_flight = state.in_flight
        in_flight.append(batch)
        if len(in_flight) > 1 and in_flight[-2].base_sequence > batch.base_sequence:
            in_flight.sort(key=lambda queued: queued.base_sequence)

    def _done(self, batch: ProducerBatch) -> PartitionSequence:
        state = self._state(batch)
        with contextlib.suppress(ValueError):  # already settled (expired, then answered)
            state.in_flight.remove(batch)
        return state

    # --- answers ---------------------------------------------------------------------------

    def on_success(self, batch: ProducerBatch) -> None:
        state = self._done(batch)
        if not self._current(batch):
            return
        last = batch.last_sequence
        if last > state.last_acked_sequence:
            state.last_acked_sequence = last
        if state.unresolved is not None and batch.base_sequence > state.unresolved:
            # The broker accepts sequences only in order: this ack proves the expired batch
            # before it was written.
            state.unresolved = None

    def on_error(self, batch: ProducerBatch, code: int, *, can_retry: bool) -> Decision:
        """Decide what to do with a batch the broker (or the network) answered with ``code``.

        ``can_retry`` is False when the batch is out of retries or past its delivery timeout.
        """
        state = self._done(batch)
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            self.on_success_after_duplicate(batch, state)
            return Decision.SUCCESS
        if code in AMBIGUOUS_CODES and batch.last_attempt_ms >= 0:
            batch.fate_unknown = True
        stale = not self._current(batch)
        if code == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1 \
                and not batch.fate_unknown:
            self._not_written(batch, state)
            return Decision.SPLIT
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not stale:
            if state.rewind_to is not None and batch.base_sequence >= state.rewind_to:
                batch.reset_sequence()
                return Decision.RETRY if can_retry else Decision.FAIL
            expected = (state.last_acked_sequence + 1) % _SEQUENCE_LIMIT
            after_unresolved = state.unresolved is not None and \
                batch.base_sequence == (state.unresolved + 1) % _SEQUENCE_LIMIT
            if batch.base_sequence != expected and not after_unresolved:
                return Decision.RETRY if can_retry else self._fail(batch, state)
            # The broker lacks the sequences right before this batch: only a new epoch
            # (sequences from 0) can continue.
            self.request_bump(f"broker reported OUT_OF_ORDER_SEQUENCE_NUMBER for "
                              f"{batch.topic}-{batch.partition} sequence {batch.base_sequence}")
            if self.transactional:
                return self._fail(batch, state)
            return Decision.RETRY if can_retry else self._fail(batch, state)
        if code == ErrorCode.UNKNOWN_PRODUCER_ID and not stale:
            self.request_bump(f"broker lost the state of producer {self.producer_id} for "
                              f"{batch.topic}-{batch.partition} (UNKNOWN_PRODUCER_ID)")
            if self.transactional:
                return self._fail(batch, state)
            return Decision.RETRY if can_retry else self._fail(batch, state)
        if can_retry and (is_retriable(code) or code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
            return Decision.RETRY
        return self._fail(batch, state)

    def on_success_after_duplicate(self, batch: ProducerBatch, state: PartitionSequence) -> None:
        if self._current(batch) and batch.last_sequence > state.last_acked_sequence:
            state.last_acked_sequence = batch.last_sequence

    def _fail(self, batch: ProducerBatch, state: PartitionSequence) -> Decision:
        """``batch`` fails for good. If it ever went out its fate is unknown: never reuse
        its sequences (see the module docstring); if it never did, they are free again."""
        if batch.last_attempt_ms < 0:
            self._not_written(batch, state)
        else:
            self._unresolved(batch, state)
        if self.transactional and self.abortable_reason is None:
            self.abortable_reason = f"a batch for {batch.topic}-{batch.partition} failed"
        return Decision.FAIL

    def _not_written(self, batch: ProducerBatch, state: PartitionSequence) -> None:
        """The broker never saw or rejected ``batch``: its sequences, and all later ones,
        are free again."""
        if batch.base_sequence < 0 or not self._current(batch):
            return
        if state.rewind_to is None or batch.base_sequence < state.rewind_to:
            state.rewind_to = batch.base_sequence

    def _unresolved(self, batch: ProducerBatch, state: PartitionSequence) -> None:
        """``batch`` may be in the log: nothing new goes to the partition until a later
        acknowledgement proves it was written, or a new epoch makes it irrelevant."""
        if batch.base_sequence < 0 or not self._current(batch):
            return
        last = batch.last_sequence
        if last > state.last_acked_sequence and (state.unresolved is None
                                                  or last > state.unresolved):
            state.unresolved = last

    def on_expired(self, batch: ProducerBatch) -> None:
        """``batch`` failed on delivery timeout; if it was ever sent, its fate is unknown."""
        state = self._done(batch)
        if batch.base_sequence < 0 or not self._current(batch):
            return
        if batch.last_attempt_ms < 0:  # sequenced but never sent: certainly not written
            self._not_written(batch, state)
            return
        self._unresolved(batch, state)
        if self.transactional and self.abortable_reason is None:
            self.abortable_reason = (f"a batch for {batch.topic}-{batch.partition} timed out "
                                     "(delivery.timeout.ms)")

    def forget_in_flight(self, batch: ProducerBatch) -> None:
        self._done(batch)
