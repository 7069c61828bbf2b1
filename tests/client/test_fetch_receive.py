"""``ReceiveAhead``: the helper thread that polls the network while the fetching thread decodes.

A stand-in network client records which thread polls it and blocks in ``poll`` until woken
(as ``select`` does), so that each test sees where the polls ran and that the helper is
stopped and joined when the block ends, whether it ends normally or with an error. The real
client and broker are exercised in integration/test_fetcher.py (rows compared with
librdkafka's with the helper on and off).
"""

from __future__ import annotations

import threading
import time

import pytest

from kafka_ds.client.fetch_receive import ReceiveAhead
from kafka_ds.net.clock import SystemClock
from kafka_ds.net.future import RequestFuture


class _Client:
    """Completes ``future`` on the ``complete_after``-th poll; a poll otherwise waits for a
    wakeup (or 50 ms)."""

    def __init__(self, future: RequestFuture[str], complete_after: int) -> None:
        self.future = future
        self.complete_after = complete_after
        self.poll_threads: list[str] = []
        self.wakeups = 0
        self._woken = threading.Event()

    def poll(self, timeout_ms: int) -> None:
        self.poll_threads.append(threading.current_thread().name)
        if len(self.poll_threads) >= self.complete_after and not self.future.done():
            self.future.succeed("response")
            return
        self._woken.wait(min(timeout_ms, 50) / 1000)
        self._woken.clear()

    def wakeup(self) -> None:
        self.wakeups += 1
        self._woken.set()


def test_the_helper_receives_while_the_block_runs() -> None:
    future: RequestFuture[str] = RequestFuture()
    client = _Client(future, complete_after=3)
    ahead = ReceiveAhead(client, SystemClock(), timeout_ms=10_000)
    try:
        with ahead.during([future]) as receiving:
            assert receiving
            deadline = time.monotonic() + 30
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.01)  # "decoding"
        assert future.result() == "response"
        assert client.poll_threads and all(name.startswith("kafka_ds-receive")
                                           for name in client.poll_threads)
        assert threading.current_thread().name not in client.poll_threads
    finally:
        ahead.close()


def test_a_block_that_ends_first_stops_the_helper() -> None:
    future: RequestFuture[str] = RequestFuture()
    client = _Client(future, complete_after=10**9)  # the response never completes
    ahead = ReceiveAhead(client, SystemClock(), timeout_ms=60_000)
    try:
        started = time.monotonic()
        with ahead.during([future]):
            deadline = time.monotonic() + 30
            while not client.poll_threads and time.monotonic() < deadline:
                time.sleep(0.01)
        # Left the block: the helper was woken and joined, long before its 60 s deadline.
        assert client.wakeups >= 1
        assert time.monotonic() - started < 30
        polls = len(client.poll_threads)
        time.sleep(0.2)
        assert len(client.poll_threads) == polls  # nobody polls any more
        assert not future.done()
    finally:
        ahead.close()


def test_an_error_in_the_block_is_raised_after_the_helper_stops() -> None:
    future: RequestFuture[str] = RequestFuture()
    client = _Client(future, complete_after=10**9)
    ahead = ReceiveAhead(client, SystemClock(), timeout_ms=60_000)
    try:
        with pytest.raises(ValueError, match="corrupt chunk"), ahead.during([future]):
            raise ValueError("corrupt chunk")
        assert client.wakeups >= 1
        polls = len(client.poll_threads)
        time.sleep(0.2)
        assert len(client.poll_threads) == polls
    finally:
        ahead.close()


def test_an_error_of_the_helpers_poll_is_raised_on_leaving() -> None:
    future: RequestFuture[str] = RequestFuture()

    class _Failing(_Client):
        def poll(self, timeout_ms: int) -> None:
            raise OSError("selector closed")

    ahead = ReceiveAhead(_Failing(future, 1), SystemClock(), timeout_ms=60_000)
    try:
        with pytest.raises(OSError, match="selector closed"), ahead.during([future]):
            pass
    finally:
        ahead.close()


def test_nothing_in_flight_starts_no_thread() -> None:
    done: RequestFuture[str] = RequestFuture()
    done.succeed("already here")
    client = _Client(done, complete_after=1)
    ahead = ReceiveAhead(client, SystemClock(), timeout_ms=1_000)
    before = {thread.name for thread in threading.enumerate()}
    with ahead.during([done]) as receiving:
        assert not receiving
    assert client.poll_threads == []
    assert not any(thread.name.startswith("kafka_ds-receive")
                   for thread in threading.enumerate() if thread.name not in before)
    ahead.close()
