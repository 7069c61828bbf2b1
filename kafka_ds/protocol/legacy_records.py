"""Legacy message sets (message formats v0 and v1, magic 0 and 1): read-only decoding.

Layer: protocol (sans-IO). Imports the standard library (``zlib`` for CRC-32, ``struct``) and
``records``, ``compression`` and ``errors`` from this package. Spec: the pre-KIP-98 "Messages"
section of the Kafka protocol guide, KIP-31 (relative offsets), KIP-32 (timestamps), KIP-57 (LZ4
header checksum); the Java classes are ``LegacyRecord`` and ``AbstractLegacyRecordBatch``.

Brokers still return these formats for topics written long ago (they are never converted on
fetch). Each top-level entry of a message set::

    offset       int64   the message's offset; for a compressed wrapper, the LAST inner offset
    messageSize  int32   bytes that follow
    crc          uint32  CRC-32 (zlib's polynomial, not CRC-32C) of magic..end
    magic        int8    0 or 1
    attributes   int8    bits 0-2 codec, bit 3 timestamp type (v1 only)
    timestamp    int64   v1 only
    key          int32 length (-1 null) + bytes
    value        int32 length (-1 null) + bytes

A compressed entry is a wrapper: its value is a whole message set, compressed, whose entries are
the real records (one level of nesting only). Inner offsets are absolute under magic 0; under
magic 1 they are relative (0, 1, ...), and since the wrapper's offset is the last inner offset,
``absolute = wrapper_offset - last_relative + relative``. Under magic 1 a LogAppendTime wrapper
imposes its timestamp on every inner record. Magic 0 has no timestamps (type -1, timestamp -1).

LZ4 under magic 0 carries Kafka's historically broken frame-header checksum; it is decoded with
the check skipped, as the Java consumer does (see ``compression._decompress_lz4_legacy``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.records import (
    COMPRESSION_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_BIT,
    Buffer,
    Record,
    TimestampType,
    codec_of,
)

_V0 = struct.Struct(
    ">"
    "q"  # offset
    "i"  # messageSize
    "I"  # crc: CRC-32 of magic..end
    "b"  # magic
    "b"  # attributes
)
_V1 = struct.Struct(_V0.format + "q")  # + timestamp
_INT32 = struct.Struct(">i")
_CRC_OFFSET = LOG_OVERHEAD  # 12
# Smallest messageSize: crc + magic + attributes (+ timestamp) + key length + value length.
_MIN_SIZE = {0: _V0.size - LOG_OVERHEAD + 8, 1: _V1.size - LOG_OVERHEAD + 8}


class LegacyBatch:
    """One top-level entry of a v0/v1 message set: a plain message or a compressed wrapper.

    Offers the attributes of ``records.RecordBatch`` that consumers use, so the two can be
    handled alike: legacy batches are never transactional or control batches.
    """

    __slots__ = (
        "_budget",
        "_key",
        "_records",
        "_value",
        "_where",
        "attributes",
        "last_offset",
        "magic",
        "position",
        "size_bytes",
        "timestamp_ms",
    )

    is_transactional = False
    is_control = False
    producer_id = -1
    producer_epoch = -1

    def __init__(self, magic: int, attributes: int, offset: int, timestamp_ms: int,
                 key: bytes | None, value: bytes | None, position: int, size_bytes: int,
                 max_decompressed_bytes: int | DecompressionBudget, where: str) -> None:
        self.magic = magic
        self.attributes = attributes
        self.last_offset = offset
        self.timestamp_ms = timestamp_ms
        self.position = position
        self.size_bytes = size_bytes
        self._key = key
        self._value = value
        # The reader shares one budget between all wrappers of a buffer: a cap per wrapper
        # would let a buffer of small gzip wrappers inflate without bound.
        self._budget = max_decompressed_bytes if isinstance(
            max_decompressed_bytes, DecompressionBudget) else DecompressionBudget(
            max_decompressed_bytes)
        self._where = where
        self._records: list[Record] | None = None

    @classmethod
    def parse(cls, buf: Buffer, pos: int, end: int, *, verify_crc: bool = True,
              max_decompressed_bytes: int | DecompressionBudget = DEFAULT_MAX_DECOMPRESSED_BYTES,
              where: str = "") -> LegacyBatch:
        """Parse the top-level entry ``buf[pos:end]`` (framing already checked by the caller)."""
        magic, attributes, offset, timestamp, key, value = _parse_message(
            buf, pos, end, verify_crc, where)
        return cls(magic, attributes, offset, timestamp, key, value, pos, end - pos,
                   max_decompressed_bytes, where)

    @property
    def compression(self) -> Compression:
        return codec_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_offset(self) -> int:
        """First offset held: the wrapper's first inner record (decompresses to find it)."""
        if not self.attributes & COMPRESSION_MASK:
            return self.last_offset
        records = self.records()
        return records[0].offset if records else self.last_offset

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def records(self) -> list[Record]:
        if self._records is None:
            self._records = self._decode()
        return self._records

    def control_record(self) -> None:
        return None

    def _decode(self) -> list[Record]:
        timestamp_type = int(self.timestamp_type)
        codec = self.attributes & COMPRESSION_MASK
        if not codec:
            return [Record(self.last_offset, self.timestamp_ms, timestamp_type, self._key,
                           self._value, [])]
        what = f"compressed message set at offset {self.last_offset}{self._where}"
        if self._value is None:
            raise DecodeError(what, self.position, "the wrapper message has a null value")
        try:
            inner = self._budget.decompress(codec, self._value,
                                            legacy_lz4_header=self.magic == 0)
        except DecodeError as exc:
            raise DecodeError(what, self.position, str(exc)) from None
        entries = []
        pos = 0
        while pos < len(inner):
            if pos + LOG_OVERHEAD > len(inner):
                raise DecodeError(what, pos, "inner message set ends inside a message header")
            size = _INT32.unpack_from(inner, pos + 8)[0]
            stop = pos + LOG_OVERHEAD + size
            if size < 0 or stop > len(inner):
                raise DecodeError(what, pos, f"inner message of {size} bytes runs past the end")
            _, attributes, offset, timestamp, key, value = _parse_message(
                inner, pos, stop, True, self._where)
            if attributes & COMPRESSION_MASK:
                raise DecodeError(what, pos, "inner message is compressed again")
            entries.append((offset, timestamp, key, value))
            pos = stop
        if not entries:
            return []
        # Magic 1 inner offsets count from 0; the wrapper holds the absolute last offset.
        shift = self.last_offset - entries[-1][0] if self.magic > 0 else 0
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            return [Record(offset + shift, self.timestamp_ms, timestamp_type, key, value, [])
                    for offset, _, key, value in entries]
        return [Record(offset + shift, timestamp, timestamp_type, key, value, [])
                for offset, timestamp, key, value in entries]

    def __repr__(self) -> str:
        return (f"LegacyBatch(magic {self.magic}, last offset {self.last_offset}, "
                f"codec {self.attributes & COMPRESSION_MASK})")


