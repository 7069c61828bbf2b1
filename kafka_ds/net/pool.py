"""The network client: connections to every broker, one selector loop, bootstrap rotation.

Layer: net.

``NetworkClient`` owns one ``BrokerConnection`` per broker node, opened on first use, and a
selector over all of them. ``send(node_id, request)`` returns a future; ``poll(timeout_ms)``
moves bytes in both directions, completes futures, and drives connects under way. Whoever
calls ``poll`` drives the I/O: the producer's sender thread, or the fetcher and admin calls in
the caller's thread. One thread at a time may use a client; only ``wakeup()`` may be called
from any thread (it interrupts a ``poll`` blocked in ``select``).

Connecting never stops the loop. ``ready(node_id)`` answers at once whether a connection is
usable, starting one if there is none (as the Java client's ``NetworkClient.ready``): the
producer and the fetch loop send only to ready nodes, so a broker that is down, stalled or
black-holed holds up its own requests only, for at most ``socket.connection.setup.timeout.ms``,
and ``connect_failure(node_id)`` tells them, once, that a connect failed and why.
``connection(node_id)`` (and ``send`` to a node not connected) still waits for the connect,
for lookups that need an answer, but waits by polling, so every other connection's traffic
keeps moving meanwhile.

Bootstrap connections (before we know node ids) use negative ids, one per bootstrap address,
tried in rotation: when one fails the next is tried, and the error lists every address that
failed and why. A node that failed to connect is not retried before its backoff expires
(``reconnect.backoff.ms``, doubling up to ``reconnect.backoff.max.ms``), so a dead broker is
not hammered by every retry of every request. An ``AuthenticationError`` (bad credentials, an
untrusted certificate on either side) is never backed off: its callers fail at once rather
than retry (configuration, not availability), so the loops check ``connect_failure`` before
``ready``, which would start the next attempt.

SASL sessions with a lifetime are re-authenticated on their connection by the connection
itself (see ``broker_conn``), driven by ``poll`` and ``send``; a connection whose session ran
out while nobody polled is replaced by a new one before it is used. ``metrics`` counts
connection attempts, authentications and re-authentications over the client's life.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
from collections.abc import Callable
from typing import Any

from kafka_ds.net.broker_conn import BrokerConnection, HandshakeCutError
from kafka_ds.net.clock import SYSTEM_CLOCK, Clock
from kafka_ds.net.future import RequestFuture
from kafka_ds.net.metrics import ConnectionMetrics
from kafka_ds.net.security import ConnectionConfig
from kafka_ds.protocol.errors import (
    AuthenticationError,
    ConfigError,
    KafkaDsError,
    KafkaTimeoutError,
    NetworkError,
)
from kafka_ds.protocol.schema import Request

log = logging.getLogger(__name__)


def parse_bootstrap(servers: str | list[str]) -> list[tuple[str, int]]:
    """``"host1:9092,host2:9093"`` -> [(host1, 9092), (host2, 9093)]; IPv6 as ``[::1]:9092``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    parsed: list[tuple[str, int]] = []
    for item in (entry.strip() for entry in items):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ConfigError(f"bootstrap server {item!r} is not host:port "
                              "(kafka.bootstrap.servers)")
        parsed.append((host.strip("[]"), int(port)))
    if not parsed:
        raise ConfigError("kafka.bootstrap.servers is empty: give at least one host:port")
    return parsed


class _Backoff:
    """Per-node reconnect backoff: exponential, reset by a successful connect."""

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_ms = base_ms
        self.max_ms = max_ms
        self._failures: dict[int, tuple[int, int]] = {}  # node -> (failures, retry_at_ms)

    def retry_at_ms(self, node_id: int) -> int:
        return self._failures.get(node_id, (0, 0))[1]

    def failed(self, node_id: int, now_ms: int) -> None:
        failures = self._failures.get(node_id, (0, 0))[0] + 1
        delay_ms = min(self.max_ms, self.base_ms * 2 ** min(failures - 1, 20))
        self._failures[node_id] = (failures, now_ms + delay_ms)

    def succeeded(self, node_id: int) -> None:
        self._failures.pop(node_id, None)


