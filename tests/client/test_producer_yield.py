"""send() gives the GIL up when it opens a batch (no broker needed).

The sender thread may be waiting for the GIL with a response to handle when the caller fills a
batch; send() lets it in. For batches of many small records it sleeps 0 s, which leaves the
core to the sender for the thread's timer slack (50 µs by default on Linux; 74 µs measured
here); for batches of fewer, larger records that costs too much per record, and it yields
without sleeping. How long a sleep lasts depends on the machine's other timers, so the tests
watch which C functions send() calls instead of timing it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import pytest

import kafka_ds.client.producer as producer_module
from kafka_ds.client.producer import Producer
from kafka_ds.client.sender import TopicMeta

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_yield"),
                                reason="no sched_yield() here (Windows): send() sleeps 0 s")


def test_yielding_lets_a_thread_waiting_for_the_gil_run() -> None:
    """With a switch interval of 1 s, a thread that wants the GIL back gets it only when the
    busy thread gives it up: here, at its next yield."""
    resumed: list[float] = []
    ready = threading.Event()

    def wants_the_gil() -> None:
        ready.set()
        time.sleep(0.01)  # gives the GIL up; taking it back needs the busy loop to yield
        resumed.append(time.perf_counter())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        waiter = threading.Thread(target=wants_the_gil)
        waiter.start()
        ready.wait()
        started = time.perf_counter()
        while time.perf_counter() - started < 0.5:
            for _ in range(1000):
                pass
            producer_module._yield_gil()
        waiter.join()
    finally:
        sys.setswitchinterval(interval)
    assert resumed[0] - started < 0.25


def _c_calls_of_sends(batch_size: int, value: bytes, count: int) -> tuple[list[str], int]:
    """The C functions ``count`` sends of ``value`` call (a profile hook on this thread) after
    a first one, and how many batches those sends used."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": "60000",
                         "batch.size": str(batch_size), "buffer.memory": str(64 << 20)})
    producer._sender.topic_meta = {"t": TopicMeta(1, (0,))}
    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            called.append(f"{getattr(arg, '__module__', None)}.{arg.__name__}")

    try:
        first = producer.send("t", value).batch  # its batch is not opened under the hook
        sys.setprofile(profile)
        try:
            opened = [producer.send("t", value) for _ in range(count)]
        finally:
            sys.setprofile(None)
        batches = {id(future.batch) for future in opened} - {id(first)}
    finally:
        producer.close(0)
    return called, len(batches)


def test_send_opening_batches_of_few_records_yields_without_sleeping() -> None:
    """Each of these records opens a batch (batch.size is below two records), and so yields
    the GIL once: by sched_yield(), never by a call of time.sleep."""
    called, opened = _c_calls_of_sends(300, b"v" * 200, 10)
    assert opened == 10
    assert "time.sleep" not in called
    assert called.count("posix.sched_yield") == 10


def test_send_opening_batches_of_many_records_sleeps_instead() -> None:
    """Records of 18 bytes in 64 KiB batches: over 3,600 to a batch, at least
    SLEEP_MIN_RECORDS_PER_BATCH, so each new batch sleeps 0 s once and never yields."""
    assert producer_module.SLEEP_MIN_RECORDS_PER_BATCH * 18 <= 64 << 10
    called, opened = _c_calls_of_sends(64 << 10, b"v", 12_000)
    assert opened >= 3
    assert called.count("time.sleep") == opened
    assert "posix.sched_yield" not in called
