"""One connection to one broker: connect, ApiVersions, SASL, then pipelined requests.

Layer: net (sockets; framing and schemas come from ``protocol``).

Two phases:

1. ``connect()`` is blocking and sequential, bounded by ``connect_timeout_ms``: open the TCP
   or TLS socket, exchange ApiVersions (learning the broker's version ranges and finalized
   features), then SASL if configured. Errors here name the broker and the setting to fix.
2. After that the socket is non-blocking. ``send()`` queues a framed request and writes what
   the socket takes; ``on_readable()`` / ``on_writable()`` are called by the ``NetworkClient``'s
   selector loop and complete each request's future as its response arrives. Many requests
   may be in flight (pipelining); responses come back in order.

A request that passes its deadline closes the connection: responses are strictly ordered, so
a late one cannot be skipped, and the Java client does the same. Every future still pending
then fails with the reason, and its caller decides whether to retry.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import ssl
from collections import deque
from typing import Any

from kafka_ds import __version__
from kafka_ds.net.clock import SYSTEM_CLOCK, Clock
from kafka_ds.net.future import RequestFuture
from kafka_ds.net.security import ConnectionConfig
from kafka_ds.net.transport import open_socket
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
from kafka_ds.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kafka_ds.protocol.messages.sasl_handshake import SaslHandshakeRequest
from kafka_ds.protocol.schema import ApiMessage, Request
from kafka_ds.protocol.supported import SUPPORTED_VERSIONS

log = logging.getLogger(__name__)

_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class BrokerConnection:
    """A connection to the broker ``node_id`` at ``host:port``. Not thread-safe."""

    def __init__(self, node_id: int, host: str, port: int, config: ConnectionConfig,
                 clock: Clock = SYSTEM_CLOCK) -> None:
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
        return len(self._waiting)

    # --- phase 1: connect ----------------------------------------------------------------

    def connect(self) -> None:
        """Open the socket and complete ApiVersions and SASL. Blocking; raises on failure."""
        config = self.config
        sock = open_socket(
            self.host, self.port, timeout_ms=config.connect_timeout_ms,
            ssl_context=config.ssl_context(),
            send_buffer_bytes=config.send_buffer_bytes,
            receive_buffer_bytes=config.receive_buffer_bytes)
        self.sock = sock
        self.closed_error = None
        try:
            self._exchange_api_versions()
            if config.security_protocol.uses_sasl:
                self._authenticate()
            sock.setblocking(False)
        except TimeoutError as exc:
            self.close(None)
            raise KafkaTimeoutError(
                f"broker {self.address} did not answer within {config.connect_timeout_ms} ms "
                "while connecting; if the listener expects TLS or SASL, check "
                "security.protocol") from exc
        except BaseException:
            self.close(None)
            raise

    def _roundtrip(self, request: Request, version: int) -> ApiMessage:
        """Blocking request/response, used only while connecting."""
        assert self.sock is not None
        _, frame = self.protocol.send_request(request, version)
        try:
            self.sock.sendall(frame)
            while True:
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
            if "CERTIFICATE" in (exc.reason or ""):
                # With TLS 1.3 the broker judges our certificate after the handshake, so its
                # refusal arrives as an alert on the first read rather than in connect.
                raise AuthenticationError(
                    f"broker {self.address} refused our TLS client certificate "
                    f"({exc.reason}): this listener requires one it trusts; set "
                    "ssl.keystore.location to a PEM file with the client key and certificate"
                ) from exc
            raise NetworkError(f"TLS with {self.address} failed while connecting: {exc}") from exc
        except OSError as exc:
            raise NetworkError(f"connection to {self.address} failed while connecting: "
                               f"{exc}") from exc

    def _exchange_api_versions(self) -> None:
        ours = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        request = ApiVersionsRequest(client_software_name="kafka-ds",
                                     client_software_version=__version__)
        response = self._roundtrip(request, ours[1])
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The v0 answer lists the broker's ApiVersions range: retry within it.
            theirs = {item.api_key: item.max_version for item in response.api_keys}
            version = min(ours[1], theirs.get(ApiKey.API_VERSIONS, 0))
            response = self._roundtrip(request, version)
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

    def _authenticate(self) -> None:
        sasl = self.config.sasl
        assert sasl is not None
        mechanism = sasl.new_mechanism()
        handshake = self._roundtrip(SaslHandshakeRequest(mechanism=mechanism.name),
                                    self.version_for(ApiKey.SASL_HANDSHAKE))
        if handshake.error_code:  # type: ignore[attr-defined]
            enabled = ", ".join(handshake.mechanisms) or "none"  # type: ignore[attr-defined]
            raise AuthenticationError(
                f"broker {self.address} does not accept SASL mechanism {mechanism.name} "
                f"(enabled there: {enabled}); set sasl.mechanism to one of them")
        version = self.version_for(ApiKey.SASL_AUTHENTICATE)
        message: bytes | None = mechanism.first_message()
        while message is not None:
            reply = self._roundtrip(SaslAuthenticateRequest(auth_bytes=message), version)
            if reply.error_code:  # type: ignore[attr-defined]
                who = f" as {sasl.username!r}" if sasl.username else ""
                raise AuthenticationError(
                    f"SASL {mechanism.name} authentication{who} with broker {self.address} "
                    f"failed: {reply.error_message or 'no reason given'}. "  # type: ignore[attr-defined]
                    "Check the username and password (sasl.jaas.config)")
            try:
                message = mechanism.step(bytes(reply.auth_bytes))  # type: ignore[attr-defined]
            except KafkaDsError as exc:
                raise AuthenticationError(f"SASL with broker {self.address}: {exc}") from exc

    def version_for(self, api_key: int) -> int:
        """The negotiated version of ``api_key``, or a clear error if there is none."""
        return require(self.api_versions, api_key, self.address,
                       SUPPORTED_VERSIONS[api_key], self.api_ranges.get(api_key))

    # --- phase 2: pipelined requests ------------------------------------------------------

    def send(self, request: Request, version: int | None = None, *,
             expect_response: bool = True, timeout_ms: int | None = None) -> RequestFuture[Any]:
        """Queue ``request``; the future completes with its decoded response.

        With ``expect_response=False`` (Produce with acks=0) the future completes with None
        once the bytes are handed to the socket.
        """
        future: RequestFuture[Any] = RequestFuture()
        if self.sock is None:
            future.fail(self.closed_error
                        or NetworkError(f"connection to {self.address} is closed"))
            return future
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
        return self._waiting[0][1] if self._waiting else None

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
        self._waiting.clear()
        self._send_queue.clear()
        if error is not None and pending:
            log.info("connection to node %s (%s) closed with %d requests pending: %s",
                     self.node_id, self.address, len(pending), error)
        for future in pending:
            future.fail(failure)
