"""The transaction state machine, error classes and the prepared-transaction token."""

from __future__ import annotations

import pickle
import re

import pytest

from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.txn_state import (
    TRANSITIONS,
    ErrorClass,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionLostError,
    TransactionStateError,
    TransactionToken,
    TxnState,
    TxnStateMachine,
    classify,
    fenced_message,
)

S = TxnState


def test_happy_path_and_prepare() -> None:
    machine = TxnStateMachine("tx")
    for state in (S.INITIALIZING, S.READY, S.IN_TRANSACTION, S.COMMITTING, S.READY,
                  S.IN_TRANSACTION, S.PREPARED, S.COMMITTING, S.READY, S.IN_TRANSACTION,
                  S.PREPARED, S.INITIALIZING, S.READY, S.IN_TRANSACTION, S.ABORTING, S.READY):
        machine.transition(state)
    assert machine.state is S.READY


# Written by hand from the Java client's TransactionManager.State.isTransitionValid (target
# <- allowed sources), then turned around: state -> states it may move to. FATAL_ERROR is
# reachable from every state and leads nowhere, in both.
JAVA = {
    S.UNINITIALIZED: {S.INITIALIZING},
    S.INITIALIZING: {S.READY, S.ABORTABLE_ERROR},
    S.READY: {S.UNINITIALIZED, S.IN_TRANSACTION},
    S.IN_TRANSACTION: {S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR},
    S.COMMITTING: {S.READY, S.ABORTABLE_ERROR},
    S.ABORTING: {S.INITIALIZING, S.READY},
    S.ABORTABLE_ERROR: {S.UNINITIALIZED, S.ABORTING, S.ABORTABLE_ERROR},
}
# Where kafka_ds differs on purpose, and why.
ADDED = {
    # prepare_transaction() (the exactly-once sink): flushed, not ended.
    S.IN_TRANSACTION: {S.PREPARED},
    S.PREPARED: {S.COMMITTING, S.ABORTING, S.INITIALIZING, S.ABORTABLE_ERROR},
    # init_transactions() again from READY starts over with a fresh epoch.
    S.READY: {S.INITIALIZING},
}
REMOVED = {
    # Java's INITIALIZING -> ABORTABLE_ERROR and ABORTING -> INITIALIZING are the epoch bump
    # after an abort; kafka_ds bumps while still ABORTING, then goes to READY.
    S.INITIALIZING: {S.ABORTABLE_ERROR},
    S.ABORTING: {S.INITIALIZING},
    # UNINITIALIZED after a transactional-id / cluster authorisation error: kafka_ds makes
    # those fatal (the configuration must change; a new producer is needed anyway).
    S.READY: {S.UNINITIALIZED},
    S.ABORTABLE_ERROR: {S.UNINITIALIZED},
}


def test_transitions_are_java_s_plus_the_listed_differences() -> None:
    expected = {state: (JAVA.get(state, set()) | ADDED.get(state, set()))
                - REMOVED.get(state, set()) for state in TxnState if state is not S.FATAL_ERROR}
    expected[S.FATAL_ERROR] = set()
    assert {state: set(targets) for state, targets in TRANSITIONS.items()} == expected


def test_every_listed_transition_is_allowed_and_others_refused() -> None:
    for source, targets in TRANSITIONS.items():
        for target in TxnState:
            machine = TxnStateMachine("tx")
            machine.state = source
            if target is S.FATAL_ERROR:
                machine.transition(target)  # always reachable
            elif target in targets:
                machine.transition(target)
                assert machine.state is target
            else:
                with pytest.raises((TransactionStateError, TransactionFatalError)):
                    machine.transition(target)


def test_errors_name_the_fix() -> None:
    machine = TxnStateMachine("sink-3")
    with pytest.raises(TransactionStateError, match="init_transactions"):
        machine.require(S.READY, action="begin_transaction()")
    machine.state = S.IN_TRANSACTION
    with pytest.raises(TransactionStateError, match="already open"):
        machine.require(S.READY, action="begin_transaction()")
    machine.transition(S.ABORTABLE_ERROR, RuntimeError("batch failed"))
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        machine.require(S.IN_TRANSACTION, action="commit_transaction()")
    machine.transition(S.FATAL_ERROR, ProducerFencedError("fenced"))
    with pytest.raises(TransactionFatalError, match="fatal"):
        machine.require(S.READY, action="begin_transaction()")
    with pytest.raises(TransactionFatalError):
        machine.transition(S.ABORTING)


