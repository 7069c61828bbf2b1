"""Round trips of every declared message at every version, and what encoding must refuse.

- Hypothesis builds messages generically from ``field_specs`` (``schema_samples``) and checks
  ``decode_exact(encode(msg)) == msg`` for every class at every version it claims.
- Unknown tagged fields, at any depth, survive decode then encode byte for byte.
- A non-default value on a field the version lacks is refused unless the spec marks the field
  ignorable; so are out-of-range integers and null where the version allows no null.
- Golden vectors, derived by hand from the protocol specs, one field per line: they pin the
  byte layout that the generic round trip alone cannot (a symmetric mistake round-trips).

``KAFKA_DS_HYPOTHESIS_EXAMPLES`` raises the number of examples per (class, version).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_samples import (
    INT_RANGES,
    all_versions,
    declared_messages,
    default_of,
    message_strategy,
    on_wire,
)

from kafka_ds.protocol.errors import DecodeError, EncodeError
from kafka_ds.protocol.messages.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)
from kafka_ds.protocol.messages.init_producer_id import InitProducerIdResponse
from kafka_ds.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from kafka_ds.protocol.schema import (
    ApiMessage,
    Array,
    FieldSpec,
    Scalar,
    Struct,
    decode,
    decode_exact,
    encode,
    field_specs,
)

MESSAGES = declared_messages()
EXAMPLES = int(os.environ.get("KAFKA_DS_HYPOTHESIS_EXAMPLES", "12"))
EVERY_VERSION = [(cls, version) for cls in MESSAGES for version in all_versions(cls)]
FLEXIBLE_VERSIONS = [(cls, version) for cls, version in EVERY_VERSION if cls.is_flexible(version)]


def _id(value: Any) -> str:
    return value.__name__ if isinstance(value, type) else f"v{value}"


hypothesis_settings = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)


def test_every_api_is_declared() -> None:
    expected = {
        "AddOffsetsToTxn", "AddPartitionsToTxn", "ApiVersions", "CreatePartitions",
        "CreateTopics", "DeleteRecords", "DeleteTopics", "DescribeCluster", "DescribeConfigs",
        "DescribeProducers", "DescribeTransactions", "EndTxn", "Fetch", "FindCoordinator",
        "InitProducerId", "ListOffsets", "ListTransactions", "Metadata", "OffsetCommit",
        "OffsetFetch", "Produce", "SaslAuthenticate", "SaslHandshake", "TxnOffsetCommit",
    }
    names = {cls.__name__ for cls in MESSAGES}
    assert {f"{api}{kind}" for api in expected for kind in ("Request", "Response")} <= names


# --- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize(("cls", "version"), EVERY_VERSION, ids=_id)
@hypothesis_settings
@given(data=st.data())
def test_roundtrip(cls: type[ApiMessage], version: int, data: st.DataObject) -> None:
    message = data.draw(message_strategy(cls, version))
    encoded = encode(message, version)
    assert decode_exact(cls, version, encoded) == message


def _unknown_tags(value: Any, path: str = "") -> Iterator[tuple[str, dict[int, bytes]]]:
    """Every struct's unknown tags by path (``==`` on messages ignores them)."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unknown_tags(item, f"{path}[{index}]")
    elif isinstance(value, Struct):
        if value.unknown_tags:
            yield path, {tag: bytes(raw) for tag, raw in value.unknown_tags.items()}
        for name, _ in field_specs(type(value)):
            yield from _unknown_tags(getattr(value, name), f"{path}.{name}")


@pytest.mark.parametrize(("cls", "version"), FLEXIBLE_VERSIONS, ids=_id)
@hypothesis_settings
@given(data=st.data())
def test_unknown_tags_survive(cls: type[ApiMessage], version: int, data: st.DataObject) -> None:
    message = data.draw(message_strategy(cls, version, unknown_tags=True))
    encoded = encode(message, version)
    decoded = decode_exact(cls, version, encoded)
    assert decoded == message
    assert list(_unknown_tags(decoded)) == list(_unknown_tags(message))
    assert encode(decoded, version) == encoded


def test_unknown_tag_bytes_are_kept_verbatim() -> None:
    # InitProducerIdResponse v4 with an unknown tag 9 holding 3 bytes, inserted by hand.
    body = bytes.fromhex("00000000" "0000" "0000000000000007" "0001")
    encoded = body + bytes.fromhex("01" "09" "03" "aabbcc")
    decoded = decode_exact(InitProducerIdResponse, 4, encoded)
    assert decoded.unknown_tags == {9: b"\xaa\xbb\xcc"}
    assert encode(decoded, 4) == encoded


