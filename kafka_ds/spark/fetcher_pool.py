"""Fetchers kept by a Python worker between tasks (the JVM connector's consumer cache).

Spark reuses Python worker processes across tasks (``spark.python.worker.reuse``, on by
default), so a module-level pool lives as long as the worker. Every micro-batch task of a query
then finds the connections the previous one opened: no TCP, TLS or SASL handshake and no
metadata bootstrap per batch, and the incremental fetch session of each broker goes on where
the previous task left it (no full request to open it, no request to close it, per task).

* Keyed by the client's connection settings (``bootstrap.servers``, security, SASL, TLS...):
  tasks of queries with the same settings share entries; a changed secret makes a new key, and
  the old entry ages out.
* An entry is one ``Fetcher`` with ``keep_sessions``, over its own ``Cluster`` (a
  ``NetworkClient`` with its sockets and metadata). A task takes one out (``lease``), reads,
  and gives it back; a task never shares an entry with another one. If none is idle for its
  key, a new one is made, so the pool never blocks. The lease sets the task's fetch settings
  (``FetchConfig``), which are not part of the key.
* Bounded: at most ``capacity`` idle entries are kept; one more is closed on return.
* Idle eviction: entries idle longer than ``idle_timeout_ms`` are closed, by a daemon thread
  (and on every lease), below the broker's own idle limit (``connections.max.idle.ms``, 10 min).
* No leaks: an entry whose read failed is closed, not returned (its state is unknown);
  ``close_all`` (also at interpreter exit) closes everything idle, and a leased entry returned
  after ``close_all`` is closed. Closing an entry closes its fetch sessions first (waiting at
  most ``_SESSION_CLOSE_TIMEOUT_MS`` for the answers), so they do not hold slots of the
  broker's session cache until it evicts them.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from kafka_ds.client.config import CLIENT_PROPERTIES
from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetcher import Fetcher

log = logging.getLogger(__name__)

PoolKey = tuple[tuple[str, str], ...]

# Closing a pooled fetcher's sessions is a courtesy to the brokers: never wait long for it.
_SESSION_CLOSE_TIMEOUT_MS = 500


def pool_key(properties: Mapping[str, str]) -> PoolKey:
    """The connection-relevant part of ``properties``, as a hashable key."""
    return tuple(sorted((k, str(v)) for k, v in properties.items() if k in CLIENT_PROPERTIES))


@dataclass
class PoolMetrics:
    created: int = 0  # fetchers (with their connections) made
    reused: int = 0  # leases served from an idle entry
    returned: int = 0
    closed_on_error: int = 0
    evicted_idle: int = 0
    evicted_capacity: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Idle:
    fetcher: Fetcher
    since: float  # time.monotonic() when returned


@dataclass
class FetcherPool:
    capacity: int = 16
    idle_timeout_ms: int = 300_000
    metrics: PoolMetrics = field(default_factory=PoolMetrics)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[PoolKey, list[_Idle]] = {}
        self._closed = False
        self._leased = 0
        self._evictor: threading.Thread | None = None
        self._wake = threading.Event()

    # --- leasing -----------------------------------------------------------------------------

    @contextmanager
    def lease(self, properties: Mapping[str, str],
              config: FetchConfig | None = None) -> Iterator[Fetcher]:
        """A fetcher for ``properties`` (client and fetch settings): reused if one is idle,
        else new; its ``config`` is ``config``, or parsed from ``properties``.

        Returned to the pool when the block ends normally (or the reading generator is closed
        early); closed if the block raises.
        """
        key = pool_key(properties)
        fetch_config = config or FetchConfig.from_properties(properties)
        fetcher = self._take(key)
        if fetcher is None:
            fetcher = Fetcher.from_properties(properties, keep_sessions=True)
            with self._lock:
                self.metrics.created += 1
        fetcher.config = fetch_config
        with self._lock:
            self._leased += 1
        ok = False
        try:
            yield fetcher
            ok = True
        except GeneratorExit:  # a reader abandoned early: the connection is still sound
            ok = True
            raise
        finally:
            with self._lock:
                self._leased -= 1
            self._give_back(key, fetcher, ok)

    def _take(self, key: PoolKey) -> Fetcher | None:
        self.evict_idle()
        with self._lock:
            entries = self._idle.get(key)
            while entries:
                entry = entries.pop()
                if not entries:
                    del self._idle[key]
                if not entry.fetcher.cluster.client.closed:
                    self.metrics.reused += 1
                    return entry.fetcher
        return None

    def _give_back(self, key: PoolKey, fetcher: Fetcher, ok: bool) -> None:
        close = not ok
        with self._lock:
            if not ok:
                self.metrics.closed_on_error += 1
            elif self._closed or self._idle_count() >= self.capacity:
                self.metrics.evicted_capacity += 1
                close = True
            else:
                self.metrics.returned += 1
                self._idle.setdefault(key, []).append(_Idle(fetcher, time.monotonic()))
                self._start_evictor()
        if close:
            _close_quietly(fetcher)

    # --- eviction ----------------------------------------------------------------------------

    def _idle_count(self) -> int:
        return sum(len(entries) for entries in self._idle.values())

    def idle_count(self) -> int:
        with self._lock:
            return self._idle_count()

    def leased_count(self) -> int:
        with self._lock:
            return self._leased

    def evict_idle(self, now: float | None = None) -> int:
        """Close entries idle for longer than ``idle_timeout_ms``; returns how many."""
        now = time.monotonic() if now is None else now
        limit_s = self.idle_timeout_ms / 1000
        expired: list[Fetcher] = []
        with self._lock:
            for key in list(self._idle):
                keep = [e for e in self._idle[key] if now - e.since <= limit_s]
                expired += [e.fetcher for e in self._idle[key] if now - e.since > limit_s]
                if keep:
                    self._idle[key] = keep
                else:
                    del self._idle[key]
            self.metrics.evicted_idle += len(expired)
        for fetcher in expired:
            _close_quietly(fetcher)
        return len(expired)

    def _start_evictor(self) -> None:
        # Under self._lock. One daemon thread per pool, started with the first idle entry.
        if self._evictor is not None and self._evictor.is_alive():
            return
        self._evictor = threading.Thread(target=self._evict_loop, name="kafka_ds-pool-evictor",
                                         daemon=True)
        self._evictor.start()

    def _evict_loop(self) -> None:
        # A quarter of the timeout (read each round: a later query may change it).
        while not self._wake.wait(max(0.05, min(60.0, self.idle_timeout_ms / 4000))):
            self.evict_idle()
            with self._lock:
                if self._closed or not self._idle:
                    self._evictor = None
                    return

    def close_all(self) -> None:
        """Close every idle entry; entries still leased are closed when given back."""
        with self._lock:
            self._closed = True
            entries = [entry.fetcher for items in self._idle.values() for entry in items]
            self._idle.clear()
            self._wake.set()
        for fetcher in entries:
            _close_quietly(fetcher)

    def configure(self, capacity: int, idle_timeout_ms: int) -> None:
        """Apply the latest query's settings (the pool is per process, options per query)."""
        with self._lock:
            self.capacity = capacity
            self.idle_timeout_ms = idle_timeout_ms


def _close_quietly(fetcher: Fetcher) -> None:
    try:
        fetcher.close(_SESSION_CLOSE_TIMEOUT_MS)
    except Exception as exc:  # closing is best effort; the socket is gone either way
        log.debug("closing a pooled fetcher: %s", exc)


_POOL: FetcherPool | None = None
_POOL_LOCK = threading.Lock()


def worker_pool(capacity: int = 16, idle_timeout_ms: int = 300_000) -> FetcherPool:
    """This process's pool (created on first use; closed at interpreter exit)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = FetcherPool(capacity, idle_timeout_ms)
            atexit.register(_POOL.close_all)
        elif (_POOL.capacity, _POOL.idle_timeout_ms) != (capacity, idle_timeout_ms):
            _POOL.configure(capacity, idle_timeout_ms)
        return _POOL
