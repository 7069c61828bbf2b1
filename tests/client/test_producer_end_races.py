"""Appends from other threads against close() and the end of a transaction, without a broker.

A record that send() accepts must either be in the flush that ``commit_transaction()``,
``prepare_transaction()``, ``abort_transaction()`` or ``close()`` waits for, or be refused:
never left queued behind an EndTxn, a token or a sender that has exited. The producers here
point at a closed port, so nothing is ever sent; the tests stand in for the flush and look at
what send() did meanwhile.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kafka_ds.client.producer import Producer
from kafka_ds.client.sender import TopicMeta
from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.txn_state import TransactionStateError, TxnState

_UNREACHABLE = "127.0.0.1:1"


def _producer(**config: str) -> Producer:
    producer = Producer({"bootstrap.servers": _UNREACHABLE, "linger.ms": "60000",
                         "max.block.ms": "10000", **config})
    producer._sender.topic_meta = {"t": TopicMeta(1, (0,))}
    return producer


def _in_transaction() -> Producer:
    producer = _producer(**{"transactional.id": "tx"})
    assert producer._txn is not None
    producer._txn.machine.state = TxnState.IN_TRANSACTION
    producer._txn.partitions = {("t", 0)}
    return producer


@pytest.mark.parametrize("call", ["commit_transaction", "prepare_transaction",
                                  "abort_transaction"])
def test_a_send_while_the_transaction_ends_is_refused(call: str) -> None:
    """Before the fix, commit and prepare flushed while still IN_TRANSACTION: a send() from
    another thread during that flush was accepted into a batch no flush covered."""
    producer = _in_transaction()
    before = producer.send("t", b"before")
    seen: dict[str, Any] = {}

    def flush(timeout_ms: int | None = None) -> None:
        # The call's flush: another thread sends now.
        def late() -> None:
            try:
                seen["accepted"] = producer.send("t", b"late")
            except TransactionStateError as exc:
                seen["refused"] = exc
        thread = threading.Thread(target=late)
        thread.start()
        thread.join(5)
        seen["state during flush"] = producer.transaction_state

    def end(txn: Any, commit: bool, timeout_ms: int | None) -> None:
        seen["queued at EndTxn"] = list(producer._accumulator.incomplete)

    producer.flush = flush  # type: ignore[method-assign]
    producer._end = end  # type: ignore[method-assign]
    try:
        getattr(producer, call)(1000)
        assert "accepted" not in seen, f"send() during {call}() was accepted"
        assert call in str(seen["refused"]) or "PREPARED" in str(seen["refused"])
        assert seen["state during flush"] is not TxnState.IN_TRANSACTION
        if "queued at EndTxn" in seen:  # commit, abort: at most the batch from before the call
            assert all(batch is before[0] for batch in seen["queued at EndTxn"])
    finally:
        producer.close(0)


def test_a_send_waiting_for_buffer_memory_fails_when_the_producer_closes() -> None:
    """Before the fix it appended once close(0) freed the memory, after the sender thread had
    exited, and returned a future that nothing would ever complete."""
    producer = _producer(**{"enable.idempotence": "false", "buffer.memory": "2000",
                            "batch.size": "1000"})
    queued = [producer.send("t", b"x" * 100) for _ in range(15)]
    assert producer._accumulator.used_bytes > 2000 - 400  # a 400 B record will not fit
    outcome: dict[str, Any] = {}

    def blocked() -> None:
        try:
            outcome["future"] = producer.send("t", b"y" * 400)
        except KafkaDsError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=blocked)
    thread.start()
    deadline = time.monotonic() + 5
    while not producer._memory_freed._waiters and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    assert producer._memory_freed._waiters, "send() never waited for buffer.memory"  # type: ignore[attr-defined]
    producer.close(0)
    thread.join(5)
    assert not thread.is_alive()
    assert "future" not in outcome, "send() returned a future after close(0)"
    assert "closed" in str(outcome["error"])
    assert all(future.done() for future in queued)
    assert producer._accumulator.used_bytes == 0


def test_a_send_after_the_sender_thread_died_fails() -> None:
    """A bug that ends the sender thread fails what was queued; a send() after it returned a
    future that nothing would ever complete."""
    producer = _producer()

    def broken() -> None:
        raise RuntimeError("a bug in the sender loop")

    producer._sender.run_once = broken  # type: ignore[method-assign]
    producer._sender.client.wakeup()
    producer._sender.thread.join(5)
    assert not producer._sender.thread.is_alive()
    try:
        with pytest.raises(KafkaDsError, match="sender thread stopped after an error"):
            producer.send("t", b"late")
        with pytest.raises(KafkaDsError, match="sender thread stopped"):
            producer.send_many("t", [b"late"] * 3)
    finally:
        producer.close(0)
