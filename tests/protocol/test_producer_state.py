"""Idempotent sequence bookkeeping (KIP-98, KIP-360): every answer the broker can give."""

from __future__ import annotations

from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.producer_state import Decision, ProducerState


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
