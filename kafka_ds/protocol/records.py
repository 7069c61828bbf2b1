"""Kafka record batches (message format v2, magic 2): the format, and decoding.

Layer: protocol (sans-IO). Imports the standard library, ``crc32c``, and ``primitives``,
``compression`` and ``errors`` from this package; ``legacy_records`` is imported when a buffer
holds magic 0/1 message sets. Building batches lives in ``record_builder`` and is re-exported
here (``encode_batch``, ``NewRecord``, ...); the columnar paths are ``record_columns`` (decode)
and ``record_encoder`` (encode). Spec: KIP-98 (format v2), KIP-32 (timestamps), KIP-82 (headers),
KIP-534 (delete horizon); the Java classes are ``DefaultRecordBatch`` and ``DefaultRecord``.

The wire grammar, as this module reads and writes it::

    RecordBatch =>
        baseOffset            int64   offset of the first record; the broker assigns it
        batchLength           int32   bytes that follow this field (total size - 12)
        partitionLeaderEpoch  int32   leader epoch stamped by the broker on append
        magic                 int8    2
        crc                   uint32  CRC-32C, see below
        attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                      5 control, 6 delete horizon set
        lastOffsetDelta       int32   offset of the last record minus baseOffset
        baseTimestamp         int64   first record's timestamp (the delete horizon when bit 6)
        maxTimestamp          int64   largest record timestamp (the append time under
                                      LogAppendTime)
        producerId            int64   -1 when not idempotent
        producerEpoch         int16
        baseSequence          int32   sequence of the first record, -1 when not idempotent
        recordCount           int32
        records               the records section, compressed as a whole by the codec

    Record =>
        length                varint  bytes after this field
        attributes            int8    unused, 0
        timestampDelta        varlong timestamp - baseTimestamp
        offsetDelta           varint  offset - baseOffset
        keyLength             varint  -1 for a null key
        key                   bytes
        valueLength           varint  -1 for a null value
        value                 bytes
        headersCount          varint
        headers               [keyLength varint, key utf-8, valueLength varint (-1 null), value]

What the CRC covers: CRC-32C (Castagnoli, as in iSCSI, not zlib's CRC-32) over everything from
``attributes`` to the end of the batch. The first three fields are left out on purpose. The
producer cannot know two of them: the leader assigns ``baseOffset`` when it appends the batch
and stamps its own ``partitionLeaderEpoch`` on it (KIP-101), so both are written into a batch
that is already checksummed, and leaving them out means the broker never has to recompute (or
decompress to re-validate) a CRC for that. ``batchLength`` is checked by framing anyway. The
price: a flipped bit in those 12 bytes is not caught by the CRC (a wrong length shows up as a
framing error; a wrong epoch does not affect what a consumer reads).

A control batch (attributes bit 5) holds one control record: key = version int16 + type int16
(0 ABORT, 1 COMMIT), value = version int16 + coordinator epoch int32. Consumers never show it.

A buffer from a Fetch response is a concatenation of batches; the broker may cut the last one
short, which is normal and is reported, not raised. The magic byte sits at byte 16 in every format,
so a batch whose magic is 0 or 1 is handed to ``legacy_records``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple

import crc32c as _crc32c

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.primitives import read_varint, read_varlong

if TYPE_CHECKING:
    from kafka_ds.protocol.legacy_records import LegacyBatch

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

# --- the batch header ----------------------------------------------------------------------

HEADER_STRUCT = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength: bytes after this field
    "i"  # partitionLeaderEpoch
    "b"  # magic: 2
    "I"  # crc: CRC-32C of attributes..end
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
HEADER_BYTES = HEADER_STRUCT.size  # 61


def _field_offset(index: int) -> int:
    """Byte offset of header field ``index``, derived from the struct format."""
    return struct.calcsize(HEADER_STRUCT.format[: index + 1])


LENGTH_OFFSET = _field_offset(1)  # 8
LOG_OVERHEAD = LENGTH_OFFSET + 4  # 12: baseOffset + batchLength frame every format
MAGIC_OFFSET = _field_offset(3)  # 16, the same in message formats 0, 1 and 2
CRC_OFFSET = _field_offset(4)  # 17
ATTRIBUTES_OFFSET = _field_offset(5)  # 21: the CRC covers from here
RECORD_COUNT_OFFSET = _field_offset(12)  # 57
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD  # 49: a batch with no records
# A record is at least length + attributes + timestampDelta + offsetDelta + keyLength +
# valueLength + headersCount, one byte each; bounds recordCount before any allocation.
MIN_RECORD_BYTES = 7

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

MAGIC_V2 = 2
NO_TIMESTAMP = -1
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class TimestampType(IntEnum):
    """What a record timestamp means (the Java ``TimestampType`` ids)."""

    NO_TIMESTAMP = -1  # message format v0
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """Control record types written as transaction markers."""

    ABORT = 0
    COMMIT = 1


# --- decoded types -------------------------------------------------------------------------

class RecordBatchHeader(NamedTuple):
    """The 61 header bytes of a v2 batch, as unpacked."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        return codec_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD


class Record(NamedTuple):
    """One decoded record; ``timestamp_ms`` already resolved for LogAppendTime batches."""

    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


class ControlRecord(NamedTuple):
    """A decoded control record. ``coordinator_epoch`` is None for non-marker types."""

    version: int
    type: int
    coordinator_epoch: int | None

    @property
    def is_abort(self) -> bool:
        return self.type == ControlRecordType.ABORT

    @property
    def is_commit(self) -> bool:
        return self.type == ControlRecordType.COMMIT


def codec_of(attributes: int) -> Compression:
    """The codec named by attributes bits 0-2; ``DecodeError`` for ids 5-7, which none is."""
    try:
        return Compression(attributes & COMPRESSION_MASK)
    except ValueError:
        raise DecodeError("batch attributes", None,
                          f"unknown compression codec id {attributes & COMPRESSION_MASK}") from None


def decode_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record's key and value (transaction markers: ABORT / COMMIT)."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise DecodeError("control record key", None, "shorter than 4 bytes")
    version, control_type = CONTROL_KEY.unpack_from(key)
    epoch = None
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if value is None or len(value) < CONTROL_VALUE.size:
            raise DecodeError("transaction marker value", None, "shorter than 6 bytes")
        epoch = CONTROL_VALUE.unpack_from(value)[1]
    return ControlRecord(version, control_type, epoch)


def _describe(topic: str | None, partition: int | None) -> str:
    if topic is None:
        return ""
    return f" of {topic}-{partition}" if partition is not None else f" of {topic}"


class RecordBatch:
    """A v2 batch found in a buffer. Its CRC has been checked; records decode on iteration.

    The batch keeps a view of the buffer it came from: iterate it before that buffer is reused.
    """

    __slots__ = ("_budget", "_buf", "_where", "header", "position")

    def __init__(self, header: RecordBatchHeader, buf: Buffer, position: int,
                 max_decompressed_bytes: int | DecompressionBudget, where: str = "") -> None:
        self.header = header
        self.position = position  # where the batch starts in the buffer
        self._buf = buf
        # Shared with the other batches of the buffer when the reader hands one in; each
        # decompression of the records section spends from it.
        self._budget = max_decompressed_bytes if isinstance(
            max_decompressed_bytes, DecompressionBudget) else DecompressionBudget(
            max_decompressed_bytes)
        self._where = where

    magic = MAGIC_V2

    # The header's fields and flags, so that a RecordBatch and a LegacyBatch read alike.
    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def size_bytes(self) -> int:
        return self.header.size_bytes

    @property
    def compression(self) -> Compression:
        return self.header.compression

    @property
    def timestamp_type(self) -> TimestampType:
        return self.header.timestamp_type

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def record_count(self) -> int:
        return self.header.record_count

    def records_section(self) -> tuple[Buffer, int, int]:
        """``(data, start, end)``: the records section, decompressed when compressed.

        Uncompressed sections are returned as their place in the fetch buffer, so that error
        positions count from the start of that buffer.
        """
        start = self.position + HEADER_BYTES
        end = self.position + self.header.size_bytes
        codec = self.header.attributes & COMPRESSION_MASK
        if codec == Compression.NONE:
            return self._buf, start, end
        try:
            data = self._budget.decompress(codec, memoryview(self._buf)[start:end])
        except DecodeError as exc:
            raise DecodeError(f"records of the batch at offset {self.header.base_offset}"
                              f"{self._where}", start, str(exc)) from None
        return data, 0, len(data)

    def __iter__(self) -> Iterator[Record]:
        data, start, end = self.records_section()
        return decode_records(data, start, end, self.header,
                              f"batch at offset {self.header.base_offset}{self._where}")

    def records(self) -> list[Record]:
        return list(self)

    def control_record(self) -> ControlRecord | None:
        """The first record of a control batch, decoded; None for data batches."""
        if not self.header.is_control:
            return None
        for record in self:
            return decode_control_record(record.key, record.value)
        return None

    def __repr__(self) -> str:
        h = self.header
        return (f"RecordBatch(offsets {h.base_offset}..{h.last_offset}, {h.record_count} records,"
                f" codec {h.attributes & COMPRESSION_MASK}, producer {h.producer_id}/"
                f"{h.producer_epoch})")


