"""A deliberately tiny Kafka wire client for harness housekeeping (stdlib only).

The harness must tell whether a broker is really serving, where partition leaders are, and
create topics quickly, without depending on kafka_ds (the code under test) or on a
third-party client, and without paying a JVM start (2-3 s) per call. Two fixed,
non-flexible API versions cover that, and both are served by Kafka 3.9 and 4.x (Kafka 4.0
dropped older versions of these APIs, KIP-896):

* Metadata v4 (API key 3): live (unfenced) brokers, and per partition: leader, replicas, ISR.
* CreateTopics v2 (API key 19): create a topic with partitions, replication and configs.

Only PLAINTEXT is spoken; the harness always talks to the PLAINTEXT listener.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

_METADATA, _METADATA_V = 3, 4
_CREATE_TOPICS, _CREATE_TOPICS_V = 19, 2
_CLIENT_ID = b"kafka-ds-harness"


class WireError(RuntimeError):
    """The broker answered with a Kafka error code (name and number in the message)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# The few error codes the harness reacts to; others are reported by number.
ERROR_NAMES = {3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
               7: "REQUEST_TIMED_OUT", 36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS",
               38: "INVALID_REPLICATION_FACTOR", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER",
               42: "INVALID_REQUEST", 51: "CONCURRENT_TRANSACTIONS"}
TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1 while there is no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass
class Metadata:
    brokers: dict[int, tuple[str, int]]  # node id -> (host, port) of the queried listener
    cluster_id: str | None
    controller_id: int
    topics: dict[str, list[PartitionInfo]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.take(">i") for _ in range(max(self.take(">i"), 0)))


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        buf += chunk
    return bytes(buf)


def _request(host: str, port: int, api_key: int, api_version: int, body: bytes,
             timeout_s: float) -> _Reader:
    header = struct.pack(">hhi", api_key, api_version, 1) + _string(_CLIENT_ID.decode())
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        payload = header + body
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        reader = _Reader(_recv_exact(sock, size))
    if reader.take(">i") != 1:
        raise ConnectionError("correlation id mismatch")
    return reader


def metadata(host: str, port: int, topics: list[str] | None = None,
             timeout_s: float = 5.0) -> Metadata:
    """Metadata v4 from one broker. ``topics=None`` asks for no topics (cheapest)."""
    names = topics or []
    body = struct.pack(">i", len(names)) + b"".join(_string(t) for t in names)
    body += b"\x00"  # allow_auto_topic_creation = false
    r = _request(host, port, _METADATA, _METADATA_V, body, timeout_s)
    r.take(">i")  # throttle_time_ms
    brokers = {}
    for _ in range(r.take(">i")):
        node_id = r.take(">i")
        bhost = r.string() or ""
        bport = r.take(">i")
        r.string()  # rack
        brokers[node_id] = (bhost, bport)
    md = Metadata(brokers=brokers, cluster_id=r.string(), controller_id=r.take(">i"))
    for _ in range(r.take(">i")):
        error = r.take(">h")
        name = r.string() or ""
        r.take(">b")  # is_internal
        parts = []
        for _ in range(r.take(">i")):
            perr = r.take(">h")
            index = r.take(">i")
            leader = r.take(">i")
            parts.append(PartitionInfo(index, leader, r.int32s(), r.int32s(), perr))
        if error:
            md.topic_errors[name] = error
        else:
            md.topics[name] = sorted(parts, key=lambda p: p.partition)
    return md


def create_topic(host: str, port: int, name: str, partitions: int, replication_factor: int,
                 config: dict[str, str] | None = None, timeout_s: float = 30.0) -> None:
    """CreateTopics v2 for one topic; raises WireError (e.g. TOPIC_ALREADY_EXISTS)."""
    configs = config or {}
    body = struct.pack(">i", 1) + _string(name)
    body += struct.pack(">ihi", partitions, replication_factor, 0)  # no manual assignment
    body += struct.pack(">i", len(configs))
    body += b"".join(_string(k) + _string(str(v)) for k, v in configs.items())
    body += struct.pack(">ib", int(timeout_s * 1000), 0)  # timeout_ms, validate_only=false
    r = _request(host, port, _CREATE_TOPICS, _CREATE_TOPICS_V, body, timeout_s + 5.0)
    r.take(">i")  # throttle_time_ms
    for _ in range(r.take(">i")):
        topic = r.string()
        code = r.take(">h")
        message = r.string()
        if code:
            label = ERROR_NAMES.get(code, f"error {code}")
            raise WireError(f"CreateTopics {topic!r} failed: {label}: {message}", code)
