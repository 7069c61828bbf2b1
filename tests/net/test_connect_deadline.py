"""One deadline for the whole connect: TCP, TLS, ApiVersions and SASL together.

A real broker cannot be made to trickle bytes on demand, so these peers are small local
servers. Each sends a byte every 100 ms (well inside the 1 s connect timeout, which used to
restart with every read) and gives up after TRICKLE_S; a connect that waits for them fails
with the wrong error long after the timeout, so the tests fail rather than hang.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from kafka_ds.net.broker_conn import BrokerConnection
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
