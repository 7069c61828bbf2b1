"""A TCP proxy for fault injection between a Kafka client and a broker, and a cluster behind it.

``KafkaProxy`` forwards bytes both ways and understands Kafka's framing (an int32 size per
request and response, and the request header's API key), so faults land on message
boundaries, where real ones hurt most, and can target one API (Produce, Fetch, EndTxn,
Metadata ...) while the others keep working:

* ``cut_after_responses(n)``: the next ``n`` responses are swallowed and their connection
  closed: the broker *did* process the request, the client never hears so (the classic
  duplicate-producing case for a non-idempotent producer).
* ``drop_responses(n)``: the next ``n`` responses are swallowed and the connection stays
  open: the client waits until its request times out (a reply lost on the way).
* ``cut_mid_response(n)``: forward the first half of the next ``n`` responses, then close
  both sides: the client reads a truncated frame.
* ``cut_mid_request(n)``: forward only the first half of the next ``n`` requests, then close
  both sides: the broker never sees a whole request.
* ``blackhole(seconds)``: swallow every response for a while (connections stay open; the
  client times out on its own).
* ``rewrite_sequences(n, delta)``: add ``delta`` to the base sequence of the next ``n``
  Produce batches (the CRC is recomputed): the broker sees a sequence gap the client does
  not know about, and answers OUT_OF_ORDER_SEQUENCE_NUMBER.
* ``delay(ms)``: hold each chunk for ``ms`` before forwarding.
* ``hold_requests(seconds, n)``: hold the next ``n`` requests, and everything their
  connection sends after them, for ``seconds``, then forward them in order, even if the
  client has closed the connection meanwhile (its bytes were already on the way): a request
  the client gave up on reaches the broker late. The held connection's responses stay
  unanswered until then; other connections carry on.
* ``cut_all()``: close every connection now.
* ``mutate_responses(mutator, n)``: hand each response frame of the chosen APIs to
  ``mutator(frame, api_version)``; the next ``n`` frames it returns a ``Mutated`` for go to
  the client rewritten (``None``: not one it can damage, forwarded untouched). The fuzz tests
  use ``fetch_response_layout`` to find a Fetch response's fields and record batches.

Every fault takes ``api_keys``: the APIs it applies to (default: the proxy's ``api_keys``,
None meaning all). Responses are matched to requests in order, per connection; Produce
requests with acks=0 (no response) are recognised and skipped.

Tests count what *they* caused: ``snapshot()`` copies the counters, ``since(snapshot)`` gives
the difference (``swallowed(api_key)`` names the per-API count of swallowed responses).
``produced`` records every Produce batch header that went through (partition, producer id,
epoch, base sequence, record count), so a test can prove that a batch was resent as it was,
or renumbered, without trusting the client's own account.

``ProxiedKafkaCluster`` is a ``KafkaCluster`` with one more listener, ``PROXIED``, which each
node *advertises* at its proxy's port: a client that bootstraps from ``proxy_bootstrap()``
learns only proxy addresses from metadata, so every byte it exchanges goes through a proxy.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import crc32c

from .cluster import KafkaCluster, _free_ports

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
PRODUCE, FETCH, METADATA, INIT_PRODUCER_ID, END_TXN = 0, 1, 3, 22, 26
# A v2 record batch header: offsets of the fields the proxy reads or rewrites.
_CRC_AT, _ATTRIBUTES_AT, _PRODUCER_ID_AT, _EPOCH_AT, _SEQUENCE_AT, _COUNT_AT = \
    17, 21, 43, 51, 53, 57
_BATCH_HEADER_BYTES = 61


class ProducedBatch(NamedTuple):
    """One record batch of a Produce request, as it crossed the proxy."""

    topic: str  # the name, or the topic id's hex for Produce v13+
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


class _Reader:
    """Just enough of Kafka's primitive types to walk a Produce request or a Fetch response."""

    def __init__(self, buf: bytearray | bytes, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, fmt: str = ">h") -> int:
        """A string/bytes/array length: compact (uvarint - 1) when flexible."""
        return self.uvarint() - 1 if self.flexible else self.take(fmt)

    def string(self) -> str:
        size = self.length()
        text = bytes(self.buf[self.pos:self.pos + max(size, 0)]).decode("utf-8", "replace")
        self.pos += max(size, 0)
        return text

    def topic(self, version: int) -> str:
        """A topic in Produce and Fetch: its id in hex from version 13, else its name."""
        if version >= 13:
            topic_id = bytes(self.buf[self.pos:self.pos + 16]).hex()
            self.pos += 16
            return topic_id
        return self.string()

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.pos += self.uvarint()