class NetworkClient:
    """Connections to a cluster's brokers, driven by ``poll``."""

    def __init__(self, bootstrap_servers: str | list[str], config: ConnectionConfig,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        config.validate()
        self.config = config
        self.clock = clock
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self._bootstrap_ids = {-(index + 1): address
                               for index, address in enumerate(self.bootstrap)}
        self.metrics = ConnectionMetrics()
        self._nodes: dict[int, tuple[str, int]] = {}
        self._connections: dict[int, BrokerConnection] = {}  # open or connecting
        self._connecting: set[int] = set()  # nodes whose connect has not ended yet
        self._connect_errors: dict[int, KafkaDsError] = {}  # the last failure, until a success
        self._unreported_failures: dict[int, KafkaDsError] = {}  # see connect_failure()
        # Connects that ended (either way), for a loop waiting on ``poll_until`` to notice.
        self.connect_events = 0
        self._backoff = _Backoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms)
        self._next_bootstrap = 0
        self._selector = selectors.DefaultSelector()
        self._registered: dict[int, tuple[int, int]] = {}  # node -> (fd, events)
        self._wakeup_read, self._wakeup_write = socket.socketpair()
        self._wakeup_read.setblocking(False)
        self._wakeup_write.setblocking(False)
        self._selector.register(self._wakeup_read, selectors.EVENT_READ, None)
        # True from a wakeup's write until the poll that reads it: later wakeups meanwhile
        # need no write (a bulk send wakes the sender once per batch it queues).
        self._wakeup_pending = False
        self.closed = False

    # --- nodes and connections ------------------------------------------------------------

    def set_nodes(self, nodes: dict[int, tuple[str, int]]) -> None:
        """Record broker addresses learned from metadata; moved brokers get new connections."""
        for node_id, address in nodes.items():
            connection = self._connections.get(node_id)
            if connection is not None and (connection.host, connection.port) != address:
                self._drop(node_id, NetworkError(f"broker {node_id} moved to "
                                                 f"{address[0]}:{address[1]}"))
        self._nodes = dict(nodes)

    def known_nodes(self) -> dict[int, tuple[str, int]]:
        return dict(self._nodes)

    def is_connected(self, node_id: int) -> bool:
        connection = self._connections.get(node_id)
        return connection is not None and connection.connected

    def ready(self, node_id: int) -> bool:
        """Is the connection to ``node_id`` usable now? Never blocks.

        With no connection, starts one (unless the node's reconnect backoff has not passed)
        and returns False; ``poll`` drives it. ``connect_failure(node_id)`` reports each
        connect that failed, once.
        """
        connection = self._live(node_id)
        if connection is not None:
            return connection.connected
        if self._backoff.retry_at_ms(node_id) > self.clock.monotonic_ms():
            return False
        with contextlib.suppress(KafkaDsError):  # reported by connect_failure()
            self._start(node_id)
        return False

    def connecting_count(self) -> int:
        """How many connects are under way (``poll`` drives them)."""
        return len(self._connecting)

    def connect_failure(self, node_id: int) -> KafkaDsError | None:
        """The error of a connect to ``node_id`` that failed since this was last asked: each
        failure is reported once, to the loop that decides what it means (an
        ``AuthenticationError`` is fatal; anything else, retry after the backoff)."""
        return self._unreported_failures.pop(node_id, None)

    def connection_error(self, node_id: int) -> KafkaDsError | None:
        """Why the last connect to ``node_id`` failed; None once one succeeds."""
        return self._connect_errors.get(node_id)

    def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to ``node_id``, connecting if needed; raises on failure.

        Blocks until the connect ends (at most ``socket.connection.setup.timeout.ms``, after
        the node's reconnect backoff), but polls while it waits: requests to other brokers
        keep moving and their callbacks run meanwhile.
        """
        connection = self._live(node_id)
        try:
            if connection is None:
                while (wait_ms := self._backoff.retry_at_ms(node_id)
                       - self.clock.monotonic_ms()) > 0:
                    self.poll(wait_ms)
                connection = self._start(node_id)
            while connection.connecting:
                self.poll(max(0, connection.connect_deadline_ms - self.clock.monotonic_ms()))
            if connection.connected:
                return connection
            raise connection.closed_error or NetworkError(
                f"connection to broker {node_id} closed")
        except KafkaDsError:
            self._unreported_failures.pop(node_id, None)  # reported: raised to this caller
            raise

    def _live(self, node_id: int) -> BrokerConnection | None:
        """The connection to ``node_id`` if it is usable or still connecting; a dead one is
        dropped (and a failed connect recorded)."""
        existing = self._connections.get(node_id)
        if existing is None:
            return None
        if existing.connecting:
            return existing
        if existing.connected:
            if not (existing.session_expired(self.clock.monotonic_ms())
                    and existing.in_flight_count == 0):
                return existing
            # Idle past its SASL session: the broker would close it on our next request.
            self.metrics.expired_sessions_closed += 1
            self._drop(node_id, NetworkError(f"SASL session with broker {node_id} expired"))
            return None
        # Closed itself between polls (a failed write, a cut).
        self._reap(node_id, existing)
        return None

    def _start(self, node_id: int) -> BrokerConnection:
        """Start connecting to ``node_id``; raises at once if it cannot even start."""
        address = self._nodes.get(node_id) or self._bootstrap_ids.get(node_id)
        if address is None:
            raise NetworkError(f"no address known for broker {node_id}; refresh metadata")
        connection = BrokerConnection(node_id, address[0], address[1], self.config, self.clock,
                                      self.metrics)
        connection.start_connect()
        self._connections[node_id] = connection
        self._connecting.add(node_id)
        if not connection.connecting:
            self._reap(node_id, connection)
            raise connection.closed_error or NetworkError(f"cannot connect to broker {node_id}")
        self._watch(node_id, connection)
        return connection

    def _reap(self, node_id: int, connection: BrokerConnection) -> None:
        """Drop a connection that closed; if it closed while connecting, the connect failed:
        remember why, and back the node off (not for an ``AuthenticationError``: callers fail
        at once on it, and one that asks again gets the same answer at once, not after a
        backoff)."""
        error = connection.closed_error or NetworkError(f"connection to broker {node_id} closed")
        if node_id in self._connecting:
            self._connecting.discard(node_id)
            self._connect_errors[node_id] = self._unreported_failures[node_id] = error
            self.connect_events += 1
            if not isinstance(error, AuthenticationError):
                self._backoff.failed(node_id, self.clock.monotonic_ms())
        self._drop(node_id, error)

    def any_connection(self) -> BrokerConnection:
        """Some live connection: an open one, else known nodes, else bootstrap in rotation."""
        for connection in self._connections.values():
            if connection.connected:
                return connection
        candidates = list(self._nodes) + self._rotated_bootstrap_ids()
        errors: list[KafkaDsError] = []
        for node_id in candidates:
            try:
                return self.connection(node_id)
            except AuthenticationError:
                raise
            except KafkaDsError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        # Every address hung up during the handshake: as retriable as each of them was.
        kind = HandshakeCutError if all(isinstance(error, HandshakeCutError)
                                        for error in errors) else NetworkError
        raise kind("could not connect to any broker: " + "; ".join(map(str, errors)))

    def _rotated_bootstrap_ids(self) -> list[int]:
        ids = list(self._bootstrap_ids)
        start = self._next_bootstrap % len(ids)
        self._next_bootstrap += 1
        return ids[start:] + ids[:start]

    def _drop(self, node_id: int, error: KafkaDsError) -> None:
        connection = self._connections.pop(node_id, None)
        self._connecting.discard(node_id)
        self._unwatch(node_id)
        if connection is not None:
            connection.close(error)

    def disconnect(self, node_id: int, error: KafkaDsError | None = None) -> None:
        """Close the connection to ``node_id`` (pending requests fail with ``error``)."""
        self._drop(node_id, error or NetworkError(f"connection to broker {node_id} closed"))

    # --- requests -------------------------------------------------------------------------

    def send(self, node_id: int, request: Request, version: int | None = None, *,
             expect_response: bool = True, timeout_ms: int | None = None) -> RequestFuture[Any]:
        """Send ``request`` to ``node_id`` (connecting first if needed)."""
        try:
            connection = self.connection(node_id)
        except KafkaDsError as exc:
            future: RequestFuture[Any] = RequestFuture()
            future.fail(exc)
            return future
        future = connection.send(request, version, expect_response=expect_response,
                                 timeout_ms=timeout_ms)
        self._watch(node_id, connection)
        return future

    def request(self, node_id: int, request: Request, timeout_ms: int | None = None,
                version: int | None = None) -> Any:
        """Send and wait: the decoded response, or the error."""
        future = self.send(node_id, request, version, timeout_ms=timeout_ms)
        self.wait_for(future, timeout_ms)
        return future.result()

    def wait_for(self, future: RequestFuture[Any], timeout_ms: int | None = None) -> None:
        """Poll until ``future`` completes; raise ``KafkaTimeoutError`` after ``timeout_ms``."""
        self.poll_until(future.done, timeout_ms)
        if not future.done():
            raise KafkaTimeoutError(f"no response within {timeout_ms} ms")

    def poll_until(self, condition: Callable[[], bool], timeout_ms: int | None = None) -> bool:
        """Poll until ``condition()`` is true or ``timeout_ms`` passes; returns ``condition()``."""
        timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.clock.monotonic_ms() + timeout
        while not condition():
            remaining_ms = deadline_ms - self.clock.monotonic_ms()
            if remaining_ms <= 0:
                break
            self.poll(remaining_ms)
        return condition()

    # --- the loop -------------------------------------------------------------------------

    def _watch(self, node_id: int, connection: BrokerConnection) -> None:
        """Point the selector at the connection's current socket, for the events it wants.

        Sockets are registered by file descriptor: a connect's socket changes when it tries
        the next address, and TLS wraps it in another object on the same descriptor.
        """
        fd, events = connection.fileno(), connection.interest()
        registered = self._registered.get(node_id)
        if registered == (fd, events):
            return
        if registered is not None and registered[0] != fd:
            self._unwatch(node_id)
            registered = None
        if fd < 0:
            return
        if registered is None:
            # A connection that closed itself between polls may still hold this descriptor
            # number in the selector: the number is free again, and a new socket may get it.
            stale = self._selector.get_map().get(fd)
            if stale is not None:
                self._unwatch(stale.data)
            self._selector.register(fd, events, node_id)
        else:
            self._selector.modify(fd, events, node_id)
        self._registered[node_id] = (fd, events)

    def _unwatch(self, node_id: int) -> None:
        registered = self._registered.pop(node_id, None)
        if registered is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):  # already gone
                self._selector.unregister(registered[0])

    def poll(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` for I/O, move bytes, complete futures, expire requests."""
        now_ms = self.clock.monotonic_ms()
        for connection in self._connections.values():
            deadline = connection.next_deadline_ms()
            if deadline is not None:
                timeout_ms = min(timeout_ms, max(0, deadline - now_ms))
        for key, mask in self._selector.select(max(0, timeout_ms) / 1000):
            node_id = key.data
            if node_id is None:
                self._drain_wakeups()
                continue
            ready = self._connections.get(node_id)
            if ready is None or ready.fileno() != key.fd:
                continue  # a stale registration of a socket closed meanwhile
            if mask & selectors.EVENT_WRITE:
                ready.on_writable()
            if mask & selectors.EVENT_READ:
                ready.on_readable()
        now_ms = self.clock.monotonic_ms()
        for node_id, connection in list(self._connections.items()):
            connection.check_timeouts(now_ms)
            connection.maybe_reauthenticate(now_ms)
            if connection.connected and node_id in self._connecting:
                self._connecting.discard(node_id)
                self._backoff.succeeded(node_id)
                self._connect_errors.pop(node_id, None)
                self._unreported_failures.pop(node_id, None)
                self.connect_events += 1
            if connection.connected or connection.connecting:
                self._watch(node_id, connection)
            else:
                self._reap(node_id, connection)

    def wakeup(self) -> None:
        """Interrupt a ``poll`` blocked in another thread. Thread-safe."""
        if self._wakeup_pending:  # its byte is unread: the poll it wakes has yet to return
            return
        self._wakeup_pending = True
        # A full pipe means a wakeup is already pending; an error, that we are closed.
        with contextlib.suppress(BlockingIOError, OSError):
            self._wakeup_write.send(b"\0")

    def _drain_wakeups(self) -> None:
        try:
            while self._wakeup_read.recv(1024):
                pass
        except (BlockingIOError, OSError):
            pass
        # Cleared after the reads, not before: a wakeup that finds the flag still set here is
        # one this poll returns after anyway. Cleared before, a wakeup could write between
        # the clear and the reads, have its byte read here and leave the flag set with the
        # pipe empty, and every later wakeup would be skipped.
        self._wakeup_pending = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for node_id in list(self._connections):
            self._drop(node_id, NetworkError("client closed"))
        self._selector.close()
        self._wakeup_read.close()
        self._wakeup_write.close()

    def __enter__(self) -> NetworkClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