def test_unknown_tags_inside_a_default_tagged_struct_survive() -> None:
    # current_leader equals its default (-1, -1) but carries a tag from a newer broker: it
    # must still be written, or re-encoding would drop that tag.
    leader = LeaderIdAndEpoch(unknown_tags={3: b"\x01"})
    response = FetchResponse(responses=[FetchableTopicResponse(
        partitions=[PartitionData(current_leader=leader)])])
    decoded = decode_exact(FetchResponse, 12, encode(response, 12))
    assert decoded.responses[0].partitions[0].current_leader.unknown_tags == {3: b"\x01"}


# --- what encoding refuses -----------------------------------------------------------------

def _struct_paths(cls: type[Struct], version: int, flexible: bool,
                  path: tuple[str, ...] = ()) -> Iterator[tuple[type[Struct], tuple[str, ...]]]:
    """Each struct reachable at ``version``, with the field names leading to it."""
    yield cls, path
    for name, spec in field_specs(cls):
        inner = spec.type.element if isinstance(spec.type, Array) else spec.type
        if isinstance(inner, type) and on_wire(spec, version, flexible):
            yield from _struct_paths(inner, version, flexible, (*path, name))


def _build(cls: Any, path: tuple[str, ...], leaf: dict[str, Any]) -> Any:
    """An otherwise default ``cls`` with one element along ``path`` and ``leaf`` set at its end."""
    if not path:
        return cls(**leaf)
    spec = dict(field_specs(cls))[path[0]]
    if isinstance(spec.type, Array):
        return cls(**{path[0]: [_build(spec.type.element, path[1:], leaf)]})
    return cls(**{path[0]: _build(spec.type, path[1:], leaf)})


def _other_value(spec: FieldSpec, default: Any) -> Any:
    """A valid value different from ``default``."""
    wire_type = spec.type
    if isinstance(wire_type, Array):
        element = wire_type.element
        return [element() if isinstance(element, type) else element.default]
    if isinstance(wire_type, type):
        name, inner = field_specs(wire_type)[0]
        return dataclasses.replace(default, **{name: _other_value(inner, getattr(default, name))})
    assert isinstance(wire_type, Scalar)
    if wire_type.name in INT_RANGES:
        return default ^ 1
    return {"bool": not default, "float64": 1.5, "string": "x", "uuid": uuid.UUID(int=1)}.get(
        wire_type.name, b"x")


@pytest.mark.parametrize("cls", MESSAGES, ids=_id)
def test_absent_fields_are_refused_unless_ignorable(cls: type[ApiMessage]) -> None:
    for version in all_versions(cls):
        flexible = cls.is_flexible(version)
        for struct, path in _struct_paths(cls, version, flexible):
            for name, spec in field_specs(struct):
                if on_wire(spec, version, flexible):
                    continue
                message = _build(cls, path, {name: _other_value(spec, default_of(struct, name))})
                where = f"{cls.__name__} v{version} {'.'.join((*path, name))}"
                if spec.ignorable:
                    assert encode(message, version) == encode(_build(cls, path, {}), version), where
                else:
                    with pytest.raises(EncodeError):
                        encode(message, version)
                        pytest.fail(f"{where} was encoded although v{version} lacks it")


def _wire_fields(cls: type[ApiMessage]) -> Iterator[tuple[int, tuple[str, ...], str, FieldSpec]]:
    for version in all_versions(cls):
        flexible = cls.is_flexible(version)
        for struct, path in _struct_paths(cls, version, flexible):
            for name, spec in field_specs(struct):
                if on_wire(spec, version, flexible):
                    yield version, path, name, spec


@pytest.mark.parametrize("cls", MESSAGES, ids=_id)
def test_out_of_range_integers_are_refused(cls: type[ApiMessage]) -> None:
    for version, path, name, spec in _wire_fields(cls):
        scalar = spec.type.element if isinstance(spec.type, Array) else spec.type
        if not isinstance(scalar, Scalar) or scalar.name not in INT_RANGES:
            continue
        low, high = INT_RANGES[scalar.name]
        for bad in (low - 1, high + 1):
            value = [bad] if isinstance(spec.type, Array) else bad
            with pytest.raises(EncodeError):
                encode(_build(cls, path, {name: value}), version)
                pytest.fail(f"{cls.__name__} v{version} {name}={bad} was encoded")