def _produce_batches(frame: bytearray | bytes) -> Iterator[tuple[str, int, int]]:
    """(topic, partition, position of a batch header) for each record batch of a Produce
    request frame (size prefix included)."""
    version = _HEADER.unpack_from(frame, 4)[1]
    flexible = version >= 9
    reader = _Reader(frame, 4 + _HEADER.size, False)
    client_id_length = reader.take(">h")
    reader.pos += max(client_id_length, 0)
    reader.flexible = flexible
    reader.skip_tags()
    reader.string()  # transactional id (nullable)
    reader.take(">h")  # acks
    reader.take(">i")  # timeout
    for _ in range(reader.length(">i")):
        topic = reader.topic(version)
        for _ in range(reader.length(">i")):
            partition = reader.take(">i")
            size = reader.length(">i")
            end = reader.pos + max(size, 0)
            position = reader.pos
            while end - position >= _BATCH_HEADER_BYTES:
                yield topic, partition, position
                position += 12 + struct.unpack_from(">i", frame, position + 8)[0]
            reader.pos = end
            reader.skip_tags()
        reader.skip_tags()


def _produce_expects_response(frame: bytes) -> bool:
    """False for a Produce request with acks=0 (which gets no response)."""
    try:
        api_key, version, _ = _HEADER.unpack_from(frame, 4)
        if api_key != PRODUCE:
            return True
        reader = _Reader(frame, 4 + _HEADER.size, False)
        client_id_length = reader.take(">h")
        reader.pos += max(client_id_length, 0)
        reader.flexible = version >= 9
        reader.skip_tags()
        reader.string()
        return bool(reader.take(">h") != 0)
    except (struct.error, IndexError):
        return True


class Mutated(NamedTuple):
    """A response frame rewritten by a mutator (size prefix included) and what was done."""

    frame: bytes
    description: str


@dataclass
class FetchPartitionLayout:
    """Where one partition's fields sit in a Fetch response frame (byte positions)."""

    topic: str  # the name, or the topic id's hex for Fetch v13+
    partition: int
    partition_at: int
    error_code_at: int
    high_watermark_at: int
    records_length_at: int  # the records field's length (int32, or a uvarint when flexible)
    records_at: int
    records_end: int

    def batches(self, frame: bytes) -> list[tuple[int, int]]:
        """(start, end) of each complete record batch in the records, by their framing."""
        out, position = [], self.records_at
        while self.records_end - position >= 17:
            end = position + 12 + struct.unpack_from(">i", frame, position + 8)[0]
            if end > self.records_end or end < position + 17:
                break
            out.append((position, end))
            position = end
        return out


@dataclass
class FetchLayout:
    """A Fetch response frame's fields, found by walking it (``fetch_response_layout``)."""

    version: int
    flexible: bool
    throttle_at: int
    error_code_at: int
    topics_count_at: int
    partitions_count_at: list[int]
    partitions: list[FetchPartitionLayout]
    tags_at: int  # the top-level tagged fields (flexible versions), else the frame's end


