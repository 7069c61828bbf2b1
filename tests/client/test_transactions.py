"""The transaction manager's decisions, without a broker: which batches may go out in each
state, which Produce errors end the producer, and what an error while aborting does."""

from __future__ import annotations

import threading

import pytest

from kafka_ds.client.delivery import BatchResult
from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.client.sender import Sender
from kafka_ds.client.transactions import TransactionManager, choose_protocol
from kafka_ds.protocol.accumulator import ProducerBatch, RecordAccumulator
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import BrokerError, ErrorCode
from kafka_ds.protocol.producer_state import ProducerState
from kafka_ds.protocol.txn_state import (
    ProducerFencedError,
    TransactionAbortableError,
    TxnState,
)

S = TxnState


def _manager(state: TxnState, protocol: int = 1) -> TransactionManager:
    producer_state = ProducerState(transactional=True)
    producer_state.set_producer_id(77, 2)
    manager = TransactionManager("tx", 60_000, producer_state, 100)
    manager.machine.state = state
    manager.protocol = protocol
    manager.partitions = {("t", 0)}
    return manager


def _batch(partition: int = 0, sequence: int = -1) -> ProducerBatch:
    batch = ProducerBatch("t", partition, 0, 1 << 20, 1 << 30, BatchResult())
    batch.add(None, b"v", 0, None, 20)
    batch.base_sequence = sequence
    return batch


@pytest.mark.parametrize(("state", "never_sent", "resent"), [
    (S.IN_TRANSACTION, True, True), (S.COMMITTING, True, True), (S.PREPARED, True, True),
    # Issue 14, bug 3: while aborting, a batch back for a retry still goes (EndTxn must not
    # overtake it); one never sent is dropped instead.
    (S.ABORTING, False, True), (S.ABORTABLE_ERROR, False, True),
    (S.READY, False, False), (S.INITIALIZING, False, False), (S.FATAL_ERROR, False, False),
])
def test_which_batches_may_go_out(state: TxnState, never_sent: bool, resent: bool) -> None:
    manager = _manager(state)
    assert manager.can_send(_batch()) is never_sent
    assert manager.can_send(_batch(sequence=5)) is resent


def test_under_v1_only_added_partitions_may_go_out() -> None:
    assert not _manager(S.IN_TRANSACTION, protocol=1).can_send(_batch(partition=1))
    assert _manager(S.IN_TRANSACTION, protocol=2).can_send(_batch(partition=1))


def test_invalid_producer_epoch_on_produce_is_abortable() -> None:
    """KIP-588: the coordinator timed the transaction out (and bumped the epoch)."""
    manager = _manager(S.IN_TRANSACTION)
    manager.on_batch_failed(_batch(), BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH, "produce"))
    assert manager.machine.state is S.ABORTABLE_ERROR
    assert manager.state.abortable_reason  # the abort ends with a new epoch


def test_producer_fenced_on_produce_is_fatal() -> None:
    manager = _manager(S.IN_TRANSACTION)
    manager.on_batch_failed(_batch(), BrokerError(ErrorCode.PRODUCER_FENCED, "produce"))
    assert manager.machine.state is S.FATAL_ERROR
    assert isinstance(manager.machine.last_error, ProducerFencedError)


def test_an_abortable_error_while_aborting_keeps_aborting() -> None:
    """Issue 14, bug 2: ABORTING -> ABORTABLE_ERROR is not a transition (in Java either);
    the error is kept and raised, and abort_transaction() may be called again."""
    manager = _manager(S.IN_TRANSACTION)
    manager.machine.start(S.ABORTING, "abort_transaction()")
    error = TransactionAbortableError("EndTxn: TRANSACTION_ABORTABLE")
    manager.fail(error)
    assert manager.machine.state is S.ABORTING
    assert manager.machine.last_error is error
    assert manager.machine.resume("abort_transaction()")


def _sender(manager: TransactionManager) -> tuple[Sender, RecordAccumulator]:
    config = ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:1",
                                             "transactional.id": "tx"})
    accumulator = RecordAccumulator(batch_size_bytes=1 << 14, linger_ms=0,
                                    buffer_memory_bytes=1 << 20, new_result=BatchResult)
    lock = threading.Lock()
    sender = Sender(config, accumulator, lock, threading.Condition(lock), manager.state)
    sender.txn = manager
    return sender, accumulator


def test_aborting_drops_batches_never_sent_and_keeps_retries() -> None:
    manager = _manager(S.ABORTABLE_ERROR)
    sender, accumulator = _sender(manager)
    retry = accumulator.append("t", 0, None, b"sent once", 0, None, 20, 0)[0]
    accumulator.queued("t", 0)[0].base_sequence = 0  # it went out before: it has a sequence
    never_sent = accumulator.append("t", 1, None, b"never sent", 0, None, 20, 0)[0]
    accumulator.incomplete.update({retry, never_sent})
    assert manager.abort_undrained(sender) == 1
    assert isinstance(never_sent.result.error, TransactionAbortableError)
    assert not retry.result.done() and accumulator.queued("t", 0)[0] is retry


def test_protocol_choice_follows_kip_890() -> None:
    v2_ranges = {ApiKey.PRODUCE: (3, 12), ApiKey.TXN_OFFSET_COMMIT: (0, 5),
                 ApiKey.END_TXN: (0, 5)}
    assert choose_protocol({"transaction.version": 2}, v2_ranges) == 2
    assert choose_protocol({"transaction.version": 1}, v2_ranges) == 1
    assert choose_protocol({"transaction.version": 2},
                           {**v2_ranges, ApiKey.END_TXN: (0, 4)}) == 1


def test_after_a_fatal_error_queued_batches_fail_at_once() -> None:
    manager = _manager(S.IN_TRANSACTION)
    sender, accumulator = _sender(manager)
    queued = accumulator.append("t", 0, None, b"v", 0, None, 20, 0)[0]
    manager.on_batch_failed(_batch(), BrokerError(ErrorCode.PRODUCER_FENCED, "produce"))
    manager.before_drain(sender)
    assert isinstance(queued.result.error, ProducerFencedError)
