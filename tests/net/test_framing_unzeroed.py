"""The framer's body buffer is not zeroed before the socket fills it (``connection._unfilled``).

A Fetch response carrying the golden record batches (written by the Java client, see
``tests/protocol/golden``) is fed through ``read_buffer``/``bytes_received`` in reads of
several sizes into buffers that start full of junk: every byte must be overwritten before the
frame is decoded, so the records must come out byte for byte as the golden file has them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_ds.protocol import connection as connection_module
from kafka_ds.protocol.connection import ProtocolConnection
from kafka_ds.protocol.header import write_response_header
from kafka_ds.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from kafka_ds.protocol.primitives import INT32
from kafka_ds.protocol.schema import encode

GOLDEN = Path(__file__).parents[1] / "protocol" / "golden"
FETCH_VERSION = 12


def _junk_filled(size: int) -> memoryview:
    # What an allocator may hand back: someone else's bytes, here a recognisable pattern.
    return memoryview(bytearray(b"\xa5\x5a\xff\x00" * (size // 4 + 1))[:size])


def _fetch_frame(correlation_id: int, records: bytes) -> bytes:
    response = FetchResponse(session_id=0, responses=[FetchableTopicResponse(
        topic="t", partitions=[PartitionData(partition_index=0, error_code=0,
                                             high_watermark=10, records=records)])])
    out = bytearray()
    write_response_header(out, correlation_id, True)
    out += encode(response, FETCH_VERSION)
    return INT32.pack(len(out)) + bytes(out)


@pytest.mark.parametrize("chunk", [1, 5, 4096, 1 << 20])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_records_come_out_as_sent_from_a_buffer_that_starts_as_junk(
        chunk: int, codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection_module, "_unfilled", _junk_filled)
    golden = (GOLDEN / f"golden-{codec}.bin").read_bytes()
    connection = ProtocolConnection("test")
    first, _ = connection.send_request(FetchRequest(), FETCH_VERSION)
    second, _ = connection.send_request(FetchRequest(), FETCH_VERSION)
    data = _fetch_frame(first, golden) + _fetch_frame(second, golden[::-1])
    received = []
    position = 0
    while position < len(data):
        target = connection.read_buffer()
        count = min(chunk, len(target), len(data) - position)
        target[:count] = data[position:position + count]
        position += count
        done = connection.bytes_received(count)
        if done is not None:
            received.append(done)
    assert [r.request.correlation_id for r in received] == [first, second]
    records = [bytes(r.response.responses[0].partitions[0].records) for r in received]
    assert records == [golden, golden[::-1]]


def test_the_default_body_buffer_is_writable_and_of_the_frame_size() -> None:
    body = connection_module._unfilled(1000)
    assert len(body) == 1000 and not body.readonly and body.itemsize == 1
    body[:3] = b"abc"
    assert bytes(body[:3]) == b"abc"
