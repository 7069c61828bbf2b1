"""The producer sender's decisions, without a broker: how an answer settles a batch, when the
idempotent producer bumps its epoch, and which batches expire.

The ``Sender`` is built but never started: no thread, no connection (``NetworkClient``
connects lazily). Answers are handed to ``_handle`` as the response callback would.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from kafka_ds.client.delivery import BatchResult
from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.client.sender import Sender
from kafka_ds.protocol.accumulator import ProducerBatch, RecordAccumulator
from kafka_ds.protocol.errors import ErrorCode, KafkaTimeoutError
from kafka_ds.protocol.producer_state import MAX_PRODUCER_EPOCH, ProducerState


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def monotonic_ms(self) -> int:
        return self.now_ms

    def wall_ms(self) -> int:
        return self.now_ms

    def sleep_ms(self, duration_ms: int) -> None:
        self.now_ms += duration_ms


def _sender(start_ms: int = 1_000, **properties: str
            ) -> tuple[Sender, RecordAccumulator, ProducerState, FakeClock]:
    config = ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:1", **properties})
    clock = FakeClock()
    clock.now_ms = start_ms
    accumulator = RecordAccumulator(
        batch_size_bytes=config.batch_size_bytes, linger_ms=config.linger_ms,
        buffer_memory_bytes=config.buffer_memory_bytes, retry_backoff_ms=config.retry_backoff_ms,
        delivery_timeout_ms=config.delivery_timeout_ms, new_result=BatchResult,
        now_source=clock.monotonic_ms)
    lock = threading.Lock()
    state = ProducerState(max_in_flight=config.max_in_flight)
    state.set_producer_id(4000, 3)
    sender = Sender(config, accumulator, lock, threading.Condition(lock), state, clock)
    return sender, accumulator, state, clock


def _sent_batch(sender: Sender, accumulator: RecordAccumulator, state: ProducerState,
                records: int = 10) -> ProducerBatch:
    """A batch appended, drained, sequenced and (as far as the sender knows) on the wire."""
    clock_ms = sender.clock.monotonic_ms()
    for i in range(records):
        accumulator.append("t", 0, None, b"v%d" % i, clock_ms, None, 20, clock_ms)
    accumulator.flushes_in_progress += 1
    drained = accumulator.drain([1], lambda topic, partition: 1, 1 << 20, clock_ms,
                                state.can_send)
    accumulator.flushes_in_progress -= 1
    (batch,) = drained[1]
    state.assign(batch)
    batch.last_attempt_ms = clock_ms
    return batch


def _prime(sender: Sender, accumulator: RecordAccumulator, state: ProducerState) -> None:
    """One acknowledged batch: the broker holds state for us, batches may be pipelined."""
    first = _sent_batch(sender, accumulator, state, 1)
    sender._handle(first, 0, 0, -1, None, sender.clock.monotonic_ms())


def test_a_retriable_error_requeues_with_the_same_sequence() -> None:
    sender, accumulator, state, clock = _sender()
    _prime(sender, accumulator, state)
    batch = _sent_batch(sender, accumulator, state)
    sender._handle(batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, None, clock.monotonic_ms())
    assert not batch.result.done()
    assert accumulator.queued("t", 0)[0] is batch and batch.attempts == 1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4000, 3, 1)


def test_a_lost_reply_without_retries_left_bumps_the_epoch_on_the_same_id() -> None:
    """Issue 14 bug 1 / issue 13: the failed batch's sequences are never given to the next
    batch; the epoch is bumped locally (KIP-360), the producer id stays."""
    sender, accumulator, state, clock = _sender(retries="0")
    _prime(sender, accumulator, state)
    lost = _sent_batch(sender, accumulator, state)
    sender._handle(lost, ErrorCode.NETWORK_EXCEPTION, -1, -1, "connection lost",
                   clock.monotonic_ms())
    assert lost.result.done() and lost.result.error is not None
    for i in range(10):
        accumulator.append("t", 0, None, b"next%d" % i, clock.monotonic_ms(), None, 20)
    with sender.lock:
        assert not sender._can_send(accumulator.queued("t", 0)[0])  # held: unresolved
    assert state.bump_required
    assert sender._ensure_producer_id(clock.monotonic_ms())  # no request: a local bump
    assert (state.producer_id, state.producer_epoch) == (4000, 4)
    assert sender.metrics.epoch_bumps == 1
    following = _sent_batch(sender, accumulator, state)
    assert (following.producer_id, following.producer_epoch, following.base_sequence) == \
        (4000, 4, 0)


def test_the_bump_waits_for_batches_in_flight() -> None:
    sender, accumulator, state, clock = _sender()
    _prime(sender, accumulator, state)
    a = _sent_batch(sender, accumulator, state)
    b = _sent_batch(sender, accumulator, state)
    sender._handle(a, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1, None,
                   clock.monotonic_ms())
    assert state.bump_required
    assert sender._ensure_producer_id(clock.monotonic_ms())
    assert state.producer_epoch == 3  # b is still in flight in epoch 3
    sender._handle(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1, None,
                   clock.monotonic_ms())
    assert sender._ensure_producer_id(clock.monotonic_ms())
    assert (state.producer_id, state.producer_epoch) == (4000, 4)


def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    sender, _, state, clock = _sender()
    state.set_producer_id(4000, MAX_PRODUCER_EPOCH)
    state.request_bump("test")
    asked: list[Any] = []
    sender._init_producer_id = asked.append  # type: ignore[method-assign]
    assert sender._ensure_producer_id(clock.monotonic_ms())
    assert asked == [state]


@pytest.mark.parametrize("attempts_left", [True, False])
def test_delivery_timeout_expires_queued_and_in_flight_batches(attempts_left: bool) -> None:
    sender, accumulator, state, clock = _sender(**{"delivery.timeout.ms": "1000",
                                                   "linger.ms": "0",
                                                   "request.timeout.ms": "500"})
    _prime(sender, accumulator, state)
    in_flight = _sent_batch(sender, accumulator, state)
    sender._in_flight_batches.add(in_flight)
    if attempts_left:
        accumulator.append("t", 0, None, b"queued", clock.monotonic_ms(), None, 20)
    clock.now_ms += 1_000
    with sender.lock:
        expired = sender._collect_expired(clock.monotonic_ms())
    assert in_flight in expired and len(expired) == (2 if attempts_left else 1)
    sender._expire(expired)
    assert isinstance(in_flight.result.error, KafkaTimeoutError)
    assert "delivery.timeout.ms" in str(in_flight.result.error)
    assert state.partitions[("t", 0)].unresolved == in_flight.last_sequence


def test_a_sender_is_worth_waking_only_below_the_in_flight_limit_of_the_leader() -> None:
    # send_arrow wakes a polling sender for a new full batch only when the loop could send it
    # to the batch's leader now; at the limit, the response it waits for wakes it.
    sender, *_ = _sender(**{"max.in.flight.requests.per.connection": "2"})
    assert sender.could_send_to(1) and sender.could_send_to(-1)  # -1: leader unknown
    sender._in_flight[1] = 1  # as _send_produce counts a request on the wire
    assert sender.could_send_to(1)
    sender._in_flight[1] = 2
    assert not sender.could_send_to(1)
    assert sender.could_send_to(2) and sender.could_send_to(-1)


def test_a_topic_fetched_for_the_first_send_is_not_asked_for_again_in_that_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first send's metadata task runs in the loop's first pass; the periodic refresh
    right after it must not ask for the topic again before the first Produce. It comes once
    metadata.max.age.ms has passed."""
    from kafka_ds.client.cluster import PartitionInfo, TopicInfo

    # A monotonic clock reads far more than metadata.max.age.ms when a producer starts.
    sender, _, _, clock = _sender(start_ms=3_600_000, **{"metadata.max.age.ms": "60000"})
    fetched: list[str] = []
    refreshed: list[list[str]] = []

    def fetch(name: str, timeout_ms: int | None = None) -> TopicInfo:
        fetched.append(name)
        info = TopicInfo(name, uuid.uuid4(), {0: PartitionInfo(name, 0, 1, 0, (1,), (1,))})
        sender.cluster.topics[name] = info
        return info

    monkeypatch.setattr(sender.cluster, "topic", fetch)
    monkeypatch.setattr(sender.cluster, "refresh",
                        lambda topics, timeout_ms=None: refreshed.append(list(topics)))
    answer = sender.submit(lambda s: s.topic_metadata("t", 1_000))
    sender.run_once()
    assert answer.result(0).partition_count == 1
    assert fetched == ["t"] and refreshed == []
    clock.now_ms += 60_000
    sender.run_once()
    assert refreshed == [["t"]]