def fetch_response_layout(frame: bytes, version: int) -> FetchLayout:
    """Walk a Fetch response (v7+) frame, size prefix included. Raises ``struct.error`` or
    ``IndexError`` on a frame it cannot walk."""
    flexible = version >= 12
    reader = _Reader(frame, 8, flexible)  # past the size and the correlation id
    reader.skip_tags()  # the flexible response header's
    throttle_at = reader.pos
    reader.take(">i")
    error_code_at = reader.pos
    reader.take(">h")
    reader.take(">i")  # session id
    topics_count_at = reader.pos
    partitions_count_at: list[int] = []
    partitions: list[FetchPartitionLayout] = []
    for _ in range(reader.length(">i")):
        topic = reader.topic(version)
        partitions_count_at.append(reader.pos)
        for _ in range(reader.length(">i")):
            partition_at = reader.pos
            partition = reader.take(">i")
            error_at = reader.pos
            reader.take(">h")
            high_watermark_at = reader.pos
            reader.pos += 8 + 8 + 8  # high watermark, last stable offset, log start offset
            for _ in range(max(reader.length(">i"), 0)):  # aborted transactions (nullable)
                reader.pos += 16
                reader.skip_tags()
            if version >= 11:
                reader.take(">i")  # preferred read replica
            records_length_at = reader.pos
            size = reader.length(">i")
            records_at = reader.pos
            reader.pos += max(size, 0)
            if reader.pos > len(frame):
                raise IndexError("records overrun the frame")
            partitions.append(FetchPartitionLayout(topic, partition, partition_at, error_at,
                                                   high_watermark_at, records_length_at,
                                                   records_at, reader.pos))
            reader.skip_tags()
        reader.skip_tags()
    return FetchLayout(version, flexible, throttle_at, error_code_at, topics_count_at,
                       partitions_count_at, partitions, reader.pos if flexible else len(frame))


@dataclass
class _Rule:
    """A fault armed for ``remaining`` more messages of the APIs in ``api_keys`` (None: all)."""

    remaining: int
    api_keys: frozenset[int] | None
    delta: int = 0
    mutator: Callable[[bytes, int], Mutated | None] | None = None
    seconds: float = 0.0

    def matches(self, api_key: int) -> bool:
        return self.remaining > 0 and (self.api_keys is None or api_key in self.api_keys)


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.requests = bytearray()  # client -> broker bytes not yet forwarded as frames
        self.responses = bytearray()
        # (API key, API version) of each awaited response, in order.
        self.pending: list[tuple[int, int]] = []
        self.closed = False
        # hold_requests: frames waiting (in order) until release_at; the client may leave
        # meanwhile (client_gone), the upstream side stays open until close_at.
        self.held: list[bytes] = []
        self.release_at = 0.0
        self.client_gone = False
        self.close_at = 0.0


_STAT_KEYS = ("connections", "requests", "responses", "cut_responses", "cut_requests",
              "cut_mid_responses", "dropped_responses", "rewritten_sequences",
              "swallowed_bytes", "swallowed_responses", "mutated_responses",
              "held_requests", "released_requests")


