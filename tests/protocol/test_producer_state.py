"""Idempotent sequence bookkeeping (KIP-98, KIP-360): every answer the broker can give."""

from __future__ import annotations

import pytest

from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.producer_state import MAX_PRODUCER_EPOCH, Decision, ProducerState


def _batch(records: int = 10, partition: int = 0) -> ProducerBatch:
    batch = ProducerBatch("t", partition, 0, 10**6, 10**6)
    for i in range(records):
        batch.add(None, b"v%d" % i, 0, None, 20)
    return batch


def _sent(state: ProducerState, *batches: ProducerBatch) -> None:
    for batch in batches:
        assert state.can_send(batch)
        state.assign(batch)
        batch.last_attempt_ms = 1


def _state(primed: bool = True, **kwargs: bool) -> ProducerState:
    """A state with a producer id; ``primed``: partitions 0 and 1 have one acked record
    (sequence 0), so the broker holds state for us there and batches may be pipelined."""
    state = ProducerState(**kwargs)
    state.set_producer_id(1000, 0)
    if primed:
        for partition in (0, 1):
            first = _batch(1, partition)
            _sent(state, first)
            state.on_success(first)
    return state


def test_first_batch_of_an_epoch_goes_alone() -> None:
    state = _state(primed=False)
    first, second = _batch(), _batch()
    _sent(state, first)
    assert not state.can_send(second)  # the broker may accept any first sequence
    assert state.on_error(first, ErrorCode.NOT_LEADER_OR_FOLLOWER, can_retry=True) \
        is Decision.RETRY
    first.attempts = 1
    assert state.can_send(first)
    state.assign(first)
    state.on_success(first)
    assert state.can_send(second)


def test_sequences_per_partition_from_zero() -> None:
    state = _state()
    a, b, c = _batch(10), _batch(5), _batch(3, partition=1)
    _sent(state, a, b, c)
    assert (a.base_sequence, b.base_sequence, c.base_sequence) == (1, 11, 1)
    assert (a.producer_id, a.producer_epoch) == (1000, 0)
    state.on_success(a)
    state.on_success(b)
    assert state.partitions[("t", 0)].last_acked_sequence == 15


def test_at_most_five_in_flight_per_partition() -> None:
    state = _state()
    batches = [_batch(1) for _ in range(6)]
    _sent(state, *batches[:5])
    assert not state.can_send(batches[5])
    assert state.can_send(_batch(1, partition=1))
    state.on_success(batches[0])
    assert state.can_send(batches[5])


def test_no_producer_id_no_sending() -> None:
    assert not ProducerState().can_send(_batch())