def decode_records(data: Buffer, pos: int, end: int, header: RecordBatchHeader,
                   what: str) -> Iterator[Record]:
    """Yield the records of a (decompressed) records section ``data[pos:end]``.

    The simple, per-record path: ``record_columns`` decodes the same bytes without Python
    objects per record and must agree with this function record for record.
    """
    count = header.record_count
    if count < 0 or count * MIN_RECORD_BYTES > end - pos:
        raise DecodeError(f"record count of the {what}", pos,
                          f"{count} records cannot fit in {end - pos} bytes")
    log_append = header.attributes & TIMESTAMP_TYPE_BIT
    timestamp_type = 1 if log_append else 0
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp_ms
    max_timestamp = header.max_timestamp_ms
    for _ in range(count):
        length, pos = read_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise DecodeError(f"record length in the {what}", pos,
                              f"{length} bytes do not fit in the records section")
        pos += 1  # attributes: unused
        timestamp_delta, pos = read_varlong(data, pos)
        offset_delta, pos = read_varint(data, pos)
        key, pos = _read_record_bytes(data, pos, record_end, "record key", what)
        value, pos = _read_record_bytes(data, pos, record_end, "record value", what)
        header_count, pos = read_varint(data, pos)
        if header_count < 0 or header_count * 2 > record_end - pos:
            raise DecodeError(f"record headers count in the {what}", pos,
                              f"{header_count} headers cannot fit in the record")
        headers: list[Header] = []
        for _ in range(header_count):
            raw_key, pos = _read_record_bytes(data, pos, record_end, "header key", what)
            if raw_key is None:
                raise DecodeError(f"header key in the {what}", pos, "null header key")
            header_value, pos = _read_record_bytes(data, pos, record_end, "header value", what)
            headers.append((raw_key.decode("utf-8", "replace"), header_value))
        if pos != record_end:
            raise DecodeError(f"record in the {what}", pos,
                              f"record fields end at {pos}, its length says {record_end}")
        yield Record(
            base_offset + offset_delta,
            max_timestamp if log_append else base_timestamp + timestamp_delta,
            timestamp_type, key, value, headers,
        )
    if pos != end:
        raise DecodeError(f"records section of the {what}", pos,
                          f"{end - pos} bytes after the last of {count} records")


def _read_record_bytes(data: Buffer, pos: int, record_end: int, field: str,
                       what: str) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        if length != -1:
            raise DecodeError(f"{field} in the {what}", pos, f"negative length {length}")
        return None, pos
    stop = pos + length
    if stop > record_end:
        raise DecodeError(f"{field} in the {what}", pos,
                          f"{length} bytes run past the end of the record")
    return bytes(data[pos:stop]), stop


# --- walking a buffer of batches -----------------------------------------------------------

