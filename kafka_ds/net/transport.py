"""Opening a TCP or TLS socket to a broker without blocking, with errors that say what failed.

Layer: net (stdlib ``socket``/``ssl``).

``open_socket`` starts a connect and returns a ``SocketSetup``: a small state machine that a
selector loop advances (``on_event`` whenever the socket is ready for what ``wants_write``
says it waits for). The socket is non-blocking from the start: the TCP connect is
``connect_ex`` answered by EINPROGRESS and completed when the socket turns writable (its
``SO_ERROR`` says how it went; a name with several addresses tries each in turn), then the
TLS handshake is stepped on each readiness (``SSLWantReadError``/``SSLWantWriteError`` say
which way to wait). A stalled peer therefore holds up nothing but its own connection; the
deadline (``socket.connection.setup.timeout.ms``, one for TCP, TLS, and the ApiVersions and
SASL exchange that ``BrokerConnection`` runs next) is enforced by the loop, which asks
``timeout_error()`` for the message naming the phase that stalled. Only name resolution
blocks (``getaddrinfo``), as in the Java client.

Every OSError becomes a ``NetworkError`` naming the address and the likely fix; a certificate
the CA does not vouch for, or a broker refusing ours, becomes an ``AuthenticationError``,
because retrying cannot fix configuration.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import ssl

from kafka_ds.protocol.errors import AuthenticationError, KafkaTimeoutError, NetworkError

_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, errno.EALREADY})


def open_socket(host: str, port: int, *, timeout_ms: int,
                ssl_context: ssl.SSLContext | None,
                send_buffer_bytes: int | None = None,
                receive_buffer_bytes: int | None = None) -> SocketSetup:
    """Start connecting to ``host:port`` (TLS when ``ssl_context`` is given); never waits for
    the peer. Raises ``NetworkError`` at once when the name does not resolve or no address
    can even be tried."""
    return SocketSetup(host, port, timeout_ms=timeout_ms, ssl_context=ssl_context,
                       send_buffer_bytes=send_buffer_bytes,
                       receive_buffer_bytes=receive_buffer_bytes)


class SocketSetup:
    """One socket on its way to connected (and TLS-handshaken); see the module docstring.

    ``sock`` is the socket to watch (it changes when the next address is tried, and becomes
    an ``SSLSocket`` on the same file descriptor once TLS starts); ``ready`` is the finished
    socket, non-blocking, or None while the setup goes on. Errors are raised by the
    constructor and ``on_event``; the caller closes.
    """

    def __init__(self, host: str, port: int, *, timeout_ms: int,
                 ssl_context: ssl.SSLContext | None, send_buffer_bytes: int | None,
                 receive_buffer_bytes: int | None) -> None:
        self.host = host
        self.address = f"{host}:{port}"
        self.timeout_ms = timeout_ms
        self._ssl_context = ssl_context
        self._buffer_sizes = (send_buffer_bytes, receive_buffer_bytes)
        self.sock: socket.socket | None = None
        self.ready: socket.socket | None = None
        self.in_tls = False
        self.wants_write = True
        try:
            self._addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise NetworkError(f"cannot resolve broker host {host!r}: {exc.strerror}") from exc
        self._next_address(None)

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def _next_address(self, last_error: OSError | None) -> None:
        """Start the TCP connect to the next address; raise the last error if none is left."""
        while self._addresses:
            family, kind, proto, _, sockaddr = self._addresses.pop(0)
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                self._configure(sock)
                code = sock.connect_ex(sockaddr)
            except OSError as exc:
                sock.close()
                last_error = exc
                continue
            self.sock = sock
            if code == 0:
                self._tcp_connected()
                return
            if code in _IN_PROGRESS:
                self.wants_write = True  # a non-blocking connect completes as writable
                return
            sock.close()
            self.sock = None
            last_error = OSError(code, os.strerror(code))
        raise self._connect_error(last_error or OSError(errno.EADDRNOTAVAIL,
                                                         "no address to connect to"))

    def _configure(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        send_buffer_bytes, receive_buffer_bytes = self._buffer_sizes
        if send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)

    def _connect_error(self, exc: OSError) -> NetworkError:
        if exc.errno == errno.ECONNREFUSED:
            error = NetworkError(f"connection to {self.address} refused: no broker is listening "
                                 "there; check bootstrap.servers and the port of the listener")
        else:
            error = NetworkError(f"cannot connect to {self.address}: {exc.strerror or exc}")
        error.__cause__ = exc
        return error

    def on_event(self) -> None:
        """The socket is ready for what ``wants_write`` asked: take the next step."""
        if self.ready is not None or self.sock is None:
            return
        if self.in_tls:
            self._step_handshake()
            return
        code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            self._tcp_connected()
            return
        self.sock.close()
        self.sock = None
        self._next_address(OSError(code, os.strerror(code)))

    def _tcp_connected(self) -> None:
        assert self.sock is not None
        if self._ssl_context is None:
            self.ready = self.sock
            return
        # The SSLSocket takes over the file descriptor: a selector watching it by number
        # keeps working.
        self.sock = self._ssl_context.wrap_socket(self.sock, server_hostname=self.host,
                                                  do_handshake_on_connect=False)
        self.in_tls = True
        self._step_handshake()

    def _step_handshake(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.wants_write = False
            return
        except ssl.SSLWantWriteError:
            self.wants_write = True
            return
        except OSError as exc:  # ssl.SSLError included
            raise handshake_error(self.address, exc) from exc
        self.ready = self.sock

    def timeout_error(self) -> KafkaTimeoutError:
        """The error for a deadline that passed during this setup, naming the phase."""
        if self.in_tls:
            return KafkaTimeoutError(
                f"TLS handshake with {self.address} timed out after {self.timeout_ms} ms: is "
                "this listener plaintext? Check security.protocol")
        return KafkaTimeoutError(f"connecting to {self.address} timed out after "
                                 f"{self.timeout_ms} ms (socket.connection.setup.timeout.ms)")

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None and sock is not self.ready:
            with contextlib.suppress(OSError):
                sock.close()


def handshake_error(address: str, exc: OSError) -> NetworkError | AuthenticationError:
    """What a failed TLS handshake with ``address`` means, and what to fix."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        # OpenSSL's verify message may end in a period ("... not valid for 'host'.").
        reason = (exc.verify_message or "certificate verification failed").rstrip(".")
        return AuthenticationError(
            f"TLS certificate of {address} rejected: {reason}. Trust the broker's "
            "CA (ssl.truststore.location), or connect by a name the certificate lists; "
            "hostname checks are off only if ssl.endpoint.identification.algorithm is empty")
    if isinstance(exc, ssl.SSLError):
        if refuses_client_certificate(exc):
            return client_certificate_refused(address, exc)
        return NetworkError(
            f"TLS handshake with {address} failed ({exc.reason or exc}): is this a TLS "
            "listener, and does it require a client certificate (ssl.keystore.location)?")
    hint = " (the broker closed the connection: is this a TLS listener?)" if exc.errno in (
        errno.ECONNRESET, errno.EPIPE, None) else ""
    return NetworkError(f"TLS handshake with {address} failed: {exc}{hint}")


# TLS alerts by which a server says it will not accept our certificate (or the lack of one).
# Under TLS 1.3 they arrive after the client's side of the handshake is done, on the first
# read; under TLS 1.2 during the handshake. Either way no retry can change the answer.
_CLIENT_CERTIFICATE_ALERTS = frozenset({
    "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED", "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "TLSV1_ALERT_UNKNOWN_CA", "TLSV1_ALERT_ACCESS_DENIED",
})


def refuses_client_certificate(exc: ssl.SSLError) -> bool:
    """True when ``exc`` is the server's alert refusing our client certificate."""
    return (exc.reason or "") in _CLIENT_CERTIFICATE_ALERTS


def client_certificate_refused(address: str, exc: ssl.SSLError) -> AuthenticationError:
    return AuthenticationError(
        f"broker {address} refused our TLS client certificate ({exc.reason}): this listener "
        "requires one it trusts; set ssl.keystore.location to a PEM file with the client key "
        "and a certificate signed by a CA the broker trusts (the Java client fails the same "
        "way, with SslAuthenticationException)")
