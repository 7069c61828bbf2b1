"""The sans-IO framer: split reads, correlation checks, oversize frames, acks=0, and a body
buffer that is not zeroed before the socket fills it (``connection._unfilled``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_ds.protocol import connection as connection_module
from kafka_ds.protocol.connection import FrameTooLargeError, ProtocolConnection
from kafka_ds.protocol.errors import ProtocolError
from kafka_ds.protocol.header import write_response_header
from kafka_ds.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from kafka_ds.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from kafka_ds.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kafka_ds.protocol.primitives import INT32
from kafka_ds.protocol.schema import encode


def _frame(correlation_id: int, body: bytes, flexible_header: bool) -> bytes:
    out = bytearray()
    write_response_header(out, correlation_id, flexible_header)
    out += body
    return INT32.pack(len(out)) + bytes(out)


def _feed(connection: ProtocolConnection, data: bytes, chunk: int):
    results = []
    position = 0
    while position < len(data):
        target = connection.read_buffer()
        count = min(chunk, len(target), len(data) - position)
        target[:count] = data[position:position + count]
        position += count
        received = connection.bytes_received(count)
        if received is not None:
            results.append(received)
    return results


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096])
def test_responses_reassemble_from_any_read_size(chunk: int) -> None:
    connection = ProtocolConnection("test")
    first, _ = connection.send_request(MetadataRequest(topics=None), 12)
    second, _ = connection.send_request(MetadataRequest(topics=[]), 12)
    body = bytes(encode(MetadataResponse(cluster_id="c", controller_id=1), 12))
    data = _frame(first, body, True) + _frame(second, body, True)
    results = _feed(connection, data, chunk)
    assert [r.request.correlation_id for r in results] == [first, second]
    assert results[0].response.cluster_id == "c"
    assert connection.in_flight_count == 0


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    connection = ProtocolConnection("test")
    correlation, _ = connection.send_request(ApiVersionsRequest(), 3)
    body = bytes(encode(ApiVersionsResponse(
        api_keys=[ApiVersion(api_key=18, min_version=0, max_version=4)]), 3))
    [received] = _feed(connection, _frame(correlation, body, False), 4096)
    assert received.response.api_keys[0].max_version == 4


def test_unsupported_api_versions_answer_falls_back_to_v0() -> None:
    connection = ProtocolConnection("test")
    correlation, _ = connection.send_request(ApiVersionsRequest(), 4)
    body = bytes(encode(ApiVersionsResponse(
        error_code=35, api_keys=[ApiVersion(api_key=18, min_version=0, max_version=2)]), 0))
    [received] = _feed(connection, _frame(correlation, body, False), 4096)
    assert received.response.error_code == 35


def test_correlation_mismatch_is_a_protocol_error() -> None:
    connection = ProtocolConnection("test")
    correlation, _ = connection.send_request(MetadataRequest(topics=None), 12)
    body = bytes(encode(MetadataResponse(), 12))
    with pytest.raises(ProtocolError, match="correlation id"):
        _feed(connection, _frame(correlation + 7, body, True), 4096)


def test_a_response_nobody_asked_for_is_a_protocol_error() -> None:
    connection = ProtocolConnection("test")
    with pytest.raises(ProtocolError, match="no outstanding request"):
        _feed(connection, _frame(0, b"", False), 4096)


def test_oversize_frame_is_refused_before_allocating() -> None:
    connection = ProtocolConnection("test", max_response_bytes=1000)
    connection.send_request(MetadataRequest(topics=None), 12)
    with pytest.raises(FrameTooLargeError, match="max_response_bytes"):
        _feed(connection, INT32.pack(5000), 4096)


def test_request_without_response_does_not_wait() -> None:
    connection = ProtocolConnection("test")
    _, frame = connection.send_request(MetadataRequest(topics=None), 12, expect_response=False)
    assert connection.in_flight_count == 0
    assert INT32.unpack_from(frame)[0] == len(frame) - 4


# --- the body buffer starts as junk -------------------------------------------------------
# A Fetch response carrying the golden record batches (written by the Java client, see
# tests/protocol/golden) is fed in reads of several sizes into buffers that start full of
# junk: every byte must be overwritten before the frame is decoded, so the records must come
# out byte for byte as the golden file has them.

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
    received = _feed(connection, _fetch_frame(first, golden) + _fetch_frame(second, golden[::-1]),
                     chunk)
    assert [r.request.correlation_id for r in received] == [first, second]
    records = [bytes(r.response.responses[0].partitions[0].records) for r in received]
    assert records == [golden, golden[::-1]]


def test_the_default_body_buffer_is_writable_and_of_the_frame_size() -> None:
    body = connection_module._unfilled(1000)
    assert len(body) == 1000 and not body.readonly and body.itemsize == 1
    body[:3] = b"abc"
    assert bytes(body[:3]) == b"abc"