@pytest.mark.parametrize("cls", MESSAGES, ids=_id)
def test_null_is_refused_where_the_version_allows_none(cls: type[ApiMessage]) -> None:
    for version, path, name, spec in _wire_fields(cls):
        nullable_type = isinstance(spec.type, Array) or (
            isinstance(spec.type, Scalar) and spec.type.name in ("string", "bytes", "records"))
        if not nullable_type:
            continue
        message = _build(cls, path, {name: None})
        if version in spec.nullable:
            assert decode_exact(cls, version, encode(message, version)) == message
        else:
            with pytest.raises(EncodeError):
                encode(message, version)
                pytest.fail(f"{cls.__name__} v{version} {name}=None was encoded")


def test_classic_string_longer_than_int16_is_refused() -> None:
    request = FetchRequest(topics=[FetchTopic(topic="t" * 0x8000)])
    with pytest.raises(EncodeError):
        encode(request, 11)
    encode(request, 12)  # compact strings have no such limit


@pytest.mark.parametrize("cls", MESSAGES, ids=_id)
def test_versions_outside_the_range_are_refused(cls: type[ApiMessage]) -> None:
    low, high = cls.VALID_VERSIONS
    encoded = encode(cls(), low)
    for version in (low - 1, high + 1):
        with pytest.raises(EncodeError):
            encode(cls(), version)
        with pytest.raises(DecodeError):
            decode(cls, version, encoded)


# --- golden vectors ------------------------------------------------------------------------

def _hex(text: str) -> bytes:
    """Bytes from lines of ``hex  # comment``; spaces inside the hex are ignored."""
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()))


TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")

METADATA_REQUEST_V12 = MetadataRequest(
    topics=[MetadataRequestTopic(name="orders")],
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=True,
)
METADATA_REQUEST_V12_BYTES = _hex("""
    02                                  # topics: compact array, length + 1 = 2
    00000000000000000000000000000000    # topics[0].topic_id: zero uuid (ask by name)
    07 6f7264657273                     # topics[0].name: compact string, length + 1, "orders"
    00                                  # topics[0]: no tagged fields
    00                                  # allow_auto_topic_creation: false
    01                                  # include_topic_authorized_operations: true
    00                                  # no tagged fields
""")

# An incremental consumer fetch: session 0x1234 at epoch 3, one partition added or changed,
# one partition forgotten. v15 sends no replica_id (it moved to the tagged replica_state).
FETCH_REQUEST_V15 = FetchRequest(
    max_wait_ms=500,
    min_bytes=1,
    max_bytes=52428800,
    isolation_level=1,
    session_id=0x1234,
    session_epoch=3,
    topics=[FetchTopic(topic_id=TOPIC_ID, partitions=[FetchPartition(
        partition=2, current_leader_epoch=5, fetch_offset=1000, last_fetched_epoch=4,
        partition_max_bytes=1048576)])],
    forgotten_topics_data=[ForgottenTopic(topic_id=TOPIC_ID, partitions=[7])],
    rack_id="rack-a",
)
FETCH_REQUEST_V15_BYTES = _hex("""
    000001f4                            # max_wait_ms: 500
    00000001                            # min_bytes: 1
    03200000                            # max_bytes: 52428800 (50 MiB)
    01                                  # isolation_level: 1, read_committed
    00001234                            # session_id
    00000003                            # session_epoch
    02                                  # topics: compact array of 1
    6ba7b8109dad11d180b400c04fd430c8    # topics[0].topic_id
    02                                  # topics[0].partitions: compact array of 1
    00000002                            # .partition: 2
    00000005                            # .current_leader_epoch: 5
    00000000000003e8                    # .fetch_offset: 1000
    00000004                            # .last_fetched_epoch: 4
    ffffffffffffffff                    # .log_start_offset: -1 (only followers set it)
    00100000                            # .partition_max_bytes: 1 MiB
    00                                  # partitions[0]: no tagged fields
    00                                  # topics[0]: no tagged fields
    02                                  # forgotten_topics_data: compact array of 1
    6ba7b8109dad11d180b400c04fd430c8    # forgotten_topics_data[0].topic_id
    02 00000007                         # forgotten_topics_data[0].partitions: [7]
    00                                  # forgotten_topics_data[0]: no tagged fields
    07 7261636b2d61                     # rack_id: compact string "rack-a"
    00                                  # no tagged fields (cluster_id, replica_state unset)
""")