def test_duplicate_sequence_is_success() -> None:
    state = _state()
    batch = _batch()
    _sent(state, batch)
    assert state.on_error(batch, ErrorCode.DUPLICATE_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.SUCCESS
    assert state.partitions[("t", 0)].last_acked_sequence == 10


def test_retriable_error_keeps_the_sequence_and_retries_alone() -> None:
    state = _state()
    a, b = _batch(), _batch()
    _sent(state, a, b)
    assert state.on_error(a, ErrorCode.NOT_LEADER_OR_FOLLOWER, can_retry=True) is Decision.RETRY
    a.attempts = 1
    assert not state.can_send(a)  # b is still in flight: the retry waits
    # b fails out of order because a was not written: a retry too, same sequence.
    assert state.on_error(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.RETRY
    b.attempts = 1
    assert state.can_send(a)
    state.assign(a)
    assert a.base_sequence == 1
    assert not state.can_send(b)  # retries one at a time
    state.on_success(a)
    state.assign(b)
    assert b.base_sequence == 11
    assert not state.bump_required


def test_out_of_order_on_the_next_expected_batch_bumps_the_epoch() -> None:
    state = _state()
    batch = _batch()
    _sent(state, batch)
    assert state.on_error(batch, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.RETRY
    assert state.bump_required and state.ready_to_bump()
    assert not state.can_send(batch)
    state.set_producer_id(1000, 1)
    assert state.can_send(batch)
    state.assign(batch)
    assert (batch.base_sequence, batch.producer_epoch) == (0, 1)  # renumbered


def test_unknown_producer_id_bumps_idempotent_and_fails_transactional() -> None:
    state = _state()
    batch = _batch()
    _sent(state, batch)
    assert state.on_error(batch, ErrorCode.UNKNOWN_PRODUCER_ID, can_retry=True) is Decision.RETRY
    assert state.bump_required
    txn = _state(transactional=True)
    batch = _batch()
    _sent(txn, batch)
    assert txn.on_error(batch, ErrorCode.UNKNOWN_PRODUCER_ID, can_retry=True) is Decision.FAIL
    assert not txn.bump_required and txn.abortable_reason


def test_message_too_large_splits_and_rewinds_later_batches() -> None:
    state = _state()
    a, b = _batch(10), _batch(10)
    _sent(state, a, b)
    assert state.on_error(a, ErrorCode.MESSAGE_TOO_LARGE, can_retry=True) is Decision.SPLIT
    assert state.needs_rewind("t", 0) is None  # b still in flight
    assert state.on_error(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.RETRY
    assert b.base_sequence == -1  # renumbered on its next send
    assert state.needs_rewind("t", 0) == 1
    state.apply_rewind("t", 0)
    piece = _batch(4)
    assert state.can_send(piece)
    state.assign(piece)
    assert piece.base_sequence == 1


def test_single_record_too_large_fails() -> None:
    state = _state()
    batch = _batch(1)
    _sent(state, batch)
    assert state.on_error(batch, ErrorCode.MESSAGE_TOO_LARGE, can_retry=True) is Decision.FAIL


def test_expired_batch_stays_unresolved_until_a_later_ack_proves_it() -> None:
    state = _state()
    a, b = _batch(), _batch()
    _sent(state, a, b)
    state.on_expired(a)
    assert state.partitions[("t", 0)].unresolved == 10
    assert not state.can_send(_batch())  # nothing new while unresolved
    state.on_success(b)  # sequence 10.. acked: the broker must have 0..9
    assert state.partitions[("t", 0)].unresolved is None
    assert state.can_send(_batch())


def test_expired_batch_with_nothing_after_it_forces_an_epoch_bump() -> None:
    state = _state()
    a = _batch()
    _sent(state, a)
    state.on_expired(a)
    assert not state.can_send(_batch())
    assert state.bump_required
    state.set_producer_id(1000, 1)
    assert state.can_send(_batch())


def test_expired_transactional_batch_spoils_the_transaction() -> None:
    state = _state(transactional=True)
    a = _batch()
    _sent(state, a)
    state.on_expired(a)
    assert state.abortable_reason and "timed out" in state.abortable_reason


def test_stale_epoch_answers_do_not_touch_new_sequences() -> None:
    state = _state()
    old = _batch()
    _sent(state, old)
    state.set_producer_id(1000, 1)
    assert state.on_error(old, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.RETRY
    assert not state.bump_required


# --- issue 14, bug 1: a batch whose fate is unknown never gives its sequences away ----------
# The broker may have written a batch whose replies were lost (NETWORK_EXCEPTION, a request
# timeout, a cut connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND). If its sequences went to the
# next batch, the broker would take that batch for a duplicate of the written one and answer
# success (or DUPLICATE_SEQUENCE_NUMBER) without writing it: silent loss.

AMBIGUOUS = (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


@pytest.mark.parametrize("code", AMBIGUOUS)
def test_out_of_retries_with_unknown_fate_leaves_the_partition_unresolved(code: int) -> None:
    state = _state()
    a = _batch(10)
    _sent(state, a)  # sequences 1..10
    assert state.on_error(a, code, can_retry=False) is Decision.FAIL
    assert state.needs_rewind("t", 0) is None  # 1..10 are never offered again
    assert state.partitions[("t", 0)].unresolved == a.last_sequence
    b = _batch(10)
    assert not state.can_send(b)  # nothing in flight can prove a was written: new epoch
    assert state.bump_required and state.ready_to_bump()


def test_an_earlier_lost_reply_makes_a_later_definite_error_ambiguous() -> None:
    state = _state()
    a = _batch(10)
    _sent(state, a)
    assert state.on_error(a, ErrorCode.NETWORK_EXCEPTION, can_retry=True) is Decision.RETRY
    a.attempts = 1
    _sent(state, a)
    # The first attempt may have been written; this answer says nothing about it.
    assert state.on_error(a, ErrorCode.NOT_LEADER_OR_FOLLOWER, can_retry=False) \
        is Decision.FAIL
    assert state.needs_rewind("t", 0) is None
    assert state.partitions[("t", 0)].unresolved == a.last_sequence


def test_a_later_ack_resolves_a_failed_batch_without_a_bump() -> None:
    state = _state()
    a, b = _batch(10), _batch(10)
    _sent(state, a, b)
    assert state.on_error(a, ErrorCode.REQUEST_TIMED_OUT, can_retry=False) is Decision.FAIL
    state.on_success(b)  # sequences after a's were accepted: a was written
    assert state.partitions[("t", 0)].unresolved is None
    assert state.can_send(_batch()) and not state.bump_required


def test_the_batch_right_after_an_unresolved_one_out_of_order_bumps_at_once() -> None:
    state = _state()
    a, b = _batch(10), _batch(10)
    _sent(state, a, b)
    assert state.on_error(a, ErrorCode.REQUEST_TIMED_OUT, can_retry=False) is Decision.FAIL
    # a was not written after all: the broker has a gap right before b.
    assert state.on_error(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=True) \
        is Decision.RETRY
    assert state.bump_required and state.ready_to_bump()


def test_epoch_bump_keeps_the_producer_id_and_restarts_sequences() -> None:
    state = _state()
    a = _batch(10)
    _sent(state, a)
    assert state.on_error(a, ErrorCode.REQUEST_TIMED_OUT, can_retry=False) is Decision.FAIL
    b = _batch(10)
    assert not state.can_send(b)
    assert state.bump_epoch()  # KIP-360, client side: same id, epoch + 1
    assert (state.producer_id, state.producer_epoch) == (1000, 1)
    assert state.can_send(b)
    state.assign(b)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (1000, 1, 0)


def test_an_exhausted_epoch_needs_a_new_producer_id() -> None:
    state = ProducerState()
    state.set_producer_id(7, MAX_PRODUCER_EPOCH)
    state.request_bump("test")
    assert not state.bump_epoch()
    assert (state.producer_id, state.producer_epoch) == (7, MAX_PRODUCER_EPOCH)


def test_a_definite_rejection_of_a_never_sent_batch_still_renumbers() -> None:
    """Certainly not written (it never reached the wire): its sequences may be reused."""
    state = _state()
    a = _batch(10)
    assert state.can_send(a)
    state.assign(a)  # sequenced, but the request never went out (last_attempt_ms < 0)
    assert state.on_error(a, ErrorCode.NETWORK_EXCEPTION, can_retry=False) is Decision.FAIL
    assert state.needs_rewind("t", 0) == 1


def test_too_large_after_a_lost_reply_fails_instead_of_splitting() -> None:
    """The lost attempt may have been written (the topic's limit changed since): split
    pieces would write its records again, and renumbering would reuse its sequences."""
    state = _state()
    a = _batch(10)
    _sent(state, a)
    assert state.on_error(a, ErrorCode.NETWORK_EXCEPTION, can_retry=True) is Decision.RETRY
    a.attempts = 1
    _sent(state, a)
    assert state.on_error(a, ErrorCode.MESSAGE_TOO_LARGE, can_retry=True) is Decision.FAIL
    assert state.needs_rewind("t", 0) is None
    assert state.partitions[("t", 0)].unresolved == a.last_sequence


# --- every can_retry=False answer, for the idempotent and the transactional producer ---------

@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NETWORK_EXCEPTION,
                                  ErrorCode.REQUEST_TIMED_OUT, ErrorCode.CORRUPT_MESSAGE,
                                  ErrorCode.INVALID_RECORD, ErrorCode.UNKNOWN_SERVER_ERROR,
                                  ErrorCode.TOPIC_AUTHORIZATION_FAILED])
def test_no_retry_left_fails_and_never_renumbers_a_sent_batch(code: int,
                                                             transactional: bool) -> None:
    state = _state(transactional=transactional)
    a = _batch(10)
    _sent(state, a)
    assert state.on_error(a, code, can_retry=False) is Decision.FAIL
    assert state.needs_rewind("t", 0) is None
    if transactional:
        assert state.abortable_reason
    else:
        assert not state.can_send(_batch()) and state.bump_required


@pytest.mark.parametrize("transactional", [False, True])
def test_duplicate_is_success_even_without_retries(transactional: bool) -> None:
    state = _state(transactional=transactional)
    a = _batch()
    _sent(state, a)
    assert state.on_error(a, ErrorCode.DUPLICATE_SEQUENCE_NUMBER, can_retry=False) \
        is Decision.SUCCESS
    assert state.can_send(_batch())


def test_out_of_order_without_retries_on_the_next_batch_bumps_or_spoils() -> None:
    idempotent = _state()
    a = _batch()
    _sent(idempotent, a)
    assert idempotent.on_error(a, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=False) \
        is Decision.FAIL
    assert idempotent.bump_required
    txn = _state(transactional=True)
    a = _batch()
    _sent(txn, a)
    assert txn.on_error(a, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, can_retry=False) \
        is Decision.FAIL
    assert txn.abortable_reason and not txn.bump_required


def test_unknown_producer_id_without_retries() -> None:
    state = _state()
    a = _batch()
    _sent(state, a)
    assert state.on_error(a, ErrorCode.UNKNOWN_PRODUCER_ID, can_retry=False) is Decision.FAIL
    assert state.bump_required
