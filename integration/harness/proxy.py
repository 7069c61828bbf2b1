"""A TCP proxy for fault injection between a Kafka client and a broker, and a cluster behind it.

``KafkaProxy`` forwards bytes both ways and understands Kafka's framing (an int32 size per
request and response), so faults land on message boundaries, where real ones hurt most:

* ``cut_after_responses(n)``: the next ``n`` responses are swallowed and their connection
  closed: the broker *did* process the request, the client never hears so (the classic
  duplicate-producing case for a non-idempotent producer).
* ``cut_mid_request(n)``: forward only the first half of the next ``n`` requests, then close
  both sides: the broker never sees a whole request.
* ``blackhole(seconds)``: swallow every response for a while (connections stay open; the
  client times out on its own).
* ``delay(ms)``: hold each chunk for ``ms`` before forwarding.
* ``cut_all()``: close every connection now.

``api_keys`` limits ``cut_*`` to requests of those APIs (``{0}``: Produce only), so that
metadata and producer-id requests keep working. Responses are matched to requests in order,
per connection; Produce requests with acks=0 (no response) are recognised and skipped.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cluster import KafkaCluster, _free_ports

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


def _produce_expects_response(frame: bytes) -> bool:
    """False for a Produce request with acks=0 (which gets no response)."""
    try:
        api_key, version, _ = _HEADER.unpack_from(frame, 4)
        if api_key != 0:
            return True
        pos = 4 + _HEADER.size
        (client_id_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(client_id_len, 0)
        flexible = version >= 9
        if flexible:
            pos += _skip_tagged(frame, pos)
            length, pos = _uvarint(frame, pos)
            pos += max(length - 1, 0)  # compact nullable transactional id
        else:
            (length,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
        return acks != 0
    except (struct.error, IndexError):
        return True


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tagged(buf: bytes, pos: int) -> int:
    start = pos
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos - start


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.requests = bytearray()  # client -> broker bytes not yet forwarded as frames
        self.responses = bytearray()
        self.pending: list[tuple[int, bool]] = []  # (api key, targeted) per awaited response
        self.closed = False


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
        self._cut_responses = 0
        self._cut_requests = 0
        self._blackhole_until = 0.0
        self._delay_s = 0.0
        self._running = False
        self._thread: threading.Thread | None = None
        self.stats = {"connections": 0, "cut_responses": 0, "cut_requests": 0,
                      "requests": 0, "responses": 0, "swallowed_bytes": 0}

    # --- commands (any thread) --------------------------------------------------------------

    def cut_after_responses(self, count: int = 1) -> None:
        with self._lock:
            self._cut_responses += count

    def cut_mid_request(self, count: int = 1) -> None:
        with self._lock:
            self._cut_requests += count

    def blackhole(self, seconds: float) -> None:
        with self._lock:
            self._blackhole_until = time.monotonic() + seconds

    def delay(self, ms: float) -> None:
        with self._lock:
            self._delay_s = ms / 1000

    def cut_all(self) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            self._close(link)

    def reset(self) -> None:
        with self._lock:
            self._cut_responses = self._cut_requests = 0
            self._blackhole_until = 0.0
            self._delay_s = 0.0

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
                    self._close(link)
                    continue
                if key.fileobj is link.client:
                    self._from_client(link, data)
                else:
                    self._from_broker(link, data)
        selector.close()

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

    def _targeted(self, api_key: int) -> bool:
        return self.api_keys is None or api_key in self.api_keys

    def _from_client(self, link: _Link, data: bytes) -> None:
        link.requests += data
        for frame in _whole_frames(link.requests):
            api_key = _HEADER.unpack_from(frame, 4)[0] if len(frame) >= 12 else -1
            self.stats["requests"] += 1
            with self._lock:
                cut = self._cut_requests > 0 and self._targeted(api_key)
                if cut:
                    self._cut_requests -= 1
                delay = self._delay_s
            if cut:
                self.stats["cut_requests"] += 1
                self._send(link, link.upstream, frame[:max(4, len(frame) // 2)])
                self._close(link)
                return
            if delay:
                time.sleep(delay)
            if _produce_expects_response(frame):
                link.pending.append((api_key, self._targeted(api_key)))
            if not self._send(link, link.upstream, frame):
                return

    def _from_broker(self, link: _Link, data: bytes) -> None:
        link.responses += data
        for frame in _whole_frames(link.responses):
            _, targeted = link.pending.pop(0) if link.pending else (-1, True)
            self.stats["responses"] += 1
            with self._lock:
                cut = self._cut_responses > 0 and targeted
                if cut:
                    self._cut_responses -= 1
                blackholed = time.monotonic() < self._blackhole_until
                delay = self._delay_s
            if cut:
                self.stats["cut_responses"] += 1
                self.stats["swallowed_bytes"] += len(frame)
                self._close(link)
                return
            if blackholed:
                self.stats["swallowed_bytes"] += len(frame)
                continue
            if delay:
                time.sleep(delay)
            if not self._send(link, link.client, frame):
                return

    def _send(self, link: _Link, sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
            return True
        except OSError:
            self._close(link)
            return False


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
