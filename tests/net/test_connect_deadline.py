"""One deadline for the whole connect: TCP, TLS, ApiVersions and SASL together.

A real broker cannot be made to trickle bytes on demand, so these peers are small local
servers. Each sends a byte every 100 ms (well inside the 1 s connect timeout, which used to
restart with every read) and gives up after TRICKLE_S; a connect that waits for them fails
with the wrong error long after the timeout, so the tests fail rather than hang.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from kafka_ds.net.broker_conn import BrokerConnection
from kafka_ds.net.pool import NetworkClient
from kafka_ds.net.security import ConnectionConfig, SaslConfig, SecurityProtocol
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import KafkaTimeoutError
from kafka_ds.protocol.header import write_response_header
from kafka_ds.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from kafka_ds.protocol.schema import encode

TIMEOUT_MS = 1000
TRICKLE_S = 15.0


def _read_request(conn: socket.socket) -> tuple[int, int, int]:
    """Read one request frame; returns its api key, api version and correlation id."""
    size = struct.unpack(">i", _read_exactly(conn, 4))[0]
    body = _read_exactly(conn, size)
    api_key, version, correlation_id = struct.unpack_from(">hhi", body)
    return api_key, version, correlation_id


def _read_exactly(conn: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise ConnectionError("client went away")
        data += chunk
    return data


def _api_versions_answer(version: int, correlation_id: int) -> bytes:
    keys = [ApiVersion(api_key=18, min_version=0, max_version=4),
            ApiVersion(api_key=17, min_version=0, max_version=1),
            ApiVersion(api_key=36, min_version=0, max_version=2)]
    out = bytearray()
    write_response_header(out, correlation_id, False)  # ApiVersions: header v0 always
    out += encode(ApiVersionsResponse(api_keys=keys), version)
    return struct.pack(">i", len(out)) + bytes(out)


class _Trickler:
    """Accepts one connection; answers ``answer_first`` requests properly, then trickles."""

    def __init__(self, answer_first: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.answer_first = answer_first
        self.trickled = 0
        self.stalled_api_key = -1
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            try:
                for _ in range(self.answer_first):
                    _, version, correlation_id = _read_request(conn)
                    conn.sendall(_api_versions_answer(version, correlation_id))
                self.stalled_api_key = _read_request(conn)[0]
                # A response frame that announces 1000 bytes and never finishes arriving.
                frame = struct.pack(">i", 1000) + bytes(1000)
                stop_at = time.monotonic() + TRICKLE_S
                for byte in frame:
                    if time.monotonic() > stop_at:
                        break
                    conn.sendall(bytes([byte]))
                    self.trickled += 1
                    time.sleep(0.1)
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def trickler(request: pytest.FixtureRequest) -> Iterator[_Trickler]:
    server = _Trickler(request.param)
    yield server
    server.close()


@pytest.mark.parametrize(("trickler", "config", "stalled_api_key"), [
    (0, ConnectionConfig(connect_timeout_ms=TIMEOUT_MS), ApiKey.API_VERSIONS),
    (1, ConnectionConfig(connect_timeout_ms=TIMEOUT_MS,
                         security_protocol=SecurityProtocol.SASL_PLAINTEXT,
                         sasl=SaslConfig("PLAIN", "alice", "pw")), ApiKey.SASL_HANDSHAKE),
], ids=["during-api-versions", "during-sasl"], indirect=["trickler"])
def test_a_peer_trickling_bytes_cannot_stretch_the_connect_timeout(
        trickler: _Trickler, config: ConnectionConfig, stalled_api_key: int) -> None:
    connection = BrokerConnection(-1, "127.0.0.1", trickler.port, config)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=f"{TIMEOUT_MS} ms"):
        connection.connect()
    elapsed_s = time.monotonic() - started
    # The peer did trickle, in the phase this case is about: the fault fired.
    assert trickler.trickled > 0 and trickler.stalled_api_key == stalled_api_key
    # One timeout, not one per read: far below the trickle's own duration.
    assert elapsed_s < TRICKLE_S / 3, elapsed_s
    assert not connection.connected


class _Stall:
    """A peer that stalls a connect in one phase: ``tcp`` never accepts (its one-slot
    backlog is taken by a filler connection, so the kernel drops our SYNs), the others
    accept and then answer ``answer_first`` requests before going silent. Records what it
    received, so each test can show its stall was where it meant it to be."""

    def __init__(self, phase: str, answer_first: int = 0) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(0)
        self.port = self.server.getsockname()[1]
        self.filler: socket.socket | None = None
        self.first_bytes = b""
        self.stalled_api_key = -1
        self.accepted = 0
        if phase == "tcp":
            self.filler = socket.create_connection(("127.0.0.1", self.port))
            return
        self.answer_first = answer_first
        threading.Thread(target=self._serve, args=(phase,), daemon=True).start()

    def _serve(self, phase: str) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        self.accepted += 1
        with conn:
            try:
                if phase == "tls":
                    self.first_bytes = conn.recv(5)  # a TLS record header: 0x16 = handshake
                else:
                    for _ in range(self.answer_first):
                        _, version, correlation_id = _read_request(conn)
                        conn.sendall(_api_versions_answer(version, correlation_id))
                    self.stalled_api_key = _read_request(conn)[0]
                while conn.recv(4096):  # read (never answer) until the client gives up
                    pass
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()
        if self.filler is not None:
            self.filler.close()


_SASL = ConnectionConfig(connect_timeout_ms=TIMEOUT_MS,
                         security_protocol=SecurityProtocol.SASL_PLAINTEXT,
                         sasl=SaslConfig("PLAIN", "alice", "pw"))


@pytest.mark.parametrize(("phase", "config", "answer_first", "message"), [
    ("tcp", ConnectionConfig(connect_timeout_ms=TIMEOUT_MS), 0,
     r"connecting to 127\.0\.0\.1:\d+ timed out after 1000 ms "
     r"\(socket\.connection\.setup\.timeout\.ms\)"),
    ("tls", ConnectionConfig(connect_timeout_ms=TIMEOUT_MS,
                             security_protocol=SecurityProtocol.SSL), 0,
     r"TLS handshake with 127\.0\.0\.1:\d+ timed out after 1000 ms: is this listener "
     r"plaintext\? Check security\.protocol"),
    ("api-versions", ConnectionConfig(connect_timeout_ms=TIMEOUT_MS), 0,
     r"broker 127\.0\.0\.1:\d+ did not finish connecting within 1000 ms "
     r"\(socket\.connection\.setup\.timeout\.ms\)"),
    ("sasl", _SASL, 1, r"did not finish connecting within 1000 ms"),
])
def test_a_stalled_connect_times_out_in_the_background_with_the_same_error(
        phase: str, config: ConnectionConfig, answer_first: int, message: str) -> None:
    """Through ``NetworkClient.ready`` and ``poll``: the connect starts without waiting, the
    selector loop drives it, and the one deadline ends it with the error of its phase; the
    blocking ``connection()`` then raises the same error for the next attempt."""
    peer = _Stall(phase, answer_first)
    try:
        with NetworkClient(f"127.0.0.1:{peer.port}", config) as client:
            assert client.ready(-1) is False  # returned without waiting for the peer
            assert client.connecting_count() == 1 and client.connect_failure(-1) is None
            client.poll_until(lambda: client.connecting_count() == 0, TIMEOUT_MS * 20)
            failure = client.connect_failure(-1)
            assert isinstance(failure, KafkaTimeoutError), failure
            assert re.search(message, str(failure)), failure
            assert client.connect_failure(-1) is None  # each failure is reported once
            assert not client.is_connected(-1)
        # The stall was in the phase this case is about: the fault fired.
        if phase == "tcp":
            assert peer.accepted == 0
        elif phase == "tls":
            assert peer.first_bytes[:1] == b"\x16"
        else:
            assert peer.stalled_api_key == (
                ApiKey.API_VERSIONS if phase == "api-versions" else ApiKey.SASL_HANDSHAKE)
    finally:
        peer.close()
    # The blocking path: the same error, from a fresh peer stalled the same way.
    peer = _Stall(phase, answer_first)
    try:
        with NetworkClient(f"127.0.0.1:{peer.port}", config) as client, \
                pytest.raises(KafkaTimeoutError, match=message):
            client.connection(-1)
    finally:
        peer.close()