_LOG_HEADER = struct.Struct(">qi")


class BatchReader:
    """Iterates the complete batches of a buffer (a Fetch response's ``records`` bytes).

    After iteration, ``position`` is where the complete batches end (bytes consumed) and
    ``has_partial_batch`` says whether bytes after it start a batch the broker cut short.
    Each batch's CRC is checked before it is yielded; a mismatch raises ``CorruptRecordError``
    naming the topic-partition (when given) and the batch's base offset.
    """

    def __init__(self, buf: Buffer, *, topic: str | None = None, partition: int | None = None,
                 verify_crc: bool = True,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                 budget: DecompressionBudget | None = None) -> None:
        self._buf = buf
        self._size = len(buf)
        self._verify_crc = verify_crc
        # One budget for every batch of the buffer, v2 or legacy (a per-batch cap bounds
        # nothing: the buffer holds as many batches as fit), charged to ``budget`` too.
        self._budget = DecompressionBudget(max_decompressed_bytes, parent=budget)
        self._where = _describe(topic, partition)
        self.position = 0
        self.has_partial_batch = False

    def __iter__(self) -> BatchReader:
        return self

    def __next__(self) -> RecordBatch | LegacyBatch:
        pos = self.position
        buf = self._buf
        remaining = self._size - pos
        if remaining <= 0:
            raise StopIteration
        if remaining < LOG_OVERHEAD:
            self.has_partial_batch = True
            raise StopIteration
        base_offset, length = _LOG_HEADER.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + length
        # Every format has its magic byte inside the length; v2 needs a whole header.
        if length <= MAGIC_OFFSET - LOG_OVERHEAD or (
                remaining > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] == MAGIC_V2
                and length < MIN_BATCH_LENGTH):
            raise DecodeError(f"batch length{self._where}", pos + LENGTH_OFFSET,
                              f"{length} is too small for the batch at offset {base_offset}")
        if end > self._size:
            self.has_partial_batch = True
            raise StopIteration
        magic = buf[pos + MAGIC_OFFSET]
        batch: RecordBatch | LegacyBatch
        if magic == MAGIC_V2:
            header = RecordBatchHeader._make(HEADER_STRUCT.unpack_from(buf, pos))
            if self._verify_crc:
                check_crc(buf, pos, end, header.crc, base_offset, self._where)
            batch = RecordBatch(header, buf, pos, self._budget, self._where)
        elif magic in (0, 1):
            from kafka_ds.protocol.legacy_records import LegacyBatch

            batch = LegacyBatch.parse(buf, pos, end, verify_crc=self._verify_crc,
                                      max_decompressed_bytes=self._budget,
                                      where=self._where)
        else:
            raise DecodeError(f"batch magic{self._where}", pos + MAGIC_OFFSET,
                              f"unknown magic {magic} in the batch at offset {base_offset}")
        self.position = end
        return batch


def iter_batches(buf: Buffer, *, topic: str | None = None, partition: int | None = None,
                 verify_crc: bool = True,
                 max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                 budget: DecompressionBudget | None = None) -> BatchReader:
    """Iterate the complete batches in ``buf``; see ``BatchReader`` for what it reports after.

    ``max_decompressed_bytes`` caps what all compressed batches of ``buf`` together may
    decompress to (each decompressed once); ``budget`` is a wider one (the response's) that
    is charged too.
    """
    return BatchReader(buf, topic=topic, partition=partition, verify_crc=verify_crc,
                       max_decompressed_bytes=max_decompressed_bytes, budget=budget)


def check_crc(buf: Buffer, pos: int, end: int, expected: int, base_offset: int,
              where: str = "") -> None:
    """Raise ``CorruptRecordError`` unless the batch at ``buf[pos:end]`` has CRC ``expected``."""
    actual = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end])
    if actual != expected:
        raise CorruptRecordError(
            f"record batch at offset {base_offset}{where}", pos + CRC_OFFSET,
            f"CRC-32C is {actual:#010x}, the batch says {expected:#010x}",
        )
