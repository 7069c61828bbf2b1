"""Declarative message schemas and the one generic interpreter that encodes and decodes them.

Layer: protocol (stdlib + ``primitives``).

Each Kafka API is declared by hand, once, as keyword-only dataclasses whose fields carry their
wire type and version ranges (``messages/*.py``)::

    @dataclass(kw_only=True, slots=True)
    class FindCoordinatorRequest(Request):
        API_KEY = ApiKey.FIND_COORDINATOR
        VALID_VERSIONS = (0, 6)
        FLEXIBLE_VERSIONS = "3+"
        key: str = f(STRING, "0-3")
        key_type: int = f(INT8, "1+")

The declarations mirror the structure of Kafka's JSON message specs (field order, version
ranges, nullable and tagged versions, flexible versions), so ``tests/protocol/test_conformance``
can compare them field by field with the official files. Field names are the snake_case of the
spec names, without alias tables.

How the interpreter works: for each (class, version) it compiles once a list of per-field
reader and writer closures (no ``exec``, no metaclass), cached in ``_CODECS``. Flexible
versions switch strings, bytes and arrays to their compact forms and add a tagged-field
section to every struct; tags this library does not know are kept in ``unknown_tags`` and
written back, so decode-then-encode is lossless.

Encoding refuses, rather than silently drops, a value set on a field that the chosen version
does not have (unless the spec marks the field ignorable): sending a request that means
something other than what the caller asked for is worse than failing.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

from kafka_ds.protocol import primitives as p
from kafka_ds.protocol.errors import DecodeError, EncodeError

Buffer = p.Buffer

# --- version ranges ------------------------------------------------------------------------


class VersionRange(NamedTuple):
    """Inclusive range of versions; ``high`` None means "and every later version"."""

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version and (
            self.high is None or version <= self.high
        )

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


NO_VERSIONS = VersionRange(1, 0)  # an empty range: contains nothing


@functools.cache
def versions(spec: str) -> VersionRange:
    """Parse the JSON spec notation: ``"3+"``, ``"0-7"``, ``"5"`` or ``"none"``."""
    spec = spec.strip()
    if spec == "none":
        return NO_VERSIONS
    if spec.endswith("+"):
        return VersionRange(int(spec[:-1]), None)
    if "-" in spec:
        low, high = spec.split("-")
        return VersionRange(int(low), int(high))
    return VersionRange(int(spec), int(spec))


# --- wire types ----------------------------------------------------------------------------


class Scalar(NamedTuple):
    """A primitive wire type. Strings, bytes and records change encoding in flexible versions."""

    name: str
    default: Any


BOOL = Scalar("bool", False)
INT8 = Scalar("int8", 0)
INT16 = Scalar("int16", 0)
UINT16 = Scalar("uint16", 0)
INT32 = Scalar("int32", 0)
INT64 = Scalar("int64", 0)
FLOAT64 = Scalar("float64", 0.0)
UUID = Scalar("uuid", p.ZERO_UUID)
STRING = Scalar("string", "")
BYTES = Scalar("bytes", b"")
# A record set (RecordBatch v2 bytes), decoded separately by ``records``; kept as a view here.
RECORDS = Scalar("records", None)


class Array(NamedTuple):
    """An array of a scalar type or of a ``Struct`` subclass."""

    element: Any  # Scalar | type[Struct]


WireType = Scalar | Array | type  # type = a Struct subclass (a single nested struct)


class FieldSpec(NamedTuple):
    """How one dataclass field travels on the wire."""

    type: WireType
    versions: VersionRange
    nullable: VersionRange
    tag: int | None
    tagged: VersionRange
    ignorable: bool


_SPEC_KEY = "kafka"


def f(
    wire_type: WireType,
    versions_spec: str = "0+",
    *,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = dataclasses.MISSING,
    ignorable: bool = False,
) -> Any:
    """Declare a message field: its wire type, versions, nullable versions and tag.

    ``default`` is what a field holds when absent from the chosen version (and what the
    encoder compares against before refusing a value the version cannot carry). When not
    given, it is the type's zero value: 0, False, "", b"", the zero UUID, an empty list, or
    a default-constructed struct.
    """
    spec = FieldSpec(
        type=wire_type,
        versions=versions(versions_spec),
        nullable=versions(nullable),
        tag=tag,
        tagged=versions(tagged) if tagged is not None else
        (versions(versions_spec) if tag is not None else NO_VERSIONS),
        ignorable=ignorable,
    )
    metadata = {_SPEC_KEY: spec}
    if default is not dataclasses.MISSING:
        if isinstance(default, list | dict):
            raise TypeError("mutable defaults are shared between instances; "
                            "use the implicit default")
        return dataclasses.field(default=default, metadata=metadata)
    if isinstance(wire_type, Array):
        return dataclasses.field(default_factory=list, metadata=metadata)
    if isinstance(wire_type, Scalar):
        return dataclasses.field(default=wire_type.default, metadata=metadata)
    return dataclasses.field(default_factory=wire_type, metadata=metadata)


@dataclass(kw_only=True, slots=True)
class Struct:
    """Base of every schema struct; holds the tagged fields this library does not know."""

    unknown_tags: dict[int, bytes] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )


@dataclass(kw_only=True, slots=True)
class ApiMessage(Struct):
    """A top-level request or response body."""

    API_KEY: ClassVar[int]
    VALID_VERSIONS: ClassVar[tuple[int, int]]
    FLEXIBLE_VERSIONS: ClassVar[str]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return version in versions(cls.FLEXIBLE_VERSIONS)


@dataclass(kw_only=True, slots=True)
class Request(ApiMessage):
    """A request body; ``RESPONSE`` names the class its answer decodes into."""

    RESPONSE: ClassVar[type[ApiMessage]]


@dataclass(kw_only=True, slots=True)
class Response(ApiMessage):
    """A response body."""


T = TypeVar("T", bound=Struct)

# --- compiled codecs -----------------------------------------------------------------------

Reader = Callable[[Buffer, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]

_FIXED_READERS: dict[str, Reader] = {
    "bool": p.read_bool, "int8": p.read_int8, "int16": p.read_int16, "uint16": p.read_uint16,
    "int32": p.read_int32, "int64": p.read_int64, "float64": p.read_float64, "uuid": p.read_uuid,
}
_FIXED_WRITERS: dict[str, Writer] = {
    "bool": p.write_bool, "int8": p.write_int8, "int16": p.write_int16,
    "uint16": p.write_uint16, "int32": p.write_int32, "int64": p.write_int64,
    "float64": p.write_float64, "uuid": p.write_uuid,
}


def _not_null(reader: Reader, what: str) -> Reader:
    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        value, end = reader(buf, pos)
        if value is None:
            raise DecodeError(what, pos, "null where this version does not allow null")
        return value, end

    return read


def _refuse_null(writer: Writer, what: str) -> Writer:
    # Without this a None would go out as a wire null that the peer must reject.
    def write(out: bytearray, value: Any) -> None:
        if value is None:
            raise EncodeError(f"{what} cannot be null in this version")
        writer(out, value)

    return write


def _scalar_codec(scalar: Scalar, flexible: bool, nullable: bool) -> tuple[Reader, Writer]:
    if scalar.name in _FIXED_READERS:
        return _FIXED_READERS[scalar.name], _FIXED_WRITERS[scalar.name]
    reader: Reader
    writer: Writer
    if scalar.name == "string":
        reader, writer = ((p.read_compact_string, p.write_compact_string) if flexible
                          else (p.read_string, p.write_string))
    else:  # bytes and records share an encoding
        reader, writer = ((p.read_compact_bytes, p.write_compact_bytes) if flexible
                          else (p.read_bytes, p.write_bytes))
    if not nullable:
        reader = _not_null(reader, scalar.name)
        writer = _refuse_null(writer, scalar.name)
    return reader, writer


def _array_codec(element: Reader, element_writer: Writer, flexible: bool,
                 nullable: bool) -> tuple[Reader, Writer]:
    def read(buf: Buffer, pos: int) -> tuple[list[Any] | None, int]:
        if flexible:
            count, pos = p.read_unsigned_varint(buf, pos)
            count -= 1
        else:
            count, pos = p.read_int32(buf, pos)
        if count < 0:
            if count != -1 or not nullable:
                raise DecodeError("array", pos, f"length {count} is not allowed here")
            return None, pos
        # Each element takes at least one byte: a huge count in a short buffer is corrupt,
        # and must fail here rather than by looping or allocating.
        if count > len(buf) - pos:
            raise DecodeError("array", pos, f"length {count} exceeds the remaining bytes")
        items: list[Any] = []
        append = items.append
        for index in range(count):
            try:
                item, pos = element(buf, pos)
            except DecodeError as exc:
                exc.field_path.append(f"[{index}]")
                raise
            append(item)
        return items, pos

    def write(out: bytearray, value: list[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise EncodeError("array cannot be null in this version")
            if flexible:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
            return
        if flexible:
            p.write_unsigned_varint(out, len(value) + 1)
        else:
            p.write_int32(out, len(value))
        for item in value:
            element_writer(out, item)

    return read, write


def _type_codec(wire_type: WireType, version: int, flexible: bool,
                nullable: bool) -> tuple[Reader, Writer]:
    if isinstance(wire_type, Scalar):
        return _scalar_codec(wire_type, flexible, nullable)
    if isinstance(wire_type, Array):
        element_reader, element_writer = _type_codec(wire_type.element, version, flexible, False)
        return _array_codec(element_reader, element_writer, flexible, nullable)
    codec = _struct_codec(wire_type, version, flexible)
    return codec.read, codec.write


class _FieldPlan(NamedTuple):
    name: str
    spec: FieldSpec
    default: Any  # a value, or a zero-argument factory when ``has_factory``
    has_factory: bool


class _StructCodec:
    """Reader and writer of one struct class at one version (compiled once, then cached)."""

    def __init__(self, cls: type[Struct], version: int, flexible: bool) -> None:
        self.cls = cls
        self.version = version
        self.flexible = flexible
        self.body: list[tuple[str, Reader, Writer]] = []
        self.tagged: dict[int, tuple[str, Reader, Writer, _FieldPlan]] = {}
        self.absent: list[_FieldPlan] = []  # fields this version lacks: must hold defaults
        _CODECS[(cls, version, flexible)] = self  # before recursing: structs may nest
        for plan in _field_plans(cls):
            spec = plan.spec
            present = version in spec.versions
            is_tagged = spec.tag is not None and version in spec.tagged
            if not present or (spec.tag is not None and not (flexible and is_tagged)):
                self.absent.append(plan)
                continue
            reader, writer = _type_codec(spec.type, version, flexible, version in spec.nullable)
            if is_tagged:
                assert spec.tag is not None
                self.tagged[spec.tag] = (plan.name, reader, writer, plan)
            else:
                self.body.append((plan.name, reader, writer))

    def read(self, buf: Buffer, pos: int) -> tuple[Struct, int]:
        values: dict[str, Any] = {}
        name = "?"
        try:
            for name, reader, _ in self.body:
                values[name], pos = reader(buf, pos)
            if self.flexible:
                name = "(tagged fields)"
                raw_tags, pos = p.read_tagged_fields(buf, pos)
                unknown: dict[int, bytes] = {}
                for tag, raw in raw_tags.items():
                    known = self.tagged.get(tag)
                    if known is None:
                        unknown[tag] = bytes(raw)
                        continue
                    name = known[0]
                    values[name], end = known[1](raw, 0)
                    if end != len(raw):
                        raise DecodeError(f"tagged field {tag}", pos,
                                          f"{len(raw) - end} bytes left over")
                if unknown:
                    values["unknown_tags"] = unknown
        except DecodeError as exc:
            exc.field_path.append(name)
            raise
        return self.cls(**values), pos

    def write(self, out: bytearray, value: Struct) -> None:
        for plan in self.absent:
            current = getattr(value, plan.name)
            expected = plan.default() if plan.has_factory else plan.default
            if current != expected and not plan.spec.ignorable:
                raise EncodeError(
                    f"{type(value).__name__}.{plan.name} is set ({current!r}) but version "
                    f"{self.version} does not have this field (versions {plan.spec.versions})"
                )
        for name, _, writer in self.body:
            try:
                writer(out, getattr(value, name))
            except EncodeError as exc:
                raise EncodeError(f"{type(value).__name__}.{name}: {exc}") from None
        if self.flexible:
            tags: dict[int, Buffer] = dict(value.unknown_tags)
            for tag, (name, _, writer, plan) in self.tagged.items():
                field_value = getattr(value, name)
                default = plan.default() if plan.has_factory else plan.default
                # Tagged fields are only sent when not default; == ignores unknown tags, which
                # must survive a round trip even inside a struct that otherwise is default.
                if field_value != default or _carries_unknown_tags(field_value):
                    raw = bytearray()
                    writer(raw, field_value)
                    tags[tag] = raw
            p.write_tagged_fields(out, tags)


def _carries_unknown_tags(value: Any) -> bool:
    if isinstance(value, Struct):
        return bool(value.unknown_tags) or any(
            _carries_unknown_tags(getattr(value, plan.name)) for plan in _field_plans(type(value)))
    if isinstance(value, list):
        return any(_carries_unknown_tags(item) for item in value)
    return False


_CODECS: dict[tuple[type, int, bool], _StructCodec] = {}
_PLANS: dict[type, list[_FieldPlan]] = {}


def _field_plans(cls: type[Struct]) -> list[_FieldPlan]:
    plans = _PLANS.get(cls)
    if plans is None:
        plans = []
        for field in dataclasses.fields(cls):
            spec = field.metadata.get(_SPEC_KEY)
            if spec is None:
                continue  # unknown_tags and other bookkeeping
            if field.default_factory is not dataclasses.MISSING:
                plans.append(_FieldPlan(field.name, spec, field.default_factory, True))
            else:
                plans.append(_FieldPlan(field.name, spec, field.default, False))
        _PLANS[cls] = plans
    return plans


def _struct_codec(cls: type[Struct], version: int, flexible: bool) -> _StructCodec:
    codec = _CODECS.get((cls, version, flexible))
    return codec if codec is not None else _StructCodec(cls, version, flexible)


def _check_version(cls: type[ApiMessage], version: int) -> None:
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise EncodeError(f"{cls.__name__} has no version {version} (this library supports "
                          f"{low}-{high})")


def encode(message: ApiMessage, version: int, out: bytearray | None = None) -> bytearray:
    """Append ``message`` encoded at ``version`` to ``out`` (a new buffer when None)."""
    cls = type(message)
    _check_version(cls, version)
    out = bytearray() if out is None else out
    _struct_codec(cls, version, cls.is_flexible(version)).write(out, message)
    return out


def decode(cls: type[T], version: int, buf: Buffer, pos: int = 0) -> tuple[T, int]:
    """Decode one ``cls`` message at ``version`` from ``buf[pos:]``; returns it and the end."""
    assert issubclass(cls, ApiMessage)
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise DecodeError(f"{cls.__name__} v{version}", pos, "unsupported version")
    try:
        value, end = _struct_codec(cls, version, cls.is_flexible(version)).read(buf, pos)
    except DecodeError as exc:
        exc.field_path.append(f"{cls.__name__} v{version}:")
        raise
    return value, end  # type: ignore[return-value]


def decode_exact(cls: type[T], version: int, buf: Buffer) -> T:
    """Decode a whole buffer as one message; bytes left over mean we misread the schema."""
    value, end = decode(cls, version, buf)
    if end != len(buf):
        raise DecodeError(f"{cls.__name__} v{version}", end,
                          f"{len(buf) - end} unexpected bytes after the message")
    return value


def field_specs(cls: type[Struct]) -> list[tuple[str, FieldSpec]]:
    """The declared fields of ``cls`` in wire order (for conformance tests and tools)."""
    return [(plan.name, plan.spec) for plan in _field_plans(cls)]


_CARRIES_RECORDS: dict[type[Struct], bool] = {}


def carries_records(cls: type[Struct]) -> bool:
    """Whether ``cls`` holds a ``records`` field at any depth: the messages (Produce requests,
    Fetch responses) whose large byte strings are worth keeping out of copies. Asked per
    request sent, so the answer is kept per class."""
    known = _CARRIES_RECORDS.get(cls)
    if known is None:
        known = _CARRIES_RECORDS[cls] = any(
            wire_type is RECORDS or (isinstance(wire_type, type) and carries_records(wire_type))
            for wire_type in (spec.type.element if isinstance(spec.type, Array) else spec.type
                              for _, spec in field_specs(cls)))
    return known


__all__ = [
    "BOOL", "BYTES", "FLOAT64", "INT8", "INT16", "INT32", "INT64", "RECORDS", "STRING",
    "UINT16", "UUID", "ApiMessage", "Array", "FieldSpec", "Request", "Response", "Struct",
    "VersionRange", "carries_records", "decode", "decode_exact", "encode", "f", "field_specs",
    "uuid", "versions",
]
