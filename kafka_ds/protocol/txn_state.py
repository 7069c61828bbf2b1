"""The transactional producer's state machine, error classes, and the prepared-transaction token.

Layer: protocol (sans-IO, stdlib only). Specs: KIP-98 (transactions), KIP-890 (transactions
v2: Produce v12 adds partitions, EndTxn v5 bumps the epoch), KIP-939's "prepare" idea done
client-side (flush without EndTxn; the broker has no prepare RPC).

::

      UNINITIALIZED
           | init_transactions()
           v
      INITIALIZING ------------------------------------------+
           | InitProducerId ok                                |
           v                                                  |
   +--> READY <-----------------------------+                 |
   |       | begin_transaction()            |                 |
   |       v                                | EndTxn ok       |
   |  IN_TRANSACTION --commit_transaction()--> COMMITTING ----+
   |       |   |  \\                                           |
   |       |   |   +--prepare_transaction()--> PREPARED        |
   |       |   |                            |  |  |           |
   |       |   |   commit_transaction() ----+  |  | init_transactions() (fence, abort it)
   |       |   |   abort_transaction() --------+  +--> INITIALIZING
   |       |   +--abort_transaction()--> ABORTING --EndTxn ok--> READY
   |       | abortable error                ^
   |       v                                |
   |  ABORTABLE_ERROR --abort_transaction()-+
   |
   +-- (any state) fatal error --> FATAL_ERROR   (only close() remains)

An *abortable* error spoils the current transaction only: abort it and begin another. A
*fatal* error ends the producer: another producer took over the transactional id (it was
fenced), the coordinator timed the transaction out (under transactions v1), or the client is
not authorised. An abortable error while ABORTING leaves the state ABORTING: the error is
raised and abort_transaction() may be called again (Java skips that transition too).

A call that times out part-way (KIP-266) leaves its state as it is (INITIALIZING,
COMMITTING or ABORTING) and remembers itself as ``pending_action``: the coordinator may well
have finished (an EndTxn reply was lost), so the only way on is to call the *same* method
again, which finishes the work (ending a transaction twice the same way is harmless). Any
other call is refused with a message saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kafka_ds.protocol.errors import ErrorCode, KafkaDsError, is_retriable


class TxnState(Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    PREPARED = "PREPARED"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# state -> states it may move to (FATAL_ERROR is reachable from everywhere).
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),
    S.INITIALIZING: frozenset({S.READY}),
    S.READY: frozenset({S.IN_TRANSACTION, S.INITIALIZING}),
    S.IN_TRANSACTION: frozenset({S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR, S.PREPARED}),
    S.PREPARED: frozenset({S.COMMITTING, S.ABORTING, S.INITIALIZING, S.ABORTABLE_ERROR}),
    S.COMMITTING: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.ABORTING: frozenset({S.READY}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(),
}


# States a call may leave behind when it times out part-way (see ``pending_action``).
_PENDING_STATES = frozenset({S.INITIALIZING, S.COMMITTING, S.ABORTING})


class TransactionStateError(KafkaDsError):
    """A transactional method was called in a state that does not allow it."""


class TransactionAbortableError(KafkaDsError):
    """The current transaction failed and must be aborted; the producer can go on."""


class TransactionFatalError(KafkaDsError):
    """The producer can no longer be used for transactions: close it and make a new one."""


class ProducerFencedError(TransactionFatalError):
    """Another producer with the same transactional.id took over, or the coordinator aborted
    the transaction because it exceeded transaction.timeout.ms (it bumps the epoch)."""


class TransactionLostError(KafkaDsError):
    """A prepared transaction can no longer be committed: it was aborted (by the
    coordinator's timeout or by a newer producer with the same transactional.id). Its
    records will never be visible to read_committed consumers."""


class TxnStateMachine:
    """Current state plus the last error; ``transition`` enforces ``TRANSITIONS``."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.state = TxnState.UNINITIALIZED
        self.last_error: BaseException | None = None
        # "commit_transaction()", "abort_transaction()" or "init_transactions()" while that
        # call has started its state and not finished it (it may have timed out).
        self.pending_action: str | None = None

    def start(self, target: TxnState, action: str) -> None:
        """``action`` moves to ``target`` (INITIALIZING, COMMITTING, ABORTING) and is pending
        until it reaches its end state."""
        self.transition(target)
        self.pending_action = action

    def resume(self, action: str) -> bool:
        """True when ``action`` must finish its own earlier call that did not complete (its
        state is unchanged); refuses a different action while one is pending."""
        if self.pending_action is None or self.state not in _PENDING_STATES:
            return False
        if self.pending_action == action:
            return True
        raise TransactionStateError(self._pending_message(action))

    def _pending_message(self, action: str) -> str:
        return (f"cannot {action}: {self.pending_action} of transactional producer "
                f"{self.transactional_id!r} has begun and not finished (it is running in "
                f"another thread, or it timed out or failed part-way); if it raised, call "
                f"{self.pending_action} again to finish it")

    def transition(self, target: TxnState, error: BaseException | None = None) -> None:
        if target is TxnState.FATAL_ERROR:
            self.state = target
            self.last_error = error
            return
        if self.state is TxnState.FATAL_ERROR:
            raise TransactionFatalError(
                f"transactional producer {self.transactional_id!r} hit a fatal error and "
                f"cannot be used any more: {self.last_error}") from self.last_error
        if target not in TRANSITIONS[self.state]:
            raise TransactionStateError(
                f"transactional producer {self.transactional_id!r}: cannot go from "
                f"{self.state.value} to {target.value}{self._hint(target)}")
        self.state = target
        if target not in _PENDING_STATES:
            self.pending_action = None
        if target is TxnState.ABORTABLE_ERROR:
            self.last_error = error
        elif target in (TxnState.READY, TxnState.IN_TRANSACTION):
            self.last_error = None

    def _hint(self, target: TxnState) -> str:
        if self.state is TxnState.UNINITIALIZED:
            return " (call init_transactions() first)"
        if self.state is TxnState.ABORTABLE_ERROR:
            return f" (the transaction failed: {self.last_error}; call abort_transaction())"
        if self.state is TxnState.IN_TRANSACTION and target is not TxnState.IN_TRANSACTION:
            return " (a transaction is already open: commit or abort it first)"
        if self.state is TxnState.PREPARED:
            return (" (the transaction is prepared: commit or abort it, or call "
                    "init_transactions() to start over)")
        if self.state is TxnState.READY:
            return " (no transaction is open: call begin_transaction())"
        return ""

    def require(self, *states: TxnState, action: str) -> None:
        if self.state is TxnState.FATAL_ERROR:
            raise TransactionFatalError(
                f"transactional producer {self.transactional_id!r} cannot {action}: it hit a "
                f"fatal error: {self.last_error}") from self.last_error
        if self.state not in states:
            if self.pending_action is not None and self.state in _PENDING_STATES:
                raise TransactionStateError(self._pending_message(action))
            if self.state is TxnState.ABORTABLE_ERROR:
                raise TransactionAbortableError(
                    f"cannot {action}: the transaction of {self.transactional_id!r} failed "
                    f"({self.last_error}); call abort_transaction()") from self.last_error
            allowed = ", ".join(state.value for state in states)
            raise TransactionStateError(
                f"cannot {action} while the transactional producer {self.transactional_id!r}"
                f" is {self.state.value} (allowed in: {allowed}){self._hint(states[0])}")


class ErrorClass(Enum):
    RETRIABLE = "retriable"  # back off and send again (after a coordinator lookup if needed)
    ABORTABLE = "abortable"  # this transaction is spoilt; abort it
    FATAL = "fatal"  # the producer is finished


FATAL_CODES = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})
COORDINATOR_CODES = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})
# EndTxn(commit) answers meaning the transaction was aborted behind our back.
LOST_CODES = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})


