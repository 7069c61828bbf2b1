"""The fetcher when the log or the cluster changes under it: compaction, a broker restart, a
leader killed in a 3-broker cluster.

These use their own single-broker cluster (a log cleaner that wakes up every 100 ms, and a broker
we may restart without disturbing other tests) and the shared 3-node cluster.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.fetch_helpers import arrow_rows, confluent_rows, produce, produce_values
from integration.harness.cluster import KafkaCluster
from integration.props import kafka_ds_properties
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.protocol.types import TopicPartition


@pytest.fixture(scope="module")
def own_kafka(kafka_version: str) -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, version=kafka_version,
                      broker_properties={"log.cleaner.backoff.ms": 100}) as cluster:
        yield cluster


def _fetcher(cluster: KafkaCluster, **options: Any) -> Fetcher:
    props = {**kafka_ds_properties(cluster), "include.headers": "true"}
    props.update({k.replace("_", "."): str(v) for k, v in options.items()})
    return Fetcher.from_properties(props)


def _high_watermark(fetcher: Fetcher, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)
    return latest_offsets(fetcher.cluster, [tp])[tp]


def test_compacted_topic(own_kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(cluster=own_kafka, config={
        "cleanup.policy": "compact", "segment.ms": 100, "min.cleanable.dirty.ratio": 0.01,
        "min.compaction.lag.ms": 0, "delete.retention.ms": 100})
    rounds, keys = 12, 40
    written: dict[bytes, bytes] = {}
    total = 0
    for round_index in range(rounds):
        # The last rounds rewrite a quarter of the keys each: survivors end up spread out.
        chosen = [k for k in range(keys) if round_index < rounds - 4 or k % 4 == round_index % 4]
        records = [{"key": b"k%d" % k, "value": b"r%d-k%d" % (round_index, k), "partition": 0}
                   for k in chosen]
        written.update({r["key"]: r["value"] for r in records})
        total += len(records)
        produce(own_kafka, topic, records, **{"compression.type": "zstd"})
        time.sleep(0.15)  # the next append rolls the segment (segment.ms)
    with _fetcher(own_kafka) as fetcher:
        assert _high_watermark(fetcher, topic) == total
        deadline = time.monotonic() + 60
        while True:
            rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, total)])))
            if len(rows) < total * 0.5 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(rows) < total * 0.5, "the log cleaner did not run within 60 s"
        offsets = [r["offset"] for r in rows]
        assert offsets == sorted(offsets) and offsets[-1] == total - 1
        assert rows == confluent_rows(own_kafka, topic, 0, 0, total)
        # Every key's latest value survived compaction.
        latest = {r["key"]: r["value"] for r in rows}
        assert latest == written
        # Ranges that start and end inside gaps: the read ends at `end` all the same.
        gaps = [o + 1 for o, nxt in itertools.pairwise(offsets) if nxt > o + 1]
        assert gaps, "expected offset gaps after compaction"
        start = gaps[0]
        end = gaps[-1]
        inside = arrow_rows(list(fetcher.read_arrow([(topic, 0, start, end)])))
        assert [r["offset"] for r in inside] == [o for o in offsets if start <= o < end]
        # A range made only of compacted-away offsets is empty, and ends.
        hole = next(o for o in range(total) if o not in set(offsets))
        assert list(fetcher.read_arrow([(topic, 0, hole, hole + 1)])) == []


def test_broker_restart_mid_read(own_kafka: KafkaCluster,
                                 topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(cluster=own_kafka, partitions=2)
    for partition in range(2):
        produce_values(own_kafka, topic, 20_000, partition=partition,
                       **{"compression.type": "lz4", "batch.size": 16_384})
    with _fetcher(own_kafka, max_partition_fetch_bytes=32_768, arrow_batch_rows=1_000,
                  fetch_timeout_ms=60_000) as fetcher:
        batches = fetcher.read_arrow([(topic, 0, 0, 20_000), (topic, 1, 0, 20_000)])
        got = [next(batches) for _ in range(3)]
        first_session = fetcher.sent_requests[-1].request.session_id
        assert first_session != 0
        own_kafka.restart_node(1)  # graceful stop and start: every connection drops
        got += list(batches)
        rows = arrow_rows(got)
        for partition in range(2):
            offsets = [r["offset"] for r in rows if r["partition"] == partition]
            assert offsets == list(range(20_000))
        sent = fetcher.sent_requests
        full = [index for index, s in enumerate(sent) if s.is_full and s.request.session_epoch == 0]
        assert len(full) >= 2, "a new full fetch after the restart"
        # The new full fetch names the old session (close and reopen) or none (not found).
        assert sent[full[1]].request.session_id in (first_session, 0)
        later = {s.request.session_id for s in sent[full[1] + 1:] if s.request.session_epoch > 0}
        assert later and first_session not in later
        assert fetcher.metrics.retries >= 1


def test_leader_killed_mid_read(kafka_cluster3: KafkaCluster,
                                topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(cluster=kafka_cluster3, replication_factor=3,
                          config={"min.insync.replicas": 2})
    produce_values(kafka_cluster3, topic, 30_000, acks="all",
                   **{"compression.type": "zstd", "batch.size": 16_384})
    leader = next(p.leader for p in kafka_cluster3.partitions(topic) if p.partition == 0)
    with _fetcher(kafka_cluster3, max_partition_fetch_bytes=16_384, arrow_batch_rows=500,
                  fetch_timeout_ms=90_000) as fetcher:
        batches = fetcher.read_arrow([(topic, 0, 0, 30_000)])
        got = [next(batches) for _ in range(2)]
        kafka_cluster3.kill(leader)  # kill -9: no controlled shutdown
        try:
            got += list(batches)
        finally:
            kafka_cluster3.restart_node(leader)
        offsets = [r["offset"] for r in arrow_rows(got)]
        assert offsets == list(range(30_000))
        nodes = {s.node_id for s in fetcher.sent_requests}
        assert leader in nodes and len(nodes) >= 2, "continued from the new leader"
        assert fetcher.metrics.retries >= 1
