"""Receiving the response in flight on a second thread while the fetching thread decodes.

Layer: client. Receiving a large Fetch response costs real CPU in the fetching thread: the
kernel copies every byte out of the socket, and on a fast link the response arrives in many
pieces, so 4 MiB of 1 KB records took about 1 ms of receiving per 3 ms of decoding
(integration/benchmarks/bench_fetcher.py). With one thread, that millisecond was spent after
each decode, with the broker waiting for the next request meanwhile. ``ReceiveAhead`` runs the
network poll in a helper thread for exactly as long as the fetching thread decodes one large
chunk, and joins it before the fetching thread touches the network again, so the network
client is never used by two threads at once. The socket reads release the GIL, so they
overlap the decoding; the Python part of a poll is small.

It pays where a core is free for the copy (a reader on a machine with cores to spare, or
alongside a broker that leaves a core partly idle), and loses where none is (the thread
hand-offs cost CPU): hence ``receive.ahead`` (fetch_config), off by default.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from kafka_ds.net.clock import Clock
from kafka_ds.net.future import RequestFuture


class Polled(Protocol):
    """What the helper uses of the network client (``net.pool.NetworkClient``)."""

    def poll(self, timeout_ms: int) -> None: ...

    def wakeup(self) -> None: ...


class ReceiveAhead:
    """The helper thread of one read (created on first use; ``close`` ends it)."""

    def __init__(self, client: Polled, clock: Clock, timeout_ms: int) -> None:
        self._client = client
        self._clock = clock
        self._timeout_ms = timeout_ms
        self._executor: ThreadPoolExecutor | None = None

    @contextlib.contextmanager
    def during(self, in_flight: list[RequestFuture[Any]]) -> Iterator[bool]:
        """Receive ``in_flight`` in the helper while the block runs (a chunk being decoded);
        on leaving, stop it and wait for it. Yields whether the helper runs (not when nothing
        is pending). An error of the helper's poll is raised on leaving, unless the block
        raised first."""
        pending = [future for future in in_flight if not future.done()]
        if not pending:
            yield False
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kafka_ds-receive")
        stop = threading.Event()
        receiving = self._executor.submit(self._receive, pending, stop)
        try:
            yield True
        except BaseException:
            self._stop(stop)
            with contextlib.suppress(Exception):
                receiving.result()  # the block's error is the one to raise
            raise
        self._stop(stop)
        receiving.result()

    def _stop(self, stop: threading.Event) -> None:
        stop.set()
        self._client.wakeup()  # interrupt a select() waiting for more bytes

    def _receive(self, pending: list[RequestFuture[Any]], stop: threading.Event) -> None:
        deadline_ms = self._clock.monotonic_ms() + self._timeout_ms
        while not stop.is_set() and not all(future.done() for future in pending):
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0:
                return  # the fetching thread's own poll expires the request
            self._client.poll(remaining_ms)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