# A read_committed answer carrying tagged fields at two levels (KIP-951 leader hints).
FETCH_RESPONSE_V16 = FetchResponse(
    throttle_time_ms=0,
    error_code=0,
    session_id=0x1234,
    responses=[FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[PartitionData(
        partition_index=2,
        error_code=6,
        high_watermark=1500,
        last_stable_offset=1490,
        log_start_offset=0,
        current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=7),
        aborted_transactions=[AbortedTransaction(producer_id=42, first_offset=1200)],
        records=b"\xde\xad\xbe\xef",
    )])],
    node_endpoints=[NodeEndpoint(node_id=2, host="b2", port=9092)],
)
FETCH_RESPONSE_V16_BYTES = _hex("""
    00000000                            # throttle_time_ms: 0
    0000                                # error_code: 0
    00001234                            # session_id
    02                                  # responses: compact array of 1
    6ba7b8109dad11d180b400c04fd430c8    # responses[0].topic_id
    02                                  # responses[0].partitions: compact array of 1
    00000002                            # .partition_index: 2
    0006                                # .error_code: 6, NOT_LEADER_OR_FOLLOWER
    00000000000005dc                    # .high_watermark: 1500
    00000000000005d2                    # .last_stable_offset: 1490
    0000000000000000                    # .log_start_offset: 0
    02                                  # .aborted_transactions: compact array of 1
    000000000000002a                    #   .producer_id: 42
    00000000000004b0                    #   .first_offset: 1200
    00                                  #   no tagged fields
    ffffffff                            # .preferred_read_replica: -1
    05 deadbeef                         # .records: compact bytes, 4 opaque bytes
    01                                  # partitions[0]: 1 tagged field
    01 09                               #   tag 1 (current_leader), 9 bytes
    00000002 00000007 00                #   leader_id 2, leader_epoch 7, no tagged fields
    00                                  # responses[0]: no tagged fields
    01                                  # 1 tagged field
    00 0e                               #   tag 0 (node_endpoints), 14 bytes
    02                                  #   compact array of 1
    00000002                            #   .node_id: 2
    03 6232                             #   .host: "b2"
    00002384                            #   .port: 9092
    00                                  #   .rack: null
    00                                  #   no tagged fields
""")

INIT_PRODUCER_ID_RESPONSE = InitProducerIdResponse(
    throttle_time_ms=0, error_code=0, producer_id=4000, producer_epoch=3)
INIT_PRODUCER_ID_RESPONSE_V1_BYTES = _hex("""
    00000000                            # throttle_time_ms: 0
    0000                                # error_code: 0
    0000000000000fa0                    # producer_id: 4000
    0003                                # producer_epoch: 3
""")
INIT_PRODUCER_ID_RESPONSE_V4_BYTES = INIT_PRODUCER_ID_RESPONSE_V1_BYTES + _hex("""
    00                                  # no tagged fields (v2+ is flexible)
""")

GOLDEN = [
    ("MetadataRequest v12", METADATA_REQUEST_V12, 12, METADATA_REQUEST_V12_BYTES),
    ("FetchRequest v15", FETCH_REQUEST_V15, 15, FETCH_REQUEST_V15_BYTES),
    ("FetchResponse v16", FETCH_RESPONSE_V16, 16, FETCH_RESPONSE_V16_BYTES),
    ("InitProducerIdResponse v1", INIT_PRODUCER_ID_RESPONSE, 1,
     INIT_PRODUCER_ID_RESPONSE_V1_BYTES),
    ("InitProducerIdResponse v4", INIT_PRODUCER_ID_RESPONSE, 4,
     INIT_PRODUCER_ID_RESPONSE_V4_BYTES),
]


@pytest.mark.parametrize(("message", "version", "expected"),
                         [case[1:] for case in GOLDEN], ids=[case[0] for case in GOLDEN])
def test_golden_encode(message: ApiMessage, version: int, expected: bytes) -> None:
    assert bytes(encode(message, version)).hex() == expected.hex()


@pytest.mark.parametrize(("message", "version", "expected"),
                         [case[1:] for case in GOLDEN], ids=[case[0] for case in GOLDEN])
def test_golden_decode(message: ApiMessage, version: int, expected: bytes) -> None:
    assert decode_exact(type(message), version, expected) == message