class KafkaProxy:
    """A threaded, frame-aware TCP proxy to one broker address; see the module docstring."""

    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0,
                 api_keys: set[int] | None = None) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.api_keys = api_keys
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", listen_port))
        self._server.listen(64)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._rules: dict[str, list[_Rule]] = {
            "cut_responses": [], "cut_requests": [], "cut_mid_responses": [],
            "dropped_responses": [], "rewritten_sequences": [], "mutated_responses": [],
            "held_requests": []}
        self._blackhole_until = 0.0
        self._blackhole_keys: frozenset[int] | None = None
        self._delay_s = 0.0
        self._running = False
        self._thread: threading.Thread | None = None
        # The counters above, plus "swallowed:<api key>": responses of that API swallowed
        # (cut, dropped or blackholed).
        self.stats: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self.produced: list[ProducedBatch] = []
        self.mutations: list[str] = []  # what each fired mutation did, in order

    # --- commands (any thread) --------------------------------------------------------------

    def _arm(self, kind: str, count: int, api_keys: set[int] | None, delta: int = 0,
             mutator: Callable[[bytes, int], Mutated | None] | None = None,
             seconds: float = 0.0) -> None:
        keys = self.api_keys if api_keys is None else api_keys
        with self._lock:
            self._rules[kind].append(_Rule(count, None if keys is None else frozenset(keys),
                                           delta, mutator, seconds))

    def cut_after_responses(self, count: int = 1, api_keys: set[int] | None = None) -> None:
        self._arm("cut_responses", count, api_keys)

    def cut_mid_request(self, count: int = 1, api_keys: set[int] | None = None) -> None:
        self._arm("cut_requests", count, api_keys)

    def cut_mid_response(self, count: int = 1, api_keys: set[int] | None = None) -> None:
        self._arm("cut_mid_responses", count, api_keys)

    def drop_responses(self, count: int = 1, api_keys: set[int] | None = None) -> None:
        self._arm("dropped_responses", count, api_keys)

    def rewrite_sequences(self, count: int = 1, delta: int = 1) -> None:
        self._arm("rewritten_sequences", count, {PRODUCE}, delta)

    def mutate_responses(self, mutator: Callable[[bytes, int], Mutated | None],
                         count: int = 1, api_keys: set[int] | None = None) -> None:
        """Rewrite the next ``count`` responses ``mutator`` accepts (see the module doc)."""
        self._arm("mutated_responses", count, api_keys, mutator=mutator)

    def hold_requests(self, seconds: float, count: int = 1,
                      api_keys: set[int] | None = None) -> None:
        """Deliver the next ``count`` requests (and what follows each on its connection)
        ``seconds`` late, even after their client closed the connection."""
        self._arm("held_requests", count, api_keys, seconds=seconds)

    def blackhole(self, seconds: float, api_keys: set[int] | None = None) -> None:
        keys = self.api_keys if api_keys is None else api_keys
        with self._lock:
            self._blackhole_until = time.monotonic() + seconds
            self._blackhole_keys = None if keys is None else frozenset(keys)

    def delay(self, ms: float) -> None:
        with self._lock:
            self._delay_s = ms / 1000

    def cut_all(self) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            self._close(link)

    def reset(self) -> None:
        """Disarm every fault (counters and ``produced`` stay: use ``snapshot``). Held
        requests go upstream now rather than during the next test."""
        with self._lock:
            for rules in self._rules.values():
                rules.clear()
            self._blackhole_until = 0.0
            self._delay_s = 0.0
            for link in self._links:
                link.release_at = 0.0

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.stats)

    def since(self, snapshot: dict[str, int]) -> dict[str, int]:
        """What happened since ``snapshot()``: each counter's growth."""
        with self._lock:
            return {key: value - snapshot.get(key, 0) for key, value in self.stats.items()}

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> KafkaProxy:
        self._running = True
        self._thread = threading.Thread(target=self._loop, name=f"kafka-proxy-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(5)
        self.cut_all()
        self._server.close()

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._server, selectors.EVENT_READ, None)
        registered: dict[int, socket.socket] = {}
        while self._running:
            with self._lock:
                links = [link for link in self._links if not link.closed]
                self._links = links
            wanted = {}
            for link in links:
                if not link.client_gone:
                    wanted[link.client.fileno()] = (link.client, link)
                wanted[link.upstream.fileno()] = (link.upstream, link)
            for fd in list(registered):
                if fd not in wanted or registered[fd] is not wanted[fd][0]:
                    try:
                        selector.unregister(registered.pop(fd))
                    except (KeyError, ValueError, OSError):
                        registered.pop(fd, None)
            for fd, (sock, link) in wanted.items():
                if fd not in registered and fd >= 0:
                    selector.register(sock, selectors.EVENT_READ, link)
                    registered[fd] = sock
            for key, _ in selector.select(0.05):
                if key.data is None:
                    self._accept()
                    continue
                link = key.data
                if link.closed:
                    continue
                try:
                    data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if not data:
                    if key.fileobj is link.client and link.held:
                        link.client_gone = True  # its held requests still go upstream
                        continue
                    self._close(link)
                    continue
                if key.fileobj is link.client:
                    self._from_client(link, data)
                else:
                    self._from_broker(link, data)
            self._release_held(links)
        selector.close()

    def _release_held(self, links: list[_Link]) -> None:
        now = time.monotonic()
        for link in links:
            if link.held and now >= link.release_at and not link.closed:
                frames, link.held = link.held, []
                with self._lock:
                    self.stats["released_requests"] += len(frames)
                for frame in frames:
                    if not self._send(link, link.upstream, frame):
                        break
                if link.client_gone:
                    link.close_at = now + 2.0  # let the broker read them before the FIN
            elif link.client_gone and not link.held and now >= link.close_at:
                self._close(link)

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(True)
        with self._lock:
            self._links.append(_Link(client, upstream))
            self.stats["connections"] += 1

    def _close(self, link: _Link) -> None:
        if link.closed:
            return
        link.closed = True
        for sock in (link.client, link.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _fire(self, kind: str, api_key: int) -> _Rule | None:
        """(Under the lock) consume one use of the first armed ``kind`` rule matching."""
        for rule in self._rules[kind]:
            if rule.matches(api_key):
                rule.remaining -= 1
                self.stats[kind] += 1
                return rule
        return None

    def _from_client(self, link: _Link, data: bytes) -> None:
        link.requests += data
        for frame in _whole_frames(link.requests):
            api_key = _HEADER.unpack_from(frame, 4)[0] if len(frame) >= 12 else -1
            with self._lock:
                self.stats["requests"] += 1
                cut = self._fire("cut_requests", api_key) is not None
                delay = self._delay_s
            if cut:
                self._send(link, link.upstream, frame[:max(4, len(frame) // 2)])
                self._close(link)
                return
            if api_key == PRODUCE:
                frame = self._inspect_produce(frame)
            if delay:
                time.sleep(delay)
            if _produce_expects_response(frame):
                version = _HEADER.unpack_from(frame, 4)[1] if len(frame) >= 12 else -1
                link.pending.append((api_key, version))
            rule = None
            if not link.held:
                with self._lock:
                    rule = self._fire("held_requests", api_key)
                if rule is not None:
                    link.release_at = time.monotonic() + rule.seconds
            if link.held or rule is not None:
                link.held.append(frame)  # after a held frame, the rest waits behind it
                continue
            if not self._send(link, link.upstream, frame):
                return

    def _inspect_produce(self, frame: bytes) -> bytes:
        """Record the batches of a Produce request, rewriting sequences if armed."""
        out = bytearray(frame)
        try:
            for topic, partition, at in _produce_batches(out):
                if out[at + 16] != 2:
                    continue  # magic 0/1: no producer fields
                with self._lock:
                    rule = self._fire("rewritten_sequences", PRODUCE)
                if rule is not None:
                    sequence = struct.unpack_from(">i", out, at + _SEQUENCE_AT)[0]
                    struct.pack_into(">i", out, at + _SEQUENCE_AT, sequence + rule.delta)
                    end = at + 12 + struct.unpack_from(">i", out, at + 8)[0]
                    struct.pack_into(">I", out, at + _CRC_AT,
                                     crc32c.crc32c(bytes(out[at + _ATTRIBUTES_AT:end])))
                producer_id, epoch, sequence, count = struct.unpack_from(
                    ">qhii", out, at + _PRODUCER_ID_AT)
                self.produced.append(ProducedBatch(topic, partition, producer_id, epoch,
                                                   sequence, count))
        except (struct.error, IndexError):
            pass  # not a request this parser knows: forward it untouched
        return bytes(out)

    def _from_broker(self, link: _Link, data: bytes) -> None:
        link.responses += data
        for frame in _whole_frames(link.responses):
            api_key, version = link.pending.pop(0) if link.pending else (-1, -1)
            if link.client_gone:
                continue  # nobody to answer
            with self._lock:
                self.stats["responses"] += 1
                cut = self._fire("cut_responses", api_key) is not None
                half = not cut and self._fire("cut_mid_responses", api_key) is not None
                dropped = not (cut or half) and \
                    self._fire("dropped_responses", api_key) is not None
                blackholed = time.monotonic() < self._blackhole_until and (
                    self._blackhole_keys is None or api_key in self._blackhole_keys)
                lost = cut or dropped or blackholed
                if lost:
                    self.stats["swallowed_bytes"] += len(frame)
                    self.stats["swallowed_responses"] += 1
                    key = swallowed(api_key)
                    self.stats[key] = self.stats.get(key, 0) + 1
                delay = self._delay_s
            if cut:
                self._close(link)
                return
            if half:
                self._send(link, link.client, frame[:max(4, len(frame) // 2)])
                self._close(link)
                return
            if lost:
                continue
            frame = self._mutate(frame, api_key, version)
            if delay:
                time.sleep(delay)
            if not self._send(link, link.client, frame):
                return

    def _mutate(self, frame: bytes, api_key: int, version: int) -> bytes:
        """The frame as the first armed mutation that accepts it rewrites it (or as it was)."""
        with self._lock:
            for rule in self._rules["mutated_responses"]:
                if not rule.matches(api_key) or rule.mutator is None:
                    continue
                mutated = rule.mutator(frame, version)
                if mutated is None:
                    continue
                rule.remaining -= 1
                self.stats["mutated_responses"] += 1
                self.mutations.append(mutated.description)
                return mutated.frame
        return frame

    def _send(self, link: _Link, sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
            return True
        except OSError:
            self._close(link)
            return False


def swallowed(api_key: int) -> str:
    """The ``stats`` key counting swallowed responses of ``api_key``."""
    return f"swallowed:{api_key}"


def _whole_frames(buffer: bytearray) -> Iterator[bytes]:
    """Take each complete size-prefixed Kafka frame off the front of ``buffer``, in order."""
    while len(buffer) >= 4:
        size = _SIZE.unpack_from(buffer)[0]
        if len(buffer) < 4 + size:
            return
        frame = bytes(buffer[:4 + size])
        del buffer[:4 + size]
        yield frame


class ProxiedKafkaCluster(KafkaCluster):
    """A ``KafkaCluster`` whose nodes also listen on ``PROXIED`` and advertise it at the port
    of a ``KafkaProxy`` per node (``proxies[node_id]``, started with the cluster)."""

    LISTENER = "PROXIED"

    def __init__(self, *args: Any, proxy_api_keys: set[int] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proxy_api_keys = proxy_api_keys
        self.proxied_ports: dict[int, tuple[int, int]] = {}  # node -> (listen, advertised)
        self.proxies: dict[int, KafkaProxy] = {}

    @property
    def proxy(self) -> KafkaProxy:
        """The proxy of node 1 (the only one of a single-node cluster)."""
        return self.proxies[min(self.proxies)]

    def _write_properties(self, node_id: int) -> None:
        super()._write_properties(node_id)
        listen_port, advertised_port = _free_ports(2)
        self.proxied_ports[node_id] = (listen_port, advertised_port)
        path = Path(self._node_dir(node_id)) / "server.properties"
        lines = path.read_text().splitlines()
        out = []
        for line in lines:
            key, _, value = line.partition("=")
            if key == "listeners":
                value += f",{self.LISTENER}://127.0.0.1:{listen_port}"
            elif key == "advertised.listeners":
                value += f",{self.LISTENER}://127.0.0.1:{advertised_port}"
            elif key == "listener.security.protocol.map":
                value += f",{self.LISTENER}:PLAINTEXT"
            out.append(f"{key}={value}")
        path.write_text("\n".join(out) + "\n")

    def start(self) -> ProxiedKafkaCluster:
        super().start()
        for node_id, (listen_port, advertised_port) in self.proxied_ports.items():
            self.proxies[node_id] = KafkaProxy("127.0.0.1", listen_port, advertised_port,
                                               api_keys=self.proxy_api_keys).start()
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()
        super().stop(timeout_s)

    def proxy_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{advertised}"
                        for advertised in (ports[1] for ports in self.proxied_ports.values()))
