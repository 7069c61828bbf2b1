"""murmur2 and the default partitioner, against values computed by the Java client.

The expected hashes come from ``org.apache.kafka.common.utils.Utils.murmur2`` (kafka-clients
4.4.0) run on the JVM, with ``toPositive(h) % 7`` and ``% 1000`` beside them.
"""

from __future__ import annotations

import random

import pytest

from kafka_ds.protocol.partitioner import (
    StickyPartitioner,
    murmur2,
    murmur2_many,
    partition_for_key,
    partitions_for_keys,
)

JAVA = [  # key, Utils.murmur2(key), toPositive % 7, toPositive % 1000
    ("", 275646681, 2, 681),
    ("a", -1563381124, 5, 524),
    ("ab", 316155434, 0, 434),
    ("abc", 479470107, 4, 107),
    ("abcd", -1323649548, 5, 100),
    ("21", -973932308, 3, 340),
    ("foobar", -790332482, 0, 166),
    ("a-little-bit-long-string", -985981536, 1, 112),
    ("key-0", 29210041, 0, 41),
    ("key-1", 193331640, 5, 640),
    ("key-12345", -952703915, 0, 733),
    ("été", -2101193575, 4, 73),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 3, 677),
]


@pytest.mark.parametrize(("key", "java_hash", "mod7", "mod1000"), JAVA)
def test_murmur2_matches_java(key: str, java_hash: int, mod7: int, mod1000: int) -> None:
    data = key.encode("utf-8")
    assert murmur2(data) == java_hash
    assert partition_for_key(data, 7) == mod7
    assert partition_for_key(data, 1000) == mod1000


def test_murmur2_binary_keys_match_java() -> None:
    assert murmur2(bytes(range(256))) == -1948347274
    assert murmur2(bytes([0xFF, 0x80, 0x00, 0x7F, 0xFE])) == 768357719


def test_bulk_hash_equals_scalar() -> None:
    rng = random.Random(7)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    keys += [key.encode() for key, *_ in JAVA]
    assert murmur2_many(keys) == [murmur2(key) for key in keys]
    assert partitions_for_keys(keys, 13) == [partition_for_key(key, 13) for key in keys]


def test_sticky_partition_changes_after_batch_size_bytes() -> None:
    sticky = StickyPartitioner(1000, random.Random(1))
    picks = [sticky.partition("t", (0, 1, 2, 3), 100) for _ in range(100)]
    runs = [picks[i:i + 10] for i in range(0, 100, 10)]
    assert all(len(set(run)) == 1 for run in runs)  # 10 records of 100 bytes per partition
    assert all(runs[i][0] != runs[i + 1][0] for i in range(9))  # never the same one twice
    assert sticky.current("t") == picks[-1]


def test_sticky_partition_avoids_partitions_without_leader() -> None:
    sticky = StickyPartitioner(100, random.Random(3))
    assert {sticky.partition("t", (2,), 60) for _ in range(20)} == {2}
    assert sticky.partition("u", (0, 1), 10) in (0, 1)
