"""Building record batches (message format v2), record by record.

Layer: protocol (sans-IO). Imports the standard library, ``crc32c`` and this package's
``records`` (the format, described there), ``compression``, ``primitives`` and ``errors``.
The bytes are laid out as the Java
client's ``MemoryRecordsBuilder`` writes them; ``record_encoder`` builds the same bytes from
columns for bulk sends, and ``assemble_batch`` is shared by both.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c as _crc32c

from kafka_ds.protocol.compression import Compression, compress
from kafka_ds.protocol.errors import EncodeError
from kafka_ds.protocol.primitives import varint_size, write_varint, write_varlong
from kafka_ds.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CONTROL_KEY,
    CONTROL_VALUE,
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    HEADER_BYTES,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
    ControlRecordType,
    Header,
    TimestampType,
)


class NewRecord(NamedTuple):
    """A record to encode. ``offset_delta`` defaults to the record's index in the batch."""

    key: bytes | None = None
    value: bytes | None = None
    timestamp_ms: int = 0
    headers: Sequence[Header] = ()
    offset_delta: int | None = None


def encode_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
    max_timestamp_ms: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one v2 batch, byte for byte as the Java client lays it out.

    ``baseTimestamp`` is the first record's timestamp (or ``delete_horizon_ms`` when given,
    which also sets attributes bit 6) and ``maxTimestamp`` the largest record timestamp unless
    ``max_timestamp_ms`` overrides it (a broker writing LogAppendTime does). ``last_offset_delta``
    defaults to the last record's offset delta. This is the per-record reference encoder;
    ``record_encoder`` builds the same bytes from columns for bulk sends.
    """
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = records[0].timestamp_ms if records else NO_TIMESTAMP
    section = encode_records(records, base_timestamp)
    offset_delta = -1
    if records:
        last = records[-1].offset_delta
        offset_delta = len(records) - 1 if last is None else last
    # The Java builder's running maximum starts at NO_TIMESTAMP too.
    max_timestamp = max((record.timestamp_ms for record in records), default=NO_TIMESTAMP)
    max_timestamp = max(max_timestamp, NO_TIMESTAMP)
    attributes = batch_attributes(compression, timestamp_type, is_transactional, is_control,
                                  delete_horizon_ms is not None)
    return assemble_batch(
        section, attributes=attributes, record_count=len(records),
        last_offset_delta=offset_delta if last_offset_delta is None else last_offset_delta,
        base_offset=base_offset, base_timestamp_ms=base_timestamp,
        max_timestamp_ms=max_timestamp if max_timestamp_ms is None else max_timestamp_ms,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch, compression_level=compression_level,
    )


def encode_records(records: Sequence[NewRecord], base_timestamp_ms: int) -> bytearray:
    """The uncompressed records section for ``records``, one record at a time."""
    section = bytearray()
    body = bytearray()
    for index, record in enumerate(records):
        body.clear()
        body.append(0)  # attributes
        write_varlong(body, record.timestamp_ms - base_timestamp_ms)
        write_varint(body, index if record.offset_delta is None else record.offset_delta)
        _write_record_bytes(body, record.key)
        _write_record_bytes(body, record.value)
        write_varint(body, len(record.headers))
        for header_key, header_value in record.headers:
            _write_record_bytes(body, header_key.encode("utf-8"))
            _write_record_bytes(body, header_value)
        write_varint(section, len(body))
        section += body
    return section


def _write_record_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out.append(1)  # zigzag(-1)
        return
    write_varint(out, len(value))
    out += value


def batch_attributes(compression: Compression | int, timestamp_type: int,
                     is_transactional: bool, is_control: bool,
                     has_delete_horizon: bool = False) -> int:
    """The attributes field of a batch header."""
    codec = int(compression)
    if not 0 <= codec <= COMPRESSION_MASK or timestamp_type not in (0, 1):
        raise EncodeError(f"invalid codec {codec} or timestamp type {timestamp_type}")
    return (codec
            | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
            | (TRANSACTIONAL_BIT if is_transactional else 0)
            | (CONTROL_BIT if is_control else 0)
            | (DELETE_HORIZON_BIT if has_delete_horizon else 0))


def assemble_batch(
    section: Buffer,
    *,
    attributes: int,
    record_count: int,
    last_offset_delta: int,
    base_offset: int,
    base_timestamp_ms: int,
    max_timestamp_ms: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    compression_level: int | None = None,
) -> bytes:
    """Wrap an encoded records section into a batch: compress it, write the header, the CRC."""
    codec = attributes & COMPRESSION_MASK
    payload = section if codec == Compression.NONE else compress(codec, section, compression_level)
    header = bytearray(HEADER_BYTES)
    try:
        HEADER_STRUCT.pack_into(
            header, 0, base_offset, HEADER_BYTES - LOG_OVERHEAD + len(payload),
            partition_leader_epoch, MAGIC_V2, 0, attributes, last_offset_delta,
            base_timestamp_ms, max_timestamp_ms, producer_id, producer_epoch, base_sequence,
            record_count,
        )
    except struct.error as exc:
        raise EncodeError(f"record batch header field out of range: {exc}") from None
    # The CRC keeps the GIL (gil_release_mode 0): it takes microseconds, and handing the GIL
    # over makes the producer's sender wait up to the interpreter's switch interval for
    # send() callers to give it back.
    crc = _crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:], 0, 0)
    crc = _crc32c.crc32c(payload, crc, 0)
    struct.pack_into(">I", header, CRC_OFFSET, crc)
    return b"".join((header, payload))


def encode_control_batch(
    control_type: ControlRecordType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
    timestamp_ms: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a transaction marker batch as a transaction coordinator has the leader write it."""
    record = NewRecord(
        key=CONTROL_KEY.pack(0, int(control_type)),
        value=CONTROL_VALUE.pack(0, coordinator_epoch),
        timestamp_ms=timestamp_ms,
    )
    return encode_batch([record], base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, is_transactional=True, is_control=True,
                        partition_leader_epoch=partition_leader_epoch)


def _record_body_bytes(offset_delta: int, timestamp_delta: int, key: Buffer | None,
                       value: Buffer | None, headers: Sequence[Header]) -> int:
    size = 1 + varint_size(offset_delta) + varint_size(timestamp_delta)
    size += _sized_bytes(key) + _sized_bytes(value) + varint_size(len(headers))
    for header_key, header_value in headers:
        size += _sized_bytes(header_key.encode("utf-8")) + _sized_bytes(header_value)
    return size


def record_size_bytes(offset_delta: int, timestamp_delta: int, key: Buffer | None,
                      value: Buffer | None, headers: Sequence[Header] = ()) -> int:
    """Exact bytes one record adds to an uncompressed records section, length prefix included.

    The accumulator calls this for every append to decide when a batch is full.
    """
    body = _record_body_bytes(offset_delta, timestamp_delta, key, value, headers)
    return body + varint_size(body)


# The widest offsetDelta (varint) and timestampDelta (varlong) encodings, over the 1 byte each
# that ``_record_body_bytes(0, 0, ...)`` counts.
_MAX_DELTAS_EXTRA_BYTES = (5 - 1) + (10 - 1)


def estimate_record_size_bytes(key: Buffer | None, value: Buffer | None,
                               headers: Sequence[Header] = ()) -> int:
    """An upper bound of ``record_size_bytes`` whatever the offset and timestamp deltas."""
    body = _record_body_bytes(0, 0, key, value, headers) + _MAX_DELTAS_EXTRA_BYTES
    return body + varint_size(body)


def _sized_bytes(value: Buffer | None) -> int:
    return 1 if value is None else varint_size(len(value)) + len(value)
