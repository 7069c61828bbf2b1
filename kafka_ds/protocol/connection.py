"""The sans-IO side of one broker connection: framing, correlation and (de)serialisation.

Layer: protocol (stdlib, numpy for the receive buffer, headers and schemas).

Kafka frames every request and response with an int32 size. Responses on one connection come
back in the order the requests were sent, each echoing its correlation id, so the client keeps
a FIFO of what is in flight and checks each response against its head: a mismatch means the
stream is out of step and the connection must be dropped (never guessed around). Produce with
``acks=0`` gets no response at all and so never enters the FIFO.

Receiving is built for large Fetch responses. Rather than ``receive_data(bytes)`` and joining
chunks (two copies of every byte), the I/O layer asks ``read_buffer()`` for where the next
bytes belong and calls ``bytes_received(n)``: the size prefix goes into a 4-byte buffer, then
the body is read straight into one buffer of exactly the frame's size. Decoded responses keep
zero-copy views (``RECORDS`` fields) into that buffer. The buffer is not zeroed first
(``_unfilled``): the socket overwrites every byte before any is read, and zeroing a 4 MiB
Fetch response was one more pass over every fetched byte.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from kafka_ds.protocol import primitives as p
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import DecodeError, EncodeError, ProtocolError
from kafka_ds.protocol.frame_pieces import PiecedFrame
from kafka_ds.protocol.header import (
    RequestHeader,
    read_response_header,
    response_header_is_flexible,
    write_request_header,
)
from kafka_ds.protocol.schema import ApiMessage, Request, carries_records, decode_exact, encode

_SIZE = p.INT32


def _unfilled(size: int) -> memoryview:
    """A writable byte buffer of ``size`` bytes whose contents are left as the allocator had
    them (``bytearray(size)`` writes zeros first). Only for bytes that are all overwritten
    before any is read: ``bytes_received`` decodes a body only once it is full."""
    return np.empty(size, dtype=np.uint8).data


class InFlight(NamedTuple):
    """What we remember about a request until its response arrives."""

    correlation_id: int
    api_key: int
    api_version: int
    response_class: type[ApiMessage]


class Received(NamedTuple):
    """A decoded response and the request it answers."""

    request: InFlight
    response: ApiMessage
    size_bytes: int


class FrameTooLargeError(DecodeError):
    """A response announced a size above the configured limit."""


class ProtocolConnection:
    """Serialises requests and matches and decodes responses for one broker connection.

    ``max_response_bytes`` protects against a corrupt or hostile size prefix making us
    allocate gigabytes; it should exceed the largest Fetch response we ask for.
    """

    def __init__(self, client_id: str | None, max_response_bytes: int = 256 * 1024 * 1024) -> None:
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self._next_correlation_id = 0
        self._in_flight: deque[InFlight] = deque()
        self._size_buffer = bytearray(_SIZE.size)
        self._body: memoryview | None = None
        self._filled = 0

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def in_flight(self) -> list[InFlight]:
        return list(self._in_flight)

    def send_request(self, request: Request, api_version: int,
                     expect_response: bool = True) -> tuple[int, bytearray]:
        """Frame ``request`` at ``api_version``; returns its correlation id and the bytes."""
        out = bytearray(_SIZE.size)  # patched with the size below
        correlation_id = self._frame(request, api_version, expect_response, out, len)
        return correlation_id, out

    def send_request_pieces(self, request: Request, api_version: int,
                            expect_response: bool = True
                            ) -> tuple[int, list[memoryview | bytes]]:
        """As ``send_request``, but the frame is the returned pieces in order, large ``bytes``
        fields (record batches) among them uncopied (``frame_pieces``). Only a request that
        carries records (Produce) is framed so; any other is one piece, since a
        ``PiecedFrame``'s Python-level ``+=`` nearly doubles the cost of encoding many small
        fields (a Fetch of 100 partitions: 194 -> 359 us)."""
        if not carries_records(type(request)):
            correlation_id, frame = self.send_request(request, api_version, expect_response)
            return correlation_id, [memoryview(frame)]
        out = PiecedFrame(_SIZE.size)
        correlation_id = self._frame(request, api_version, expect_response, out,
                                     PiecedFrame.total_bytes)
        return correlation_id, out.pieces()

    def _frame(self, request: Request, api_version: int, expect_response: bool,
               out: bytearray, length: Callable[[Any], int]) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        header = RequestHeader(request.API_KEY, api_version, correlation_id, self.client_id)
        write_request_header(out, header, request.is_flexible(api_version))
        encode(request, api_version, out)
        size = length(out) - _SIZE.size
        if size > 0x7FFFFFFF:
            raise EncodeError(f"request of {size} bytes is larger than Kafka's frame limit")
        _SIZE.pack_into(out, 0, size)
        if expect_response:
            self._in_flight.append(
                InFlight(correlation_id, request.API_KEY, api_version, request.RESPONSE))
        return correlation_id

    def read_buffer(self) -> memoryview:
        """Where the next received bytes must be written (never empty)."""
        if self._body is None:
            return memoryview(self._size_buffer)[self._filled:]
        return self._body[self._filled:]

    def bytes_received(self, count: int) -> Received | None:
        """Account for ``count`` bytes written into ``read_buffer()``; a response when complete.

        Call again (with a fresh ``read_buffer()``) until the socket has nothing more: one read
        may complete at most one frame, because the buffer handed out never spans two frames.
        """
        self._filled += count
        if self._body is None:
            if self._filled < _SIZE.size:
                return None
            size = _SIZE.unpack(self._size_buffer)[0]
            if size < 0 or size > self.max_response_bytes:
                raise FrameTooLargeError(
                    "response frame", None,
                    f"size {size} is outside 0..{self.max_response_bytes} (max_response_bytes); "
                    "the stream is corrupt, or the peer is not a Kafka broker")
            self._body = _unfilled(size)
            self._filled = 0
            if size:
                return None
        if self._filled < len(self._body):
            return None
        body = self._body
        self._body = None
        self._filled = 0
        return self._decode_frame(body)

    def _decode_frame(self, body: memoryview) -> Received:
        if not self._in_flight:
            raise ProtocolError("broker sent a response to no outstanding request")
        expected = self._in_flight.popleft()
        response_class = expected.response_class
        flexible = response_header_is_flexible(
            expected.api_key, response_class.is_flexible(expected.api_version))
        correlation_id, pos = read_response_header(body, 0, flexible)
        if correlation_id != expected.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id} does not match the oldest request "
                f"in flight ({expected.correlation_id}, {ApiKey(expected.api_key).name}); "
                "the connection is out of step and must be closed")
        view = body[pos:]
        try:
            response = decode_exact(response_class, expected.api_version, view)
        except DecodeError:
            if expected.api_key != ApiKey.API_VERSIONS:
                raise
            # A broker that does not know our ApiVersions version answers in v0 (with
            # UNSUPPORTED_VERSION and its own range) so that we can retry with one it knows.
            response = decode_exact(response_class, 0, view)
        return Received(expected, response, len(body))

    def fail_all(self) -> list[InFlight]:
        """Forget every request in flight (the connection is gone); returns them."""
        pending = list(self._in_flight)
        self._in_flight.clear()
        self._body = None
        self._filled = 0
        return pending
