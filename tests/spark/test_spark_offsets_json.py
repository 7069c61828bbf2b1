"""Spark's Kafka JSON shapes: parsing user options, canonical output for the offset log."""

from __future__ import annotations

import json

import pytest

from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.offsets_json import (
    EARLIEST,
    LATEST,
    format_offsets,
    offsets_from_json,
    parse_offsets,
    parse_partitions,
)
from kafka_ds.spark.options import KafkaOptionError


def test_offsets_with_sentinels() -> None:
    offsets, topics = parse_offsets("startingOffsets",
                                    '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    assert offsets == {TopicPartition("topicA", 0): 23, TopicPartition("topicA", 1): LATEST,
                       TopicPartition("topicB", 0): EARLIEST}
    assert topics == {}


def test_topic_level_earliest_and_latest() -> None:
    offsets, topics = parse_offsets("startingOffsets", '{"a": "earliest", "b": {"0": 5}, '
                                                       '"c": "LATEST"}')
    assert offsets == {TopicPartition("b", 0): 5}
    assert topics == {"a": EARLIEST, "c": LATEST}


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not valid JSON"),
    ("[1, 2]", "JSON object of topics"),
    ('{"t": 5}', "must map to"),
    ('{"t": {"x": 5}}', "partition 'x'"),
    ('{"t": {"0": "5"}}', "whole number"),
    ('{"t": {"0": 1.5}}', "whole number"),
    ('{"t": {"0": true}}', "whole number"),
    ('{"t": {"0": 9223372036854775808}}', "whole number"),
    ('{"t": {"-1": 5}}', "between 0 and 2147483647"),
    ('{"t": "first"}', "'earliest' or 'latest'"),
])
def test_malformed_offsets_name_the_option(text: str, fragment: str) -> None:
    with pytest.raises(KafkaOptionError) as info:
        parse_offsets("startingOffsets", text)
    assert "startingOffsets" in str(info.value)
    assert fragment in str(info.value)


def test_partitions_for_assign() -> None:
    assert parse_partitions("assign", '{"b": [2, 0], "a": [1]}') == [
        TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("b", 2)]
    for bad in ('{"a": 1}', '{"a": ["x"]}', '["a"]', "{"):
        with pytest.raises(KafkaOptionError, match="'assign'"):
            parse_partitions("assign", bad)


def test_output_is_sorted_canonical_json() -> None:
    offsets = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 2, TopicPartition("a", 0): 3}
    formatted = format_offsets(offsets)
    # Partitions sort by number (2 before 10), topics by name: the same offsets always give
    # the same text, which is how the engine decides whether a batch has new data.
    assert json.dumps(formatted) == '{"a": {"0": 3}, "b": {"2": 2, "10": 1}}'
    assert offsets_from_json(json.loads(json.dumps(formatted))) == offsets
    assert format_offsets({}) == {}
    assert offsets_from_json(None) == {}
