"""Our hand-declared schemas, compared field by field with Apache Kafka's message specs.

The specs live in ``../shared/kafka-protocol/*.json`` beside the checkout (the steering
repository's copy) or where ``KAFKA_DS_PROTOCOL_SPECS`` points; when neither exists the test
is skipped, not passed. For every message class we declare, and every version we claim to
support, it checks: the version range is one Kafka defines, flexible versions match, and each
struct has the same fields in the same order with the same type, versions, nullable versions,
tags, defaults and ignorable flags.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from kafka_ds.protocol.primitives import ZERO_UUID
from kafka_ds.protocol.schema import (
    NO_VERSIONS,
    ApiMessage,
    Array,
    Scalar,
    Struct,
    VersionRange,
    carries_records,
    field_specs,
    versions,
)
from kafka_ds.protocol.supported import message_classes

# The steering repository's copy sits beside the checkout; KAFKA_DS_PROTOCOL_SPECS overrides.
SPEC_DIR = Path(os.environ.get("KAFKA_DS_PROTOCOL_SPECS")
                or Path(__file__).resolve().parents[3] / "shared" / "kafka-protocol")


def _load_spec(name: str) -> dict[str, Any]:
    text = (SPEC_DIR / f"{name}.json").read_text()
    # The spec files carry // comments (licence headers and notes), which JSON does not allow.
    text = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)
    return json.loads(text)


def _snake(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _version_set(spec: VersionRange, within: range) -> set[int]:
    return {version for version in within if version in spec}


def _json_default(field: dict[str, Any], their_type: str) -> Any:
    """The spec's default for a scalar field, as the Python value we should declare."""
    raw = field.get("default")
    if raw == "null":
        return None
    if their_type == "bool":
        return raw == "true" if raw is not None else False
    if their_type in ("int8", "int16", "uint16", "int32", "int64"):
        return int(str(raw), 0) if raw is not None else 0
    if their_type == "float64":
        return float(raw) if raw is not None else 0.0
    if their_type == "string":
        return raw if raw is not None else ""
    if their_type == "uuid":
        return ZERO_UUID
    if their_type in ("bytes", "records"):
        return b"" if their_type == "bytes" else None
    raise AssertionError(f"unexpected type {their_type}")


def _json_type_name(our_type: Any, common: dict[str, Any]) -> str:
    if isinstance(our_type, Scalar):
        return our_type.name
    if isinstance(our_type, Array):
        return "[]" + _json_type_name(our_type.element, common)
    return "struct"


def _compare_struct(ours: type[Struct], their_fields: list[dict[str, Any]], common: dict[str, Any],
                    within: range, path: str, problems: list[str]) -> None:
    our_fields = field_specs(ours)
    # Fields that exist in none of our versions may be left out of our declaration.
    their_used = [
        field for field in their_fields
        if _version_set(versions(field["versions"]), within)
    ]
    our_names = [name for name, _ in our_fields]
    their_names = [_snake(field["name"]) for field in their_used]
    if our_names != their_names:
        problems.append(f"{path}: fields {our_names} != spec {their_names}")
        return
    defaults = {field.name: field.default for field in dataclasses.fields(ours)}
    for (name, spec), field in zip(our_fields, their_used, strict=True):
        where = f"{path}.{name}"
        their_type = field["type"]
        element = their_type[2:] if their_type.startswith("[]") else their_type
        is_struct = "fields" in field or element in common
        expected_type = ("[]struct" if their_type.startswith("[]") else "struct") if is_struct \
            else their_type
        got_type = _json_type_name(spec.type, common)
        if got_type != expected_type:
            problems.append(f"{where}: type {got_type} != spec {their_type}")
        checks = {
            "versions": (spec.versions, versions(field["versions"])),
            "nullable versions": (spec.nullable, versions(field.get("nullableVersions", "none"))),
            "tagged versions": (spec.tagged, versions(field["taggedVersions"])
                                if "taggedVersions" in field else NO_VERSIONS),
        }
        for label, (mine, theirs) in checks.items():
            if _version_set(mine, within) != _version_set(theirs, within):
                problems.append(f"{where}: {label} {mine} != spec {theirs}")
        if not is_struct and not their_type.startswith("[]"):
            expected_default = _json_default(field, their_type)
            if defaults[name] != expected_default:
                problems.append(f"{where}: default {defaults[name]!r} != spec {expected_default!r}")
        if spec.ignorable != bool(field.get("ignorable", False)):
            problems.append(f"{where}: ignorable {spec.ignorable} != spec "
                            f"{field.get('ignorable', False)}")
        if spec.tag != field.get("tag"):
            problems.append(f"{where}: tag {spec.tag} != spec {field.get('tag')}")
        if is_struct:
            nested = field.get("fields") or common[element]["fields"]
            inner = spec.type.element if isinstance(spec.type, Array) else spec.type
            _compare_struct(inner, nested, common, within, where, problems)


@pytest.mark.skipif(not SPEC_DIR.is_dir(), reason=f"Kafka message specs not found at {SPEC_DIR}")
@pytest.mark.parametrize("message", message_classes(), ids=lambda cls: cls.__name__)
def test_schema_matches_kafka_spec(message: type[ApiMessage]) -> None:
    spec = _load_spec(message.__name__)
    assert spec["apiKey"] == message.API_KEY
    their_low, their_high = versions(spec["validVersions"])[0], versions(spec["validVersions"])[1]
    low, high = message.VALID_VERSIONS
    assert their_low <= low <= high <= (their_high if their_high is not None else high), (
        f"{message.__name__} claims {low}-{high}; Kafka defines {spec['validVersions']}")
    within = range(low, high + 1)
    assert _version_set(versions(message.FLEXIBLE_VERSIONS), within) == _version_set(
        versions(spec["flexibleVersions"]), within)
    common = {struct["name"]: struct for struct in spec.get("commonStructs", [])}
    problems: list[str] = []
    _compare_struct(message, spec["fields"], common, within, message.__name__, problems)
    assert not problems, "\n".join(problems)


def _has_records(node: Any) -> bool:
    if isinstance(node, dict):
        return node.get("type") in ("records", "[]records") or any(
            _has_records(value) for value in node.values())
    return isinstance(node, list) and any(_has_records(item) for item in node)


@pytest.mark.skipif(not SPEC_DIR.is_dir(), reason=f"Kafka message specs not found at {SPEC_DIR}")
def test_the_messages_that_carry_records_are_those_whose_spec_has_a_records_field() -> None:
    # A connection frames these in pieces so that their record batches are not copied.
    ours = {cls.__name__ for cls in message_classes() if carries_records(cls)}
    theirs = {cls.__name__ for cls in message_classes()
              if _has_records(_load_spec(cls.__name__))}
    assert ours == theirs
    assert "ProduceRequest" in ours and "FetchRequest" not in ours


def test_every_request_names_its_response() -> None:
    requests = [cls for cls in message_classes() if cls.__name__.endswith("Request")]
    assert requests, "no request schemas found"
    for request in requests:
        response = request.RESPONSE  # type: ignore[attr-defined]
        assert response.__name__ == request.__name__.replace("Request", "Response")
        assert response.API_KEY == request.API_KEY
        assert response.VALID_VERSIONS == request.VALID_VERSIONS