def classify(code: int) -> ErrorClass:
    """How a transactional request's error code affects the producer."""
    if code in FATAL_CODES:
        return ErrorClass.FATAL
    if code == ErrorCode.CONCURRENT_TRANSACTIONS or code in COORDINATOR_CODES or is_retriable(code):
        return ErrorClass.RETRIABLE
    return ErrorClass.ABORTABLE


def expired_id_message(transactional_id: str, what: str) -> str:
    """INVALID_PRODUCER_ID_MAPPING for a producer that had its id: the coordinator forgot it."""
    return (f"{what}: the transaction coordinator no longer knows transactional.id "
            f"{transactional_id!r} (INVALID_PRODUCER_ID_MAPPING). Brokers forget a "
            "transactional.id left unused for longer than their transactional.id.expiration.ms "
            "(7 days by default). This producer cannot continue: close it and create a new one "
            "(its init_transactions() registers the id again), or call init_transactions() "
            "before each transaction of a producer that may sit idle that long")


def fenced_message(transactional_id: str, producer_id: int, epoch: int, what: str) -> str:
    return (f"{what}: producer {producer_id} epoch {epoch} of transactional.id "
            f"{transactional_id!r} was fenced. Either another producer with the same "
            "transactional.id called init_transactions() (only the newest one may write), or "
            "the transaction coordinator aborted the transaction because it stayed open longer "
            "than transaction.timeout.ms (it bumps the epoch when it does). This producer "
            "cannot continue: close it and create a new one")


@dataclass(frozen=True)
class TransactionToken:
    """What another process needs to commit or abort a prepared transaction.

    Small, immutable and picklable: the Spark sink returns it from each task as the commit
    message. ``protocol_version`` (1 or 2) picks the EndTxn version the finisher must use:
    a transaction produced under transactions v2 must end with EndTxn v5, one produced under
    v1 with EndTxn v4 or lower. ``partitions`` is empty for an empty transaction, which must
    not be ended at all (EndTxn on an empty transaction is INVALID_TXN_STATE): completing it
    is a no-op.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    protocol_version: int
    partitions: tuple[tuple[str, int], ...] = ()
    record_count: int = 0
    has_offsets: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.partitions and not self.has_offsets
