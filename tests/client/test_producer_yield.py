"""send() gives the GIL up when it opens a batch, without sleeping (no broker needed).

The sender thread may be waiting for the GIL with a response to handle when the caller fills a
batch; send() lets it in. It must not do so with ``time.sleep(0)``: Linux sleeps that for the
thread's timer slack (50 µs by default; 74 µs measured here), once per batch. How long a sleep
lasts depends on the machine's other timers, so the test watches which C functions send()
calls instead of timing it.
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


def test_send_opening_batches_yields_without_sleeping() -> None:
    """Each of these records opens a batch (batch.size is below two records), and so yields
    the GIL once: by sched_yield(), never by a call of time.sleep. The C functions called are
    seen by a profile hook on this thread."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": "60000",
                         "batch.size": "300"})
    producer._sender.topic_meta = {"t": TopicMeta(1, (0,))}
    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            called.append(f"{getattr(arg, '__module__', None)}.{arg.__name__}")

    try:
        producer.send("t", b"v" * 200)  # the first batch, not counted
        sys.setprofile(profile)
        try:
            opened = [producer.send("t", b"v" * 200) for _ in range(10)]
        finally:
            sys.setprofile(None)
        batches = {id(future.batch) for future in opened}
    finally:
        producer.close(0)
    assert len(batches) == 10
    assert "time.sleep" not in called
    assert called.count("posix.sched_yield") == 10
