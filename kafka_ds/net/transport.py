"""Opening a TCP or TLS socket to a broker, with errors that say what went wrong.

Layer: net (stdlib ``socket``/``ssl``).

``open_socket`` connects and completes the TLS handshake while the socket is still blocking,
both within one deadline (``timeout_ms`` covers TCP and TLS together, not each step or each
read), then hands a connected socket to ``BrokerConnection``, which spends what is left of
the connect timeout on ApiVersions and SASL and then switches it to non-blocking for pipelined
traffic. Every OSError becomes a ``NetworkError`` naming the address and the likely fix; a
certificate the CA does not vouch for, or a broker refusing ours, becomes an
``AuthenticationError``, because retrying cannot fix configuration.
"""

from __future__ import annotations

import errno
import socket
import ssl
import time

from kafka_ds.protocol.errors import AuthenticationError, KafkaTimeoutError, NetworkError


def open_socket(host: str, port: int, *, timeout_ms: int,
                ssl_context: ssl.SSLContext | None,
                send_buffer_bytes: int | None = None,
                receive_buffer_bytes: int | None = None) -> socket.socket:
    """Connect to ``host:port`` (and handshake TLS when ``ssl_context`` is given)."""
    address = f"{host}:{port}"
    timeout_s = timeout_ms / 1000
    deadline_s = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError as exc:
        raise KafkaTimeoutError(f"connecting to {address} timed out after {timeout_ms} ms "
                                "(socket.connection.setup.timeout.ms)") from exc
    except ConnectionRefusedError as exc:
        raise NetworkError(f"connection to {address} refused: no broker is listening there; "
                           "check bootstrap.servers and the port of the listener") from exc
    except socket.gaierror as exc:
        raise NetworkError(f"cannot resolve broker host {host!r}: {exc.strerror}") from exc
    except OSError as exc:
        raise NetworkError(f"cannot connect to {address}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        if ssl_context is None:
            return sock
        # The handshake gets what the TCP connect left; CPython bounds a blocking handshake
        # as a whole by the socket timeout, so a peer trickling bytes cannot stretch it.
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise KafkaTimeoutError(f"connecting to {address} timed out after {timeout_ms} ms "
                                    "(socket.connection.setup.timeout.ms)")
        sock.settimeout(remaining_s)
        return _handshake(sock, host, address, ssl_context, timeout_ms)
    except BaseException:
        sock.close()
        raise


def _handshake(sock: socket.socket, host: str, address: str, context: ssl.SSLContext,
               timeout_ms: int) -> ssl.SSLSocket:
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        raise AuthenticationError(
            f"TLS certificate of {address} rejected: {exc.verify_message}. Trust the broker's "
            "CA (ssl.truststore.location), or connect by a name the certificate lists; "
            "hostname checks are off only if ssl.endpoint.identification.algorithm is empty"
        ) from exc
    except TimeoutError as exc:
        raise KafkaTimeoutError(
            f"TLS handshake with {address} timed out after {timeout_ms} ms: is this listener "
            "plaintext? Check security.protocol") from exc
    except ssl.SSLError as exc:
        if refuses_client_certificate(exc):
            raise client_certificate_refused(address, exc) from exc
        raise NetworkError(
            f"TLS handshake with {address} failed ({exc.reason or exc}): is this a TLS "
            "listener, and does it require a client certificate (ssl.keystore.location)?"
        ) from exc
    except OSError as exc:
        hint = " (the broker closed the connection: is this a TLS listener?)" if exc.errno in (
            errno.ECONNRESET, errno.EPIPE, None) else ""
        raise NetworkError(f"TLS handshake with {address} failed: {exc}{hint}") from exc


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
