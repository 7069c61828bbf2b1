"""One connection to one broker: connect, ApiVersions, SASL, then pipelined requests.

Layer: net (sockets; framing and schemas come from ``protocol``).

Two phases:

1. ``connect()`` is blocking and sequential, and all of it (TCP, TLS, ApiVersions, SASL)
   fits in one ``connect_timeout_ms``: a peer that trickles a byte now and then cannot keep it
   waiting, because the deadline does not restart with each read. It opens the TCP or TLS
   socket, exchanges ApiVersions (learning the broker's version ranges and finalized
   features), then authenticates with SASL if configured. Errors here name the broker and the
   setting to fix.
2. After that the socket is non-blocking. ``send()`` queues a framed request and writes what
   the socket takes; ``on_readable()`` / ``on_writable()`` are called by the ``NetworkClient``'s
   selector loop and complete each request's future as its response arrives. Many requests
   may be in flight (pipelining); responses come back in order.

A request that passes its deadline closes the connection: responses are strictly ordered, so
a late one cannot be skipped, and the Java client does the same. Every future still pending
then fails with the reason, and its caller decides whether to retry.

Re-authentication (KIP-368). When SaslAuthenticate grants a session lifetime (the broker sets
``connections.max.reauth.ms``, or an OAUTHBEARER token expires), the broker closes the
connection once the session ends unless the client authenticates again on it. At a random
point between 85 % and 95 % of the lifetime, as the Java client does, ``maybe_reauthenticate``
(called from the selector loop and before each send) runs the same SASL exchange again on the
open connection, with fresh credentials (a re-read token file, a newly minted token). Requests
already in flight are left alone: the broker answers in order, so their responses arrive
before the SaslHandshake's. Requests sent meanwhile are held back, because the broker accepts
nothing but SASL until the exchange ends, and go out as soon as it does. Nothing in flight is
dropped; a failed re-authentication closes the connection with an ``AuthenticationError``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import random
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
from kafka_ds.protocol.supported import SUPPORTED_VERSIONS

log = logging.getLogger(__name__)

_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
# After a token source fails at re-authentication time, try it again this much later (the
# session is still valid: re-authentication starts well before it ends).
_REAUTH_RETRY_MS = 1_000


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
        self._reauth: SaslAuthentication | None = None  # a re-authentication under way
        self._reauth_started_ms = 0
        self._held: deque[_Held] = deque()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"BrokerConnection(node {self.node_id} at {self.address}, {state})"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self.sock is not None

    @property
    def in_flight_count(self) -> int:
        return len(self._waiting) + len(self._held)

    @property
    def reauthenticating(self) -> bool:
        return self._reauth is not None

    def session_expired(self, now_ms: int) -> bool:
        """True once the SASL session has ended: the broker closes the connection on the next
        request, so it must not be used for one (reconnect instead)."""
        return self.session_expires_at_ms is not None and now_ms >= self.session_expires_at_ms

    # --- phase 1: connect ----------------------------------------------------------------

    def connect(self) -> None:
        """Open the socket and complete ApiVersions and SASL. Blocking; raises on failure."""
        config = self.config
        self.metrics.connection_attempts += 1
        deadline_ms = self.clock.monotonic_ms() + config.connect_timeout_ms
        sock = open_socket(
            self.host, self.port, timeout_ms=config.connect_timeout_ms,
            ssl_context=config.ssl_context(),
            send_buffer_bytes=config.send_buffer_bytes,
            receive_buffer_bytes=config.receive_buffer_bytes)
        self.sock = sock
        self.closed_error = None
        try:
            self._exchange_api_versions(deadline_ms)
            if config.security_protocol.uses_sasl:
                self._authenticate(deadline_ms)
            sock.setblocking(False)
        except TimeoutError as exc:
            self.close(None)
            raise KafkaTimeoutError(
                f"broker {self.address} did not finish connecting within "
                f"{config.connect_timeout_ms} ms (socket.connection.setup.timeout.ms); if the "
                "listener expects TLS or SASL, check security.protocol") from exc
        except BaseException:
            self.close(None)
            raise
        self.metrics.connections_opened += 1

    def _roundtrip(self, request: Request, version: int, deadline_ms: int) -> ApiMessage:
        """Blocking request/response, used only while connecting; ``TimeoutError`` once
        ``deadline_ms`` passes, however the bytes trickle in."""
        assert self.sock is not None
        _, frame = self.protocol.send_request(request, version)
        try:
            self._settimeout(deadline_ms)
            self.sock.sendall(frame)
            while True:
                self._settimeout(deadline_ms)
                count = self.sock.recv_into(self.protocol.read_buffer())
                if count == 0:
                    protocol = self.config.security_protocol
                    raise NetworkError(
                        f"broker {self.address} closed the connection during "
                        f"{ApiKey(request.API_KEY).name}: does this listener expect "
                        f"{'plaintext' if protocol.uses_tls else 'TLS'} or "
                        f"{'no SASL' if protocol.uses_sasl else 'SASL'}? Check security.protocol")
                received = self.protocol.bytes_received(count)
                if received is not None:
                    return received.response
        except TimeoutError:
            raise
        except DecodeError as exc:
            tls = self.config.security_protocol.uses_tls
            raise NetworkError(
                f"broker {self.address} did not answer like a Kafka broker ({exc}); "
                f"{'is this a plaintext listener' if tls else 'does this listener use TLS'}? "
                "Check security.protocol") from exc
        except ssl.SSLError as exc:
            if refuses_client_certificate(exc):
                # With TLS 1.3 the broker judges our certificate after the handshake, so its
                # refusal arrives as an alert on the first read rather than in connect.
                raise client_certificate_refused(self.address, exc) from exc
            raise NetworkError(f"TLS with {self.address} failed while connecting: {exc}") from exc
        except OSError as exc:
            raise NetworkError(f"connection to {self.address} failed while connecting: "
                               f"{exc}") from exc

    def _settimeout(self, deadline_ms: int) -> None:
        assert self.sock is not None
        remaining_ms = deadline_ms - self.clock.monotonic_ms()
        if remaining_ms <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining_ms / 1000)

    def _exchange_api_versions(self, deadline_ms: int) -> None:
        ours = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        request = ApiVersionsRequest(client_software_name="kafka-ds",
                                     client_software_version=__version__)
        response = self._roundtrip(request, ours[1], deadline_ms)
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The v0 answer lists the broker's ApiVersions range: retry within it.
            theirs = {item.api_key: item.max_version for item in response.api_keys}
            version = min(ours[1], theirs.get(ApiKey.API_VERSIONS, 0))
            response = self._roundtrip(request, version, deadline_ms)
            assert isinstance(response, ApiVersionsResponse)
        if response.error_code:
            raise ProtocolError(f"broker {self.address} refused ApiVersions with error "
                                f"{response.error_code}")
        self.api_ranges = {item.api_key: (item.min_version, item.max_version)
                           for item in response.api_keys}
        self.api_versions = negotiate(SUPPORTED_VERSIONS, self.api_ranges)
        if response.finalized_features_epoch >= 0:
            self.finalized_features = {item.name: item.max_version_level
                                       for item in response.finalized_features}

    def _new_authentication(self) -> SaslAuthentication:
        """A fresh SASL exchange with fresh credentials (a token source is asked again)."""
        sasl = self.config.sasl
        assert sasl is not None
        return SaslAuthentication(
            sasl.new_mechanism(self.host), address=self.address, username=sasl.identity,
            handshake_version=self.version_for(ApiKey.SASL_HANDSHAKE),
            authenticate_version=self.version_for(ApiKey.SASL_AUTHENTICATE))

    def _authenticate(self, deadline_ms: int) -> None:
        started_ms = self.clock.monotonic_ms()
        authentication = self._new_authentication()
        step: tuple[Request, int] | None = authentication.first_request()
        while step is not None:
            step = authentication.on_response(self._roundtrip(*step, deadline_ms))
        self.metrics.authentications += 1
        self._start_session(authentication, started_ms)

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

    # --- re-authentication (KIP-368) --------------------------------------------------------

    def maybe_reauthenticate(self, now_ms: int) -> None:
        """Start re-authenticating if the session is due; requests sent meanwhile wait."""
        due = self.reauthenticate_at_ms
        if due is None or now_ms < due or self._reauth is not None or self.sock is None:
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
        self._reauth = authentication
        self._reauth_started_ms = now_ms
        self.reauthenticate_at_ms = None
        self._send_reauth(authentication.first_request())

    def _send_reauth(self, step: tuple[Request, int]) -> None:
        future = self._enqueue(step[0], step[1], True, None)
        future.add_callback(self._on_reauth_response)

    def _on_reauth_response(self, future: RequestFuture[Any]) -> None:
        authentication = self._reauth
        if future.failed() or authentication is None:
            return  # the connection closed: close() has failed the held requests
        try:
            step = authentication.on_response(future.result())
        except AuthenticationError as exc:
            self.metrics.reauthentication_failures += 1
            self.close(exc)
            return
        if step is not None:
            self._send_reauth(step)
            return
        self._reauth = None
        self.metrics.reauthentications += 1
        self._start_session(authentication, self._reauth_started_ms)
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
        if self.sock is None:
            future.fail(self.closed_error
                        or NetworkError(f"connection to {self.address} is closed"))
            return future
        self.maybe_reauthenticate(self.clock.monotonic_ms())
        if self._reauth is not None:
            self._held.append(_Held(request, version, expect_response, timeout_ms, future))
            self.metrics.requests_held_for_reauthentication += 1
            return future
        return self._enqueue(request, version, expect_response, timeout_ms, future)

    def _enqueue(self, request: Request, version: int | None, expect_response: bool,
                 timeout_ms: int | None,
                 future: RequestFuture[Any] | None = None) -> RequestFuture[Any]:
        future = future if future is not None else RequestFuture()
        version = self.version_for(request.API_KEY) if version is None else version
        _, frame = self.protocol.send_request(request, version, expect_response)
        if expect_response:
            timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
            self._waiting.append((future, self.clock.monotonic_ms() + timeout))
            self._send_queue.append((memoryview(frame), None))
        else:
            self._send_queue.append((memoryview(frame), future))
        self.on_writable()
        return future

    def wants_write(self) -> bool:
        return bool(self._send_queue)

    def on_writable(self) -> None:
        """Write as much of the queue as the socket takes."""
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
            self.close(NetworkError(f"sending to broker {self.address} failed: {exc}"))

    def on_readable(self) -> None:
        """Read everything the socket has; complete futures for whole responses."""
        sock = self.sock
        protocol = self.protocol
        try:
            while sock is not None:
                try:
                    count = sock.recv_into(protocol.read_buffer())
                except _WOULD_BLOCK:
                    return
                if count == 0:
                    hint = "" if self.responses_received else (
                        " before answering our first request: if the listener requires SASL "
                        "or TLS, check security.protocol and sasl.mechanism")
                    self.close(NetworkError(f"broker {self.address} closed the connection{hint}"))
                    return
                received = protocol.bytes_received(count)
                if received is not None:
                    future, _ = self._waiting.popleft()
                    self.responses_received += 1
                    future.succeed(received.response)
                    sock = self.sock  # a callback may have closed us
        except ProtocolError as exc:
            self.close(exc)
        except OSError as exc:
            reset = exc.errno in (errno.ECONNRESET, errno.EPIPE)
            self.close(NetworkError(f"connection to broker {self.address} "
                                    f"{'was reset' if reset else f'failed: {exc}'}"))

    def check_timeouts(self, now_ms: int) -> None:
        if self._waiting and self._waiting[0][1] <= now_ms:
            self.close(KafkaTimeoutError(
                f"broker {self.address} did not answer within request.timeout.ms; closing the "
                "connection (responses are ordered, so a late one cannot be skipped)"))

    def next_deadline_ms(self) -> int | None:
        """The earliest time something must happen: a request's timeout, or re-authenticating."""
        deadlines = [self._waiting[0][1]] if self._waiting else []
        if self.reauthenticate_at_ms is not None and self._reauth is None:
            deadlines.append(self.reauthenticate_at_ms)
        return min(deadlines, default=None)

    def close(self, error: KafkaDsError | None) -> None:
        """Close the socket; every pending future fails with ``error`` (or a generic one)."""
        sock, self.sock = self.sock, None
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
        self._reauth = None
        self.reauthenticate_at_ms = self.session_expires_at_ms = None
        if error is not None and pending:
            log.info("connection to node %s (%s) closed with %d requests pending: %s",
                     self.node_id, self.address, len(pending), error)
        for future in pending:
            future.fail(failure)