@pytest.mark.parametrize(("code", "expected"), [
    (ErrorCode.PRODUCER_FENCED, ErrorClass.FATAL),
    (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorClass.FATAL),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorClass.FATAL),
    (ErrorCode.INVALID_TXN_STATE, ErrorClass.FATAL),
    (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorClass.RETRIABLE),
    (ErrorCode.NOT_COORDINATOR, ErrorClass.RETRIABLE),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorClass.RETRIABLE),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorClass.RETRIABLE),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorClass.ABORTABLE),
    (ErrorCode.TRANSACTION_ABORTABLE, ErrorClass.ABORTABLE),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorClass.ABORTABLE),
])
def test_classification(code: int, expected: ErrorClass) -> None:
    assert classify(code) is expected


def test_token_is_small_frozen_and_picklable() -> None:
    token = TransactionToken("sink-1", 4001, 7, 2, (("t", 0), ("t", 3)), 120)
    copy = pickle.loads(pickle.dumps(token))
    assert copy == token and not copy.is_empty
    assert len(pickle.dumps(token)) < 400
    with pytest.raises(AttributeError):
        token.producer_epoch = 8  # type: ignore[misc]
    assert TransactionToken("sink-1", 1, 0, 1).is_empty
    assert not TransactionToken("sink-1", 1, 0, 1, has_offsets=True).is_empty


def test_lost_and_fenced_errors_explain() -> None:
    text = fenced_message("sink-2", 10, 3, "committing")
    assert "another producer" in text and "transaction.timeout.ms" in text
    assert issubclass(ProducerFencedError, TransactionFatalError)
    assert not issubclass(TransactionLostError, TransactionFatalError)


# --- issue 14, bug 2: a call that timed out part-way is finished by calling it again --------

@pytest.mark.parametrize(("state", "action"), [
    (S.COMMITTING, "commit_transaction()"), (S.ABORTING, "abort_transaction()"),
    (S.INITIALIZING, "init_transactions()")])
def test_a_pending_call_resumes_and_blocks_every_other(state: TxnState, action: str) -> None:
    machine = TxnStateMachine("sink-9")
    machine.state = {S.COMMITTING: S.IN_TRANSACTION, S.ABORTING: S.IN_TRANSACTION,
                     S.INITIALIZING: S.UNINITIALIZED}[state]
    machine.start(state, action)
    # ... it timed out: the state is unchanged and the same call may go on.
    assert machine.resume(action)
    for other in ("commit_transaction()", "abort_transaction()", "init_transactions()"):
        if other != action:
            with pytest.raises(TransactionStateError, match=re.escape(f"call {action} again")):
                machine.resume(other)
    with pytest.raises(TransactionStateError, match=re.escape(f"call {action} again")):
        machine.require(S.READY, action="begin_transaction()")
    machine.transition(S.READY)
    assert machine.pending_action is None and not machine.resume(action)


def test_nothing_pending_resumes_nothing() -> None:
    machine = TxnStateMachine("sink-9")
    assert not machine.resume("init_transactions()")
    for state in (S.INITIALIZING, S.READY):
        machine.transition(state)
        assert not machine.resume("init_transactions()")
    machine.transition(S.IN_TRANSACTION)
    machine.transition(S.COMMITTING)  # not through start(): not a pending call
    assert not machine.resume("commit_transaction()")


def test_an_abortable_error_ends_a_pending_commit() -> None:
    machine = TxnStateMachine("sink-9")
    machine.state = S.IN_TRANSACTION
    machine.start(S.COMMITTING, "commit_transaction()")
    machine.transition(S.ABORTABLE_ERROR, RuntimeError("TRANSACTION_ABORTABLE"))
    assert machine.pending_action is None
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        machine.require(S.IN_TRANSACTION, action="commit_transaction()")
