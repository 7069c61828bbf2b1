"""Spark's Kafka JSON shapes: partition offsets, partition lists, timestamps.

The same shapes as the JVM connector, so option values and checkpointed offsets read the same:

* offsets (``startingOffsets``, ``endingOffsets``, the source's offsets in the offset log):
  ``{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}``, -1 meaning latest and -2 earliest.
  Beyond Spark, a topic may be given as ``"earliest"`` or ``"latest"`` instead of a partition
  map: ``{"topicA": "earliest"}`` stands for every partition the topic has when resolved.
* partitions (``assign``): ``{"topicA": [0, 1], "topicB": [2, 4]}``;
* timestamps (``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``): the offsets shape
  with milliseconds since the epoch as values.

Output is canonical: topics sorted by name, partitions by number, no other keys. The engine
decides whether a micro-batch has new data by comparing our offset JSON with the previous one
as strings, so the same offsets must always give the same text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.options import KafkaOptionError

LATEST = -1
EARLIEST = -2
# Topic-level sentinels ({"topic": "earliest"}) are kept as these partition numbers until the
# topic's partitions are known.
ALL_PARTITIONS = -1

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
PARTITIONS_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'

OffsetMap = dict[TopicPartition, int]


def _load(option: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise KafkaOptionError(f"option '{option}' is not valid JSON ({exc}): expected e.g. "
                               f"{example}, got {text!r}") from None


def _long(option: str, value: Any, where: str, example: str) -> int:
    # bool is an int in Python; JSON true/false are not offsets.
    if isinstance(value, bool) or not isinstance(value, int) or not _LONG_MIN <= value <= _LONG_MAX:
        raise KafkaOptionError(f"option '{option}': {where} must be a whole number (a long), "
                               f"got {value!r}; expected e.g. {example}")
    return value


def _partition(option: str, key: Any, topic: str, example: str) -> int:
    text = str(key).strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii():
        raise KafkaOptionError(f"option '{option}': partition {key!r} of topic {topic!r} is not "
                               f"a partition number; expected e.g. {example}")
    number = int(text)
    if not 0 <= number < 2**31:
        raise KafkaOptionError(f"option '{option}': partition {number} of topic {topic!r} must "
                               f"be between 0 and 2147483647")
    return number


def parse_offsets(option: str, text: str, *, allow_topic_sentinels: bool = True,
                  example: str = OFFSETS_EXAMPLE) -> tuple[OffsetMap, dict[str, int]]:
    """``{"t": {"0": 23}}`` -> ({TopicPartition: offset}, {topic: topic-level sentinel}).

    The second map holds topics given as ``"earliest"`` / ``"latest"`` (EARLIEST / LATEST).
    """
    loaded = _load(option, text, example)
    if not isinstance(loaded, dict):
        raise KafkaOptionError(f"option '{option}' must be a JSON object of topics, e.g. "
                               f"{example}, got {text!r}")
    offsets: OffsetMap = {}
    topic_sentinels: dict[str, int] = {}
    for topic, partitions in loaded.items():
        if allow_topic_sentinels and isinstance(partitions, str):
            word = partitions.strip().lower()
            if word not in ("earliest", "latest"):
                raise KafkaOptionError(f"option '{option}': topic {topic!r} must map to "
                                       f"partition offsets, 'earliest' or 'latest', got "
                                       f"{partitions!r}")
            topic_sentinels[topic] = EARLIEST if word == "earliest" else LATEST
            continue
        if not isinstance(partitions, dict):
            raise KafkaOptionError(f"option '{option}': topic {topic!r} must map to an object "
                                   f"of partition offsets, e.g. {example}, got {partitions!r}")
        for key, value in partitions.items():
            partition = _partition(option, key, topic, example)
            offsets[TopicPartition(topic, partition)] = _long(
                option, value, f"the value for {topic}-{partition}", example)
    return offsets, topic_sentinels


def parse_partitions(option: str, text: str) -> list[TopicPartition]:
    """``{"t": [0, 1]}`` -> [TopicPartition("t", 0), TopicPartition("t", 1)] (sorted)."""
    loaded = _load(option, text, PARTITIONS_EXAMPLE)
    if not isinstance(loaded, dict):
        raise KafkaOptionError(f"option '{option}' must be a JSON object of topics to "
                               f"partition lists, e.g. {PARTITIONS_EXAMPLE}, got {text!r}")
    found: set[TopicPartition] = set()
    for topic, partitions in loaded.items():
        if not isinstance(partitions, list):
            raise KafkaOptionError(f"option '{option}': topic {topic!r} must map to a list of "
                                   f"partitions, e.g. {PARTITIONS_EXAMPLE}, got {partitions!r}")
        for item in partitions:
            if isinstance(item, bool) or not isinstance(item, int):
                raise KafkaOptionError(f"option '{option}': partition {item!r} of topic "
                                       f"{topic!r} is not a number; expected e.g. "
                                       f"{PARTITIONS_EXAMPLE}")
            found.add(TopicPartition(topic, _partition(option, item, topic,
                                                       PARTITIONS_EXAMPLE)))
    return sorted(found)


def format_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The offset map as the JSON-ready dict the engine stores: sorted topics and partitions."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return nested


def offsets_from_json(value: Mapping[str, Any] | None) -> OffsetMap:
    """The engine's offset dict (ours, from the offset log) back to {TopicPartition: offset}."""
    if not value:
        return {}
    offsets: OffsetMap = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"a checkpointed Kafka offset must look like {OFFSETS_EXAMPLE}, "
                             f"got {dict(value)!r}")
        for partition, offset in partitions.items():
            offsets[TopicPartition(topic, int(partition))] = int(offset)
    return offsets


def describe(partitions: Iterable[TopicPartition]) -> str:
    """``t-0, t-1, u-3`` (sorted), for messages; Spark prints partitions the same way."""
    return ", ".join(str(tp) for tp in sorted(partitions)) or "(none)"
