"""The transaction state machine, error classes and the prepared-transaction token."""

from __future__ import annotations

import pickle

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
