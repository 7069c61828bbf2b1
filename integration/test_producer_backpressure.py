"""Back-pressure: a producer whose broker stops answering fills ``buffer.memory``, then each
of its three send paths blocks for ``max.block.ms`` and raises, naming both settings; nothing it
had accepted is lost once the broker answers again.

The broker is real; the frame-level proxy between it and the producer swallows Produce
responses for a while (``blackhole``), so every in-flight slot stays taken and the accumulator
cannot drain. The proxy's own counter proves the blackhole swallowed responses in this test.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from integration.harness.proxy import PRODUCE, ProxiedKafkaCluster, swallowed
from integration.producer_util import read_all
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import KafkaTimeoutError

BUFFER_MEMORY_BYTES = 64 * 1024
BATCH_BYTES = 16 * 1024
MAX_BLOCK_MS = 1500
VALUE = b"v" * 1000


def _send_one(producer: Producer, topic: str, i: int) -> Any:
    return producer.send(topic, VALUE, key=f"k{i}".encode())


def _send_unkeyed(producer: Producer, topic: str, i: int) -> Any:
    return producer.send(topic, VALUE)  # send()'s lane: the open batch, no accumulator call


def _send_many(producer: Producer, topic: str, i: int) -> Any:
    return producer.send_many(topic, [VALUE] * 8, keys=[f"k{i}-{j}".encode() for j in range(8)])


def _send_arrow(producer: Producer, topic: str, i: int) -> Any:
    return producer.send_arrow(topic, pa.array([VALUE] * 8, pa.binary()),
                               pa.array([f"k{i}-{j}".encode() for j in range(8)], pa.binary()))


@pytest.mark.parametrize("send", [_send_one, _send_unkeyed, _send_many, _send_arrow],
                         ids=["send", "send-unkeyed", "send_many", "send_arrow"])
def test_a_full_buffer_blocks_for_max_block_ms_then_raises_and_loses_nothing(
        proxied: ProxiedKafkaCluster, send: Callable[[Producer, str, int], Any]) -> None:
    topic = f"backpressure-{uuid.uuid4().hex[:10]}"
    proxied.create_topic(topic, 1)
    proxy = proxied.proxy
    producer = Producer({
        "bootstrap.servers": proxied.proxy_bootstrap(), "buffer.memory": str(BUFFER_MEMORY_BYTES),
        "batch.size": str(BATCH_BYTES), "linger.ms": "0", "max.block.ms": str(MAX_BLOCK_MS),
        # The swallowed requests are resent after request.timeout.ms (idempotence keeps them
        # single); nothing may expire meanwhile.
        "request.timeout.ms": "10000", "delivery.timeout.ms": "120000"})
    accepted: list[Any] = []
    try:
        producer.send(topic, b"warm-up").result(30)  # metadata and connection in place
        before = proxy.snapshot()
        proxy.blackhole(600, {PRODUCE})
        error: KafkaTimeoutError | None = None
        blocked_s = 0.0
        # Far more than buffer.memory holds: the loop must end in the error.
        for i in range(4 * BUFFER_MEMORY_BYTES // len(VALUE)):
            started = time.monotonic()
            try:
                accepted.append(send(producer, topic, i))
            except KafkaTimeoutError as exc:
                error, blocked_s = exc, time.monotonic() - started
                break
        assert error is not None, "the buffer never filled: nothing blocked"
        message = str(error)
        assert "buffer.memory" in message and "max.block.ms" in message, message
        assert f"{BUFFER_MEMORY_BYTES} bytes" in message and str(MAX_BLOCK_MS) in message
        # It waited for max.block.ms before giving up (no upper bound: the VM is noisy).
        assert blocked_s >= MAX_BLOCK_MS / 1000 * 0.9, blocked_s
        assert proxy.since(before).get(swallowed(PRODUCE), 0) >= 1, "no response swallowed"
        proxy.reset()  # the broker answers again: everything accepted gets delivered
        for future in accepted:
            future.result(60)
    finally:
        proxy.reset()
        producer.close()
    values = [r.value for r in read_all(proxied.bootstrap(), topic)]
    per_call = 1 if send in (_send_one, _send_unkeyed) else 8
    assert len(values) == 1 + len(accepted) * per_call, "an accepted record was lost or doubled"