def _parse_message(buf: Buffer, pos: int, end: int, verify_crc: bool,
                   where: str) -> tuple[int, int, int, int, bytes | None, bytes | None]:
    """Parse one message ``buf[pos:end]``: (magic, attributes, offset, timestamp, key, value)."""
    magic = buf[pos + MAGIC_OFFSET] if end > pos + MAGIC_OFFSET else -1
    if magic not in (0, 1):
        raise DecodeError(f"message magic{where}", pos + MAGIC_OFFSET, f"unknown magic {magic}")
    if end - pos - LOG_OVERHEAD < _MIN_SIZE[magic]:
        raise DecodeError(f"message{where}", pos,
                          f"{end - pos - LOG_OVERHEAD} bytes is too small for magic {magic}")
    if magic == 0:
        offset, _, crc, _, attributes = _V0.unpack_from(buf, pos)
        timestamp = -1
        key_pos = pos + _V0.size
    else:
        offset, _, crc, _, attributes, timestamp = _V1.unpack_from(buf, pos)
        key_pos = pos + _V1.size
    if verify_crc:
        actual = zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET:end])
        if actual != crc:
            raise CorruptRecordError(f"message at offset {offset}{where}", pos + _CRC_OFFSET,
                                     f"CRC-32 is {actual:#010x}, the message says {crc:#010x}")
    key, value_pos = _read_bytes(buf, key_pos, end, "message key", where)
    value, stop = _read_bytes(buf, value_pos, end, "message value", where)
    if stop != end:
        raise DecodeError(f"message at offset {offset}{where}", stop,
                          f"{end - stop} bytes after the value")
    return magic, attributes & 0xFF, offset, timestamp, key, value


def _read_bytes(buf: Buffer, pos: int, end: int, what: str,
                where: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise DecodeError(f"{what}{where}", pos, "message ends inside a length")
    length = _INT32.unpack_from(buf, pos)[0]
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise DecodeError(f"{what}{where}", pos, f"length {length} runs past the message end")
    return bytes(buf[pos:pos + length]), pos + length
