"""One connection to one broker: connect, ApiVersions, SASL, then pipelined requests.

Layer: net (sockets; framing and schemas come from ``protocol``).

Two phases, both driven by a selector loop (``NetworkClient.poll``, or ``connect()``'s own
for a caller without one), so a connect never blocks anything but itself:

1. ``start_connect()`` opens a non-blocking socket (``transport.SocketSetup``: TCP, then
   TLS), then exchanges ApiVersions (learning the broker's version ranges and finalized
   features) and authenticates with SASL if configured, both as ordinary pipelined requests
   (below). All of it fits in one ``connect_timeout_ms``: a peer that trickles a byte now and
   then cannot stretch it, because the deadline does not restart with each read; when it
   passes, the error names the phase (TCP, TLS, or the exchange). Errors name the broker and
   the setting to fix; a connection lost during the exchange is a ``HandshakeCutError``
   (lookups retry it). Requests sent meanwhile wait and go out once it is ``connected``.
2. Then ``send()`` queues a framed request and writes what the socket takes;
   ``on_readable()`` / ``on_writable()`` are called by the selector loop and complete each
   request's future as its response arrives. Many requests may be in flight (pipelining);
   responses come back in order.

A request that passes its deadline closes the connection: responses are strictly ordered, so
a late one cannot be skipped, and the Java client does the same. Every future still pending
then fails with the reason, and its caller decides whether to retry.

Re-authentication (KIP-368). When SaslAuthenticate grants a session lifetime (the broker sets
``connections.max.reauth.ms``, or an OAUTHBEARER token expires), the broker closes the
connection once the session ends unless the client authenticates again on it. At a random
point between 85 % and 95 % of the lifetime, as the Java client does, ``maybe_reauthenticate``
(called from the selector loop and before each send) runs the same SASL exchange again on the
open connection, with fresh credentials (a re-read token file, a newly minted token): the
same SASL state machine and pipelined path as at connect. Requests already in flight are
left alone: the broker answers in order, so their responses arrive before the
SaslHandshake's. Requests sent meanwhile are held back, because the broker accepts nothing
but SASL until the exchange ends, and go out as soon as it does. Nothing in flight is
dropped; a failed re-authentication closes the connection with an ``AuthenticationError``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import random
import selectors
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from kafka_ds import __version__
from kafka_ds.net.clock import SYSTEM_CLOCK, Clock
from kafka_ds.net.future import RequestFuture
from kafka_ds.net.metrics import ConnectionMetrics
from kafka_ds.net.security import ConnectionConfig
from kafka_ds.net.transport import (
    SocketSetup,
    client_certificate_refused,
    open_socket,
    refuses_client_certificate,
)
from kafka_ds.protocol.api_keys import ApiKey, negotiate, require
from kafka_ds.protocol.connection import ProtocolConnection
from kafka_ds.protocol.errors import (
    AuthenticationError,
    DecodeError,
    ErrorCode,
    KafkaDsError,
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
)
from kafka_ds.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka_ds.protocol.sasl import SaslAuthentication, reauthentication_delay_ms
from kafka_ds.protocol.schema import ApiMessage, Request
from kafka_ds.protocol.supported_versions import SUPPORTED_VERSIONS

log = logging.getLogger(__name__)

_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
# After a token source fails at re-authentication time, try it again this much later (the
# session is still valid: re-authentication starts well before it ends).
_REAUTH_RETRY_MS = 1_000


class HandshakeCutError(NetworkError):
    """The connection was lost during a connect's ApiVersions or SASL exchange.

    A broker restarting or a link cut does this, and so does a listener that wants another
    ``security.protocol`` (it hangs up on our first request). Lookups retry it on a fresh
    connection within their timeout; twice running on fresh connections means the latter.
    """


class _Held(NamedTuple):
    """A request sent while the connection re-authenticates: it goes out afterwards."""

    request: Request
    version: int | None
    expect_response: bool
    timeout_ms: int | None
    future: RequestFuture[Any]


class BrokerConnection:
    """A connection to the broker ``node_id`` at ``host:port``. Not thread-safe."""

    def __init__(self, node_id: int, host: str, port: int, config: ConnectionConfig,
                 clock: Clock = SYSTEM_CLOCK, metrics: ConnectionMetrics | None = None,
                 jitter: Callable[[], float] = random.random) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.config = config
        self.clock = clock
        self.protocol = ProtocolConnection(config.client_id, config.max_response_bytes)
        self.sock: socket.socket | None = None
        # Broker facts learned from ApiVersions.
        self.api_ranges: dict[int, tuple[int, int]] = {}
        self.api_versions: dict[int, int] = {}
        self.finalized_features: dict[str, int] = {}
        self._send_queue: deque[tuple[memoryview, RequestFuture[Any] | None]] = deque()
        # Futures of requests awaiting a response, in the order sent, with their deadline.
        self._waiting: deque[tuple[RequestFuture[Any], int]] = deque()
        self.closed_error: KafkaDsError | None = None
        # Responses received after connecting; zero when the broker hangs up on our first
        # request, which usually means the listener wants SASL or TLS we did not configure.
        self.responses_received = 0
        self.metrics = metrics if metrics is not None else ConnectionMetrics()
        self._jitter = jitter
        # KIP-368 session: when to re-authenticate and when the broker will consider the
        # session over (monotonic ms; None when the broker set no lifetime).
        self.reauthenticate_at_ms: int | None = None
        self.session_expires_at_ms: int | None = None
        self._sasl: SaslAuthentication | None = None  # an exchange under way
        self._sasl_started_ms = 0
        self._held: deque[_Held] = deque()
        # Connect state: TCP/TLS setup first, then ApiVersions and SASL as pipelined
        # requests (``_negotiating``), all before one deadline.
        self._setup: SocketSetup | None = None
        self._negotiating = False
        self._setup_api = ""  # the request of the connect in flight, for error messages
        self.connect_deadline_ms = 0

    def __repr__(self) -> str:
        state = "connected" if self.connected else (
            "connecting" if self.connecting else "closed")
        return f"BrokerConnection(node {self.node_id} at {self.address}, {state})"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """Ready for requests: connected, ApiVersions learned, SASL done."""
        return self.sock is not None and not self._negotiating

    @property
    def connecting(self) -> bool:
        """A connect is under way (TCP, TLS, ApiVersions or SASL)."""
        return self._setup is not None or self._negotiating

    def fileno(self) -> int:
        """The socket a selector must watch (-1 when closed); it changes while connecting."""
        if self._setup is not None:
            return self._setup.fileno()
        return self.sock.fileno() if self.sock is not None else -1

    def interest(self) -> int:
        """The selector events this connection waits for now."""
        if self._setup is not None:
            return selectors.EVENT_WRITE if self._setup.wants_write else selectors.EVENT_READ
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self._send_queue else 0)

    @property
    def in_flight_count(self) -> int:
        return len(self._waiting) + len(self._held)

    @property
    def reauthenticating(self) -> bool:
        return self._sasl is not None and not self._negotiating

    def session_expired(self, now_ms: int) -> bool:
        """True once the SASL session has ended: the broker closes the connection on the next
        request, so it must not be used for one (reconnect instead)."""
        return self.session_expires_at_ms is not None and now_ms >= self.session_expires_at_ms

    # --- phase 1: connect ----------------------------------------------------------------

    def start_connect(self) -> None:
        """Begin connecting; never waits for the peer.

        The selector loop (``NetworkClient.poll``, or ``connect`` below) drives the rest
        through ``on_writable``/``on_readable``/``check_timeouts``. A connect that fails ends
        with the connection closed and ``closed_error`` saying why; ``connected`` turns true
        once ApiVersions (and SASL) are done.
        """
        config = self.config
        self.metrics.connection_attempts += 1
        self.closed_error = None
        self.connect_deadline_ms = self.clock.monotonic_ms() + config.connect_timeout_ms
        try:
            self._setup = open_socket(
                self.host, self.port, timeout_ms=config.connect_timeout_ms,
                ssl_context=config.ssl_context(),
                send_buffer_bytes=config.send_buffer_bytes,
                receive_buffer_bytes=config.receive_buffer_bytes)
        except KafkaDsError as exc:
            self.close(exc)
            return
        self._after_setup_step()

    def connect(self) -> None:
        """Connect, blocking until ready or failed (raises ``closed_error``).

        For callers with no selector loop of their own; ``NetworkClient`` uses
        ``start_connect`` and its ``poll`` instead, so other connections keep moving.
        """
        self.start_connect()
        with selectors.DefaultSelector() as selector:
            watched: tuple[int, int] | None = None
            while self.connecting:
                fileno, events = self.fileno(), self.interest()
                if watched != (fileno, events):
                    if watched is not None:
                        selector.unregister(watched[0])
                    selector.register(fileno, events)
                    watched = (fileno, events)
                remaining_ms = self.connect_deadline_ms - self.clock.monotonic_ms()
                for _, mask in selector.select(max(0, remaining_ms) / 1000):
                    if mask & selectors.EVENT_WRITE:
                        self.on_writable()
                    if mask & selectors.EVENT_READ:
                        self.on_readable()
                self.check_timeouts(self.clock.monotonic_ms())
        if not self.connected:
            raise self.closed_error or NetworkError(f"connection to {self.address} is closed")

    def _after_setup_step(self) -> None:
        """Once TCP (and TLS) are up, start the ApiVersions exchange on the pipelined path."""
        setup = self._setup
        assert setup is not None
        if setup.ready is None:
            return
        self._setup = None
        self.sock = setup.ready
        self._negotiating = True
        self._send_api_versions(SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1])

    def _on_setup_event(self) -> None:
        assert self._setup is not None
        try:
            self._setup.on_event()
        except KafkaDsError as exc:
            self.close(exc)
            return
        self._after_setup_step()

    def _send_setup_request(self, request: Request, version: int,
                            on_response: Callable[[Any], None]) -> None:
        """Send one ApiVersions or SASL request of the connect; ``on_response`` gets the
        decoded answer (a failure has closed the connection already, with the reason)."""
        self._setup_api = ApiKey(request.API_KEY).name
        remaining_ms = max(0, self.connect_deadline_ms - self.clock.monotonic_ms())
        future = self._enqueue(request, version, True, remaining_ms)

        def done(future: RequestFuture[Any]) -> None:
            if future.failed() or self.sock is None:
                return
            try:
                on_response(future.result())
            except KafkaDsError as exc:
                self.close(exc)

        future.add_callback(done)

    def _send_api_versions(self, version: int) -> None:
        request = ApiVersionsRequest(client_software_name="kafka-ds",
                                     client_software_version=__version__)
        self._send_setup_request(request, version,
                                 functools.partial(self._on_api_versions, version))

    def _on_api_versions(self, version: int, response: ApiVersionsResponse) -> None:
        ours = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION and version == ours:
            # The v0 answer lists the broker's ApiVersions range: retry within it.
            theirs = {item.api_key: item.max_version for item in response.api_keys}
            lower = min(ours, theirs.get(ApiKey.API_VERSIONS, 0))
            if lower != version:
                self._send_api_versions(lower)
                return
        if response.error_code:
            raise ProtocolError(f"broker {self.address} refused ApiVersions with error "
                                f"{response.error_code}")
        self.api_ranges = {item.api_key: (item.min_version, item.max_version)
                           for item in response.api_keys}
        self.api_versions = negotiate(SUPPORTED_VERSIONS, self.api_ranges)
        if response.finalized_features_epoch >= 0:
            self.finalized_features = {item.name: item.max_version_level
                                       for item in response.finalized_features}
        if self.config.security_protocol.uses_sasl:
            self._begin_sasl(self._new_authentication(), self.clock.monotonic_ms())
        else:
            self._connected()

    def _connected(self) -> None:
        self._negotiating = False
        self.metrics.connections_opened += 1
        self._release_held()

    def _connect_timeout_error(self) -> KafkaTimeoutError:
        if self._setup is not None:
            return self._setup.timeout_error()
        return KafkaTimeoutError(
            f"broker {self.address} did not finish connecting within "
            f"{self.config.connect_timeout_ms} ms (socket.connection.setup.timeout.ms); if the "
            "listener expects TLS or SASL, check security.protocol")

    def _setup_cut(self, what: str, exc: BaseException | None = None) -> HandshakeCutError:
        """The connection was lost in the middle of the ApiVersions/SASL exchange."""
        error = HandshakeCutError(what)
        error.__cause__ = exc
        return error

    def _closed_while_connecting(self) -> HandshakeCutError:
        protocol = self.config.security_protocol
        return self._setup_cut(
            f"broker {self.address} closed the connection during {self._setup_api}: does "
            f"this listener expect {'plaintext' if protocol.uses_tls else 'TLS'} or "
            f"{'no SASL' if protocol.uses_sasl else 'SASL'}? Check security.protocol")

    def _new_authentication(self) -> SaslAuthentication:
        """A fresh SASL exchange with fresh credentials (a token source is asked again)."""
        sasl = self.config.sasl
        assert sasl is not None
        return SaslAuthentication(
            sasl.new_mechanism(self.host), address=self.address, username=sasl.identity,
            handshake_version=self.version_for(ApiKey.SASL_HANDSHAKE),
            authenticate_version=self.version_for(ApiKey.SASL_AUTHENTICATE))

    def _start_session(self, authentication: SaslAuthentication, started_ms: int) -> None:
        """Plan the next re-authentication from the lifetime the broker granted.

        Times count from when the exchange began, before the broker started its clock, so
        both are early rather than late.
        """
        lifetime_ms = authentication.session_lifetime_ms
        if lifetime_ms <= 0:
            self.reauthenticate_at_ms = self.session_expires_at_ms = None
            return
        self.reauthenticate_at_ms = started_ms + reauthentication_delay_ms(lifetime_ms,
                                                                           self._jitter())
        self.session_expires_at_ms = started_ms + lifetime_ms
        log.debug("node %s (%s): SASL session of %d ms; re-authenticating in %d ms",
                  self.node_id, self.address, lifetime_ms,
                  self.reauthenticate_at_ms - started_ms)

    # --- SASL, at connect and again on the open connection (KIP-368) ---------------------

    def maybe_reauthenticate(self, now_ms: int) -> None:
        """Start re-authenticating if the session is due; requests sent meanwhile wait."""
        due = self.reauthenticate_at_ms
        if due is None or now_ms < due or self._sasl is not None or not self.connected:
            return
        try:
            authentication = self._new_authentication()
        except KafkaDsError as exc:
            # The token source failed (a token file mid-rotation?). The session still has
            # 5-15 % of its life left: try again shortly rather than drop the connection.
            log.warning("node %s (%s): cannot re-authenticate yet: %s", self.node_id,
                        self.address, exc)
            self.reauthenticate_at_ms = now_ms + _REAUTH_RETRY_MS
            return
        log.debug("node %s (%s): re-authenticating (%d requests in flight)", self.node_id,
                  self.address, len(self._waiting))
        self.metrics.requests_in_flight_at_reauthentication += len(self._waiting)
        self.reauthenticate_at_ms = None
        self._begin_sasl(authentication, now_ms)

    def _begin_sasl(self, authentication: SaslAuthentication, started_ms: int) -> None:
        self._sasl = authentication
        self._sasl_started_ms = started_ms
        self._send_sasl(authentication.first_request())

    def _send_sasl(self, step: tuple[Request, int]) -> None:
        if self._negotiating:  # part of the connect: its deadline, its error messages
            self._send_setup_request(step[0], step[1], self._on_sasl_response)
            return
        future = self._enqueue(step[0], step[1], True, None)
        future.add_callback(self._on_reauth_future)

    def _on_reauth_future(self, future: RequestFuture[Any]) -> None:
        if future.failed() or self._sasl is None:
            return  # the connection closed: close() has failed the held requests
        try:
            self._on_sasl_response(future.result())
        except KafkaDsError as exc:
            self.close(exc)

    def _on_sasl_response(self, response: ApiMessage) -> None:
        authentication = self._sasl
        assert authentication is not None
        try:
            step = authentication.on_response(response)
        except AuthenticationError:
            if not self._negotiating:
                self.metrics.reauthentication_failures += 1
            raise
        if step is not None:
            self._send_sasl(step)
            return
        self._sasl = None
        self._start_session(authentication, self._sasl_started_ms)
        if self._negotiating:
            self.metrics.authentications += 1
            self._connected()
        else:
            self.metrics.reauthentications += 1
            self._release_held()

    def _release_held(self) -> None:
        """Send the requests that waited for the connect or a re-authentication to end."""
        held, self._held = self._held, deque()
        for item in held:
            if self.sock is None:
                item.future.fail(self.closed_error
                                 or NetworkError(f"connection to {self.address} is closed"))
                continue
            try:
                self._enqueue(item.request, item.version, item.expect_response,
                              item.timeout_ms, item.future)
            except KafkaDsError as exc:  # e.g. a version the broker does not offer
                item.future.fail(exc)

    def version_for(self, api_key: int) -> int:
        """The negotiated version of ``api_key``, or a clear error if there is none."""
        return require(self.api_versions, api_key, self.address,
                       SUPPORTED_VERSIONS[api_key], self.api_ranges.get(api_key))

    # --- phase 2: pipelined requests ------------------------------------------------------

    def send(self, request: Request, version: int | None = None, *,
             expect_response: bool = True, timeout_ms: int | None = None) -> RequestFuture[Any]:
        """Queue ``request``; the future completes with its decoded response.

        With ``expect_response=False`` (Produce with acks=0) the future completes with None
        once the bytes are handed to the socket. While the connection re-authenticates the
        request waits, and goes out as soon as the broker has accepted the new credentials.
        """
        future: RequestFuture[Any] = RequestFuture()
        if self.sock is None and self._setup is None:
            future.fail(self.closed_error
                        or NetworkError(f"connection to {self.address} is closed"))
            return future
        self.maybe_reauthenticate(self.clock.monotonic_ms())
        if self._sasl is not None or self.connecting:
            self._held.append(_Held(request, version, expect_response, timeout_ms, future))
            if not self.connecting:
                self.metrics.requests_held_for_reauthentication += 1
            return future
        return self._enqueue(request, version, expect_response, timeout_ms, future)

    def _enqueue(self, request: Request, version: int | None, expect_response: bool,
                 timeout_ms: int | None,
                 future: RequestFuture[Any] | None = None) -> RequestFuture[Any]:
        future = future if future is not None else RequestFuture()
        version = self.version_for(request.API_KEY) if version is None else version
        _, pieces = self.protocol.send_request_pieces(request, version, expect_response)
        queue = self._send_queue
        for piece in pieces[:-1]:
            queue.append((memoryview(piece), None))
        if expect_response:
            timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
            self._waiting.append((future, self.clock.monotonic_ms() + timeout))
            queue.append((memoryview(pieces[-1]), None))
        else:  # sent: done once its last piece is written
            queue.append((memoryview(pieces[-1]), future))
        self.on_writable()
        return future

    def on_writable(self) -> None:
        """Write as much of the queue as the socket takes (or step the connect)."""
        if self._setup is not None:
            self._on_setup_event()
            return
        sock = self.sock
        try:
            while self._send_queue and sock is not None:
                view, done_future = self._send_queue[0]
                try:
                    sent = sock.send(view)
                except _WOULD_BLOCK:
                    return
                if sent < len(view):
                    self._send_queue[0] = (view[sent:], done_future)
                    continue
                self._send_queue.popleft()
                if done_future is not None:
                    done_future.succeed(None)
        except OSError as exc:
            if isinstance(exc, ssl.SSLError) and refuses_client_certificate(exc):
                self.close(client_certificate_refused(self.address, exc))
            elif self._negotiating:
                self.close(self._setup_cut(
                    f"connection to {self.address} failed while connecting: {exc}", exc))
            else:
                self.close(NetworkError(f"sending to broker {self.address} failed: {exc}"))

    def on_readable(self) -> None:
        """Read everything the socket has; complete futures for whole responses."""
        if self._setup is not None:
            self._on_setup_event()
            return
        sock = self.sock
        protocol = self.protocol
        try:
            while sock is not None:
                try:
                    count = sock.recv_into(protocol.read_buffer())
                except _WOULD_BLOCK:
                    return
                if count == 0:
                    if self._negotiating:
                        self.close(self._closed_while_connecting())
                        return
                    hint = "" if self.responses_received else (
                        " before answering our first request: if the listener requires SASL "
                        "or TLS, check security.protocol and sasl.mechanism")
                    self.close(NetworkError(f"broker {self.address} closed the connection{hint}"))
                    return
                received = protocol.bytes_received(count)
                if received is not None:
                    future, _ = self._waiting.popleft()
                    if not self._negotiating:
                        self.responses_received += 1
                    future.succeed(received.response)
                    sock = self.sock  # a callback may have closed us
        except DecodeError as exc:
            if not self._negotiating:
                self.close(exc)
                return
            tls = self.config.security_protocol.uses_tls
            error = NetworkError(
                f"broker {self.address} did not answer like a Kafka broker ({exc}); "
                f"{'is this a plaintext listener' if tls else 'does this listener use TLS'}? "
                "Check security.protocol")
            error.__cause__ = exc
            self.close(error)
        except ProtocolError as exc:
            self.close(exc)
        except ssl.SSLError as exc:
            if refuses_client_certificate(exc):
                # With TLS 1.3 the broker judges our certificate after the handshake, so its
                # refusal arrives as an alert on the first read rather than in the handshake.
                self.close(client_certificate_refused(self.address, exc))
            elif self._negotiating:
                self.close(NetworkError(
                    f"TLS with {self.address} failed while connecting: {exc}"))
            else:
                self.close(NetworkError(f"connection to broker {self.address} failed: {exc}"))
        except OSError as exc:
            if self._negotiating:
                self.close(self._setup_cut(
                    f"connection to {self.address} failed while connecting: {exc}", exc))
                return
            reset = exc.errno in (errno.ECONNRESET, errno.EPIPE)
            self.close(NetworkError(f"connection to broker {self.address} "
                                    f"{'was reset' if reset else f'failed: {exc}'}"))

    def check_timeouts(self, now_ms: int) -> None:
        if self.connecting:
            if now_ms >= self.connect_deadline_ms:
                self.close(self._connect_timeout_error())
            return
        if self._waiting and self._waiting[0][1] <= now_ms:
            self.close(KafkaTimeoutError(
                f"broker {self.address} did not answer within request.timeout.ms; closing the "
                "connection (responses are ordered, so a late one cannot be skipped)"))

    def next_deadline_ms(self) -> int | None:
        """The earliest time something must happen: the connect's deadline, a request's
        timeout, or re-authenticating."""
        if self.connecting:
            return self.connect_deadline_ms
        deadlines = [self._waiting[0][1]] if self._waiting else []
        if self.reauthenticate_at_ms is not None and self._sasl is None:
            deadlines.append(self.reauthenticate_at_ms)
        return min(deadlines, default=None)

    def close(self, error: KafkaDsError | None) -> None:
        """Close the socket; every pending future fails with ``error`` (or a generic one)."""
        sock, self.sock = self.sock, None
        setup, self._setup = self._setup, None
        if setup is not None:
            setup.close()
        self._negotiating = False
        if sock is not None:
            with contextlib.suppress(OSError):  # closing a broken socket
                sock.close()
        failure = error or NetworkError(f"connection to broker {self.address} was closed")
        self.closed_error = failure
        self.protocol.fail_all()
        pending = [future for future, _ in self._waiting]
        pending += [future for _, future in self._send_queue if future is not None]
        pending += [item.future for item in self._held]
        self._waiting.clear()
        self._send_queue.clear()
        self._held.clear()
        self._sasl = None
        self.reauthenticate_at_ms = self.session_expires_at_ms = None
        if error is not None and pending:
            log.info("connection to node %s (%s) closed with %d requests pending: %s",
                     self.node_id, self.address, len(pending), error)
        for future in pending:
            future.fail(failure)
