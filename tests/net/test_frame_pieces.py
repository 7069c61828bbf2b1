"""A Produce frame sent in pieces is the frame, byte for byte, with its batches uncopied.

The oracle is ``send_request``'s single-buffer frame of the same request (the framing the
golden-bytes tests pin): the pieces joined must equal it, at every Produce version the
producer uses, with batches above and below the size kept by reference.
"""

from __future__ import annotations

import os

import pytest

from kafka_ds.protocol.connection import ProtocolConnection
from kafka_ds.protocol.frame_pieces import SPLICE_MIN_BYTES, PiecedFrame
from kafka_ds.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from kafka_ds.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kafka_ds.protocol.primitives import INT32


def _request(batches: list[bytes]) -> ProduceRequest:
    return ProduceRequest(
        transactional_id="txn-1", acks=-1, timeout_ms=30_000,
        topic_data=[TopicProduceData(name="topic-a", partition_data=[
            PartitionProduceData(index=index, records=batch)
            for index, batch in enumerate(batches)])])


BATCHES = [os.urandom(SPLICE_MIN_BYTES + 3), os.urandom(100), os.urandom(SPLICE_MIN_BYTES - 1),
           os.urandom(3 * SPLICE_MIN_BYTES)]


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_the_pieces_joined_are_the_frame(version: int) -> None:
    request = _request(BATCHES)
    plain_correlation, frame = ProtocolConnection("client-x").send_request(request, version)
    pieced_correlation, pieces = ProtocolConnection("client-x").send_request_pieces(
        request, version)
    assert pieced_correlation == plain_correlation
    joined = b"".join(pieces)
    assert joined == bytes(frame)
    assert INT32.unpack_from(joined, 0)[0] == len(joined) - 4
    # The two batches at or above the threshold travel as themselves, not as copies.
    kept = [piece for piece in pieces if isinstance(piece, bytes)]
    assert [id(piece) for piece in kept] == [id(BATCHES[0]), id(BATCHES[3])]


def test_the_connection_expects_one_response_per_pieced_request() -> None:
    connection = ProtocolConnection("client-x")
    first, _ = connection.send_request_pieces(_request(BATCHES), 9)
    second, _ = connection.send_request_pieces(_request(BATCHES), 9, expect_response=False)
    third, _ = connection.send_request(_request(BATCHES[:1]), 9)
    assert (second, third) == (first + 1, first + 2)
    assert [entry.correlation_id for entry in connection._in_flight] == [first, third]


def test_small_values_and_bytearrays_are_copied_in() -> None:
    frame = PiecedFrame(4)
    frame += b"ab"
    frame += bytearray(SPLICE_MIN_BYTES)  # mutable: copied, it could change before sending
    large = bytes(SPLICE_MIN_BYTES)
    frame += large
    frame += b"z"
    assert frame.total_bytes() == 4 + 2 + 2 * SPLICE_MIN_BYTES + 1
    pieces = frame.pieces()
    assert len(pieces) == 3 and pieces[1] is large
    assert b"".join(pieces) == bytes(4) + b"ab" + bytes(2 * SPLICE_MIN_BYTES) + b"z"


def test_requests_without_record_batches_are_one_piece() -> None:
    request = MetadataRequest(topics=[MetadataRequestTopic(name="topic-a")])
    _, frame = ProtocolConnection("client-x").send_request(request, 12)
    _, pieces = ProtocolConnection("client-x").send_request_pieces(request, 12)
    assert len(pieces) == 1 and bytes(pieces[0]) == bytes(frame)
    # Framed in a plain bytearray: a PiecedFrame's Python-level += costs per field.
    assert type(pieces[0].obj) is bytearray  # type: ignore[union-attr]
