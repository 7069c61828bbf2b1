"""Kafka's primitive wire types: fixed-width ints, varints, strings, bytes, UUIDs, tagged fields.

Layer: protocol (stdlib only).

One reader contract everywhere (kio's, see reference/style-models.md): a reader takes the
buffer and a position and returns ``(value, new_position)``; it never copies the buffer and
keeps no cursor of its own. Writers append to a ``bytearray``. A reader that runs past the end
raises ``DecodeError`` naming the type; schema-level code adds which field it was.

Encodings (from the Kafka protocol guide):

- ``varint``/``varlong``: zigzag-encoded signed ints in base-128, least significant group
  first (record fields use these).
- ``unsigned varint``: plain base-128 (lengths and tags in flexible versions).
- classic string/bytes: int16/int32 length prefix, -1 for null.
- compact string/bytes/array: unsigned varint of length + 1, 0 for null.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from kafka_ds.protocol.errors import DecodeError, EncodeError

Buffer = bytes | bytearray | memoryview
Reader = Callable[[Buffer, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)


def _fixed_reader(fmt: struct.Struct, name: str) -> Reader:
    unpack_from = fmt.unpack_from
    size = fmt.size

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise DecodeError(name, pos, "buffer ends early") from None

    return read


def _fixed_writer(fmt: struct.Struct, name: str) -> Writer:
    pack = fmt.pack

    def write(out: bytearray, value: Any) -> None:
        try:
            out += pack(value)
        except struct.error as exc:
            raise EncodeError(f"{name} cannot hold {value!r}") from exc

    return write


read_int8 = _fixed_reader(INT8, "int8")
read_int16 = _fixed_reader(INT16, "int16")
read_uint16 = _fixed_reader(UINT16, "uint16")
read_int32 = _fixed_reader(INT32, "int32")
read_uint32 = _fixed_reader(UINT32, "uint32")
read_int64 = _fixed_reader(INT64, "int64")
read_float64 = _fixed_reader(FLOAT64, "float64")
write_int8 = _fixed_writer(INT8, "int8")
write_int16 = _fixed_writer(INT16, "int16")
write_uint16 = _fixed_writer(UINT16, "uint16")
write_int32 = _fixed_writer(INT32, "int32")
write_uint32 = _fixed_writer(UINT32, "uint32")
write_int64 = _fixed_writer(INT64, "int64")
write_float64 = _fixed_writer(FLOAT64, "float64")


def read_bool(buf: Buffer, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise DecodeError("bool", pos, "buffer ends early")
    return buf[pos] != 0, pos + 1


def write_bool(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


# --- varints -------------------------------------------------------------------------------

def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a base-128 unsigned varint of at most 5 bytes (a uint32)."""
    try:
        byte = buf[pos]
        if byte < 0x80:  # the common one-byte case first
            return byte, pos + 1
        value = byte & 0x7F
        shift = 7
        pos += 1
        while True:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                # A fifth byte carries 7 bits, but only 4 fit: refuse what no writer makes.
                if value > 0xFFFFFFFF:
                    raise DecodeError("unsigned varint", pos, f"{value} exceeds 32 bits")
                return value, pos
            shift += 7
            if shift > 28:
                raise DecodeError("unsigned varint", pos, "longer than 5 bytes")
    except IndexError:
        raise DecodeError("unsigned varint", pos, "buffer ends early") from None


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if value < 0 or value > 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_zigzag(buf: Buffer, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    try:
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        value = byte & 0x7F
        shift = 7
        pos += 1
        for _ in range(max_bytes - 1):
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (value >> 1) ^ -(value & 1), pos
            shift += 7
    except IndexError:
        raise DecodeError(what, pos, "buffer ends early") from None
    raise DecodeError(what, pos, f"longer than {max_bytes} bytes")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varint (signed, fits int32)."""
    return _read_zigzag(buf, pos, 5, "varint")


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varlong (signed, fits int64)."""
    return _read_zigzag(buf, pos, 10, "varlong")


def _write_zigzag(out: bytearray, value: int, bits: int) -> None:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise EncodeError(f"var{'int' if bits == 32 else 'long'} cannot hold {value}")
    value = (value << 1) ^ (value >> (bits - 1))
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    _write_zigzag(out, value, 32)


def write_varlong(out: bytearray, value: int) -> None:
    _write_zigzag(out, value, 64)


def varint_size(value: int) -> int:
    """Bytes a zigzag varint/varlong of ``value`` takes (used for size estimates)."""
    value = (value << 1) ^ (value >> 63)
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


# --- strings and bytes ---------------------------------------------------------------------

def _take(buf: Buffer, pos: int, length: int, what: str) -> int:
    end = pos + length
    if end > len(buf):
        raise DecodeError(what, pos, f"length {length} runs past the end of the buffer")
    return end


def _decode_utf8(raw: Buffer, pos: int, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(what, pos, f"invalid UTF-8 ({exc.reason})") from None


def read_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    """Classic (int16-prefixed) nullable string."""
    length, pos = read_int16(buf, pos)
    if length < 0:
        if length != -1:
            raise DecodeError("string", pos - 2, f"negative length {length}")
        return None, pos
    end = _take(buf, pos, length, "string")
    return _decode_utf8(buf[pos:end], pos, "string"), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    length_plus_one, pos = read_unsigned_varint(buf, pos)
    if length_plus_one == 0:
        return None, pos
    end = _take(buf, pos, length_plus_one - 1, "compact string")
    return _decode_utf8(buf[pos:end], pos, "compact string"), end


def write_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise EncodeError(f"string of {len(raw)} bytes exceeds the int16 length limit")
    out += INT16.pack(len(raw))
    out += raw


def write_compact_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    raw = value.encode("utf-8")
    write_unsigned_varint(out, len(raw) + 1)
    out += raw


def read_bytes(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    """Classic (int32-prefixed) nullable bytes, returned as a zero-copy view."""
    length, pos = read_int32(buf, pos)
    if length < 0:
        if length != -1:
            raise DecodeError("bytes", pos - 4, f"negative length {length}")
        return None, pos
    end = _take(buf, pos, length, "bytes")
    return memoryview(buf)[pos:end], end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    length_plus_one, pos = read_unsigned_varint(buf, pos)
    if length_plus_one == 0:
        return None, pos
    end = _take(buf, pos, length_plus_one - 1, "compact bytes")
    return memoryview(buf)[pos:end], end


def write_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
        return
    out += INT32.pack(len(value))
    out += value


def write_compact_bytes(out: bytearray, value: Buffer | None) -> None:
    if value is None:
        out.append(0)
        return
    write_unsigned_varint(out, len(value) + 1)
    out += value


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = _take(buf, pos, 16, "uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


# --- tagged fields -------------------------------------------------------------------------

def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, memoryview], int]:
    """Read a tagged-field section: count, then (tag, size, bytes) with strictly rising tags.

    Returns the raw bytes of each tag; the schema layer decodes the tags it knows and keeps the
    rest, so a decode-then-encode round trip preserves fields newer than this library.
    """
    count, pos = read_unsigned_varint(buf, pos)
    fields: dict[int, memoryview] = {}
    last_tag = -1
    for _ in range(count):
        tag, pos = read_unsigned_varint(buf, pos)
        if tag <= last_tag:
            raise DecodeError("tagged fields", pos, f"tag {tag} after tag {last_tag}")
        last_tag = tag
        size, pos = read_unsigned_varint(buf, pos)
        end = _take(buf, pos, size, f"tagged field {tag}")
        fields[tag] = memoryview(buf)[pos:end]
        pos = end
    return fields, pos


def write_tagged_fields(out: bytearray, fields: dict[int, Buffer]) -> None:
    write_unsigned_varint(out, len(fields))
    for tag in sorted(fields):
        raw = fields[tag]
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(raw))
        out += raw
