"""API keys, and choosing the version of each API to speak with a given broker.

Layer: protocol (stdlib only).

A broker states in its ApiVersions response the range of versions it accepts for every API;
this library states its own range in each message class (``VALID_VERSIONS``). For each API
we use the highest version in both ranges, so the same code speaks to Kafka 3.7-3.9 brokers
and to 4.x brokers (which dropped old versions, KIP-896). ``negotiate`` is pure: the
connection calls it once per broker, after its ApiVersions round trip.
"""

from __future__ import annotations

from enum import IntEnum

from kafka_ds.protocol.errors import KafkaDsError


class ApiKey(IntEnum):
    """Kafka API keys (the ``apiKey`` of each message spec)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


class UnsupportedVersionError(KafkaDsError):
    """The broker and this library share no version of an API we need."""


def negotiate(
    ours: dict[int, tuple[int, int]], theirs: dict[int, tuple[int, int]]
) -> dict[int, int]:
    """Pick, for every API both sides know, the highest version both accept.

    ``ours`` and ``theirs`` map api key -> (min version, max version). APIs whose ranges do not
    overlap are left out; ``require`` turns a missing entry into a clear error at use time.
    """
    chosen: dict[int, int] = {}
    for api_key, (our_min, our_max) in ours.items():
        if api_key not in theirs:
            continue
        their_min, their_max = theirs[api_key]
        high = min(our_max, their_max)
        if high >= max(our_min, their_min):
            chosen[api_key] = high
    return chosen


def require(chosen: dict[int, int], api_key: int, broker: str,
            ours: tuple[int, int], theirs: tuple[int, int] | None) -> int:
    """The negotiated version of ``api_key``, or an error naming both ranges."""
    version = chosen.get(api_key)
    if version is None:
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        their_text = f"{theirs[0]}-{theirs[1]}" if theirs else "none (API not offered)"
        raise UnsupportedVersionError(
            f"broker {broker} and kafka_ds share no version of {name}: "
            f"broker accepts {their_text}, kafka_ds speaks {ours[0]}-{ours[1]}"
        )
    return version
