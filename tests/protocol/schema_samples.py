"""Sample messages for the schema tests, built generically from each class's field specs.

Not a test module: ``test_messages_roundtrip``, ``test_messages_incremental`` and
``test_messages_fuzz`` import it. Two generators walk ``schema.field_specs`` the same way the
interpreter does (a field is on the wire when the version has it, and a tagged field only in
flexible versions): Hypothesis strategies for the property tests, and a seeded
``random.Random`` generator for the byte-level tests, which need thousands of valid encodings
quickly and reproducibly.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

from hypothesis import strategies as st

from kafka_ds.protocol.schema import (
    ApiMessage,
    Array,
    FieldSpec,
    Response,
    Scalar,
    Struct,
    field_specs,
)
from kafka_ds.protocol.supported import message_classes

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
# Tags no declared struct uses: what a newer broker might add.
UNKNOWN_TAG_BASE = 1000


def declared_messages() -> list[type[ApiMessage]]:
    """Every request and response class in ``kafka_ds.protocol.messages``, by name."""
    return message_classes()


def declared_responses() -> list[type[ApiMessage]]:
    return [cls for cls in declared_messages() if issubclass(cls, Response)]


def all_versions(cls: type[ApiMessage]) -> list[int]:
    low, high = cls.VALID_VERSIONS
    return list(range(low, high + 1))


def key_versions(cls: type[ApiMessage]) -> list[int]:
    """Lowest, first flexible and highest version (the ones where encodings differ most)."""
    chosen = {cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1]}
    flexible = [version for version in all_versions(cls) if cls.is_flexible(version)]
    if flexible:
        chosen.add(flexible[0])
    return sorted(chosen)


def on_wire(spec: FieldSpec, version: int, flexible: bool) -> bool:
    """Whether a field is encoded at ``version`` (mirrors the interpreter's rule)."""
    if version not in spec.versions:
        return False
    return spec.tag is None or (flexible and version in spec.tagged)


def struct_types(cls: type[Struct]) -> set[type[Struct]]:
    """``cls`` and every struct class reachable from it."""
    found = {cls}
    for _, spec in field_specs(cls):
        inner = spec.type.element if isinstance(spec.type, Array) else spec.type
        if isinstance(inner, type) and inner not in found:
            found |= struct_types(inner)
    return found


def known_tags(cls: type[Struct]) -> set[int]:
    return {spec.tag for _, spec in field_specs(cls) if spec.tag is not None}


def default_of(cls: type[Struct], name: str) -> Any:
    field = next(field for field in dataclasses.fields(cls) if field.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


# --- Hypothesis strategies -----------------------------------------------------------------

_OMIT = object()  # a tagged field left at its default


def _scalar_strategy(scalar: Scalar) -> st.SearchStrategy[Any]:
    name = scalar.name
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        return st.integers(low, high)
    if name == "bool":
        return st.booleans()
    if name == "float64":
        return st.floats(allow_nan=False)
    if name == "uuid":
        return st.uuids(allow_nil=True)
    if name == "string":
        return st.text(max_size=12)
    return st.binary(max_size=16)  # bytes and records


def _value_strategy(wire_type: Any, version: int, flexible: bool, nullable: bool,
                    unknown_tags: bool) -> st.SearchStrategy[Any]:
    if isinstance(wire_type, Scalar):
        strategy = _scalar_strategy(wire_type)
    elif isinstance(wire_type, Array):
        element = _value_strategy(wire_type.element, version, flexible, False, unknown_tags)
        strategy = st.lists(element, max_size=3)
    else:
        strategy = struct_strategy(wire_type, version, flexible, unknown_tags)
    return st.none() | strategy if nullable else strategy


_STRATEGIES: dict[tuple[type, int, bool, bool], st.SearchStrategy[Any]] = {}


def struct_strategy(cls: type[Struct], version: int, flexible: bool,
                    unknown_tags: bool = False) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` holding values only in the fields ``version`` encodes."""
    key = (cls, version, flexible, unknown_tags)
    if key not in _STRATEGIES:
        _STRATEGIES[key] = _build_struct_strategy(cls, version, flexible, unknown_tags)
    return _STRATEGIES[key]


def _build_struct_strategy(cls: type[Struct], version: int, flexible: bool,
                           unknown_tags: bool) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, spec in field_specs(cls):
        if not on_wire(spec, version, flexible):
            continue
        strategy = _value_strategy(spec.type, version, flexible, version in spec.nullable,
                                   unknown_tags)
        if spec.tag is not None:
            strategy = st.just(_OMIT) | strategy
        fields[name] = strategy
    if flexible and unknown_tags:
        taken = known_tags(cls)
        fields["unknown_tags"] = st.dictionaries(
            st.integers(0, 2**32 - 1).filter(lambda tag: tag not in taken),
            st.binary(max_size=6), max_size=2)

    def build(values: dict[str, Any]) -> Struct:
        return cls(**{name: value for name, value in values.items() if value is not _OMIT})

    return st.fixed_dictionaries(fields).map(build)


def message_strategy(cls: type[ApiMessage], version: int,
                     unknown_tags: bool = False) -> st.SearchStrategy[Any]:
    return struct_strategy(cls, version, cls.is_flexible(version), unknown_tags)


# --- seeded random messages ----------------------------------------------------------------

_TEXT = "abcxyz-_.09 \u00e9\u6f22\U0001f600"


def _random_scalar(scalar: Scalar, rng: random.Random, rich: bool) -> Any:
    name = scalar.name
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        if rich:
            return rng.choice([value for value in (low, high, 1, -1, 7) if low <= value <= high])
        return rng.choice([low, high, 0, -1 if low < 0 else 1, rng.randint(low, high)])
    if name == "bool":
        return True if rich else rng.random() < 0.5
    if name == "float64":
        return rng.uniform(-1e9, 1e9)
    if name == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    size = rng.randint(1, 6) if rich else rng.randint(0, 6)
    if name == "string":
        return "".join(rng.choice(_TEXT) for _ in range(size))
    return rng.randbytes(size)


def _random_value(wire_type: Any, version: int, flexible: bool, nullable: bool,
                  rng: random.Random, rich: bool) -> Any:
    if nullable and not rich and rng.random() < 0.2:
        return None
    if isinstance(wire_type, Scalar):
        return _random_scalar(wire_type, rng, rich)
    if isinstance(wire_type, Array):
        count = 2 if rich else rng.choice([0, 1, 1, 2, 3])
        return [_random_value(wire_type.element, version, flexible, False, rng, rich)
                for _ in range(count)]
    return random_struct(wire_type, version, flexible, rng, rich)


def random_struct(cls: type[Struct], version: int, flexible: bool, rng: random.Random,
                  rich: bool = False) -> Any:
    values: dict[str, Any] = {}
    for name, spec in field_specs(cls):
        if not on_wire(spec, version, flexible):
            continue
        if spec.tag is not None and not rich and rng.random() < 0.3:
            continue
        values[name] = _random_value(spec.type, version, flexible, version in spec.nullable,
                                     rng, rich)
    if flexible and (rich or rng.random() < 0.2):
        values["unknown_tags"] = {UNKNOWN_TAG_BASE + rng.randint(0, 50): rng.randbytes(3)}
    return cls(**values)


def random_message(cls: type[ApiMessage], version: int, rng: random.Random,
                   rich: bool = False) -> Any:
    """A random valid ``cls`` at ``version``; ``rich`` sets every field, null-free, 2 per array."""
    return random_struct(cls, version, cls.is_flexible(version), rng, rich)

