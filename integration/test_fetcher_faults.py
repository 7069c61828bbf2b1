"""The fetcher when the log or the cluster changes under it: compaction, a broker restart, a
leader killed in a 3-broker cluster.

These use their own single-broker cluster (a log cleaner that wakes up every 100 ms, and a broker
we may restart without disturbing other tests) and the shared 3-node cluster.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.fetch_helpers import arrow_rows, confluent_rows, produce, produce_values
from integration.harness.cluster import KafkaCluster
from integration.harness.proxy import FETCH, METADATA, swallowed
from integration.props import kafka_ds_properties
from kafka_ds.client.admin import Admin
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.client.topic_errors import (
    TopicAuthorizationError,
    TopicDeletedError,
    UnknownTopicError,
)
from kafka_ds.protocol.errors import DataLossError, ErrorCode
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


# --- issue 14, bug 4: "not authorised", "not (yet) known" and "deleted" are three things ----

def _deny_alice(cluster: KafkaCluster, topic: str) -> None:
    """An ACL (made by confluent-kafka's admin client over PLAINTEXT, whose ANONYMOUS
    principal is a super user in the harness) denying User:alice everything on ``topic``."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                         "*", AclOperation.ALL, AclPermissionType.DENY)
    for future in admin.create_acls([binding]).values():
        future.result(30)


def _alice_fetcher(cluster: KafkaCluster, **options: Any) -> Fetcher:
    props = {**kafka_ds_properties(cluster, "SASL_PLAIN", username="alice"),
             "fail.on.data.loss": "false"}
    props.update({k.replace("_", "."): str(v) for k, v in options.items()})
    return Fetcher.from_properties(props)


@pytest.mark.parametrize("when", ["next_task", "mid_read"])
def test_a_revoked_acl_is_an_authorization_error_never_data_loss(
        kafka: KafkaCluster, topic_factory: Callable[..., str], when: str) -> None:
    """With fail.on.data.loss=false, an ACL revoked while a query runs must fail the read
    with TopicAuthorizationError (naming the topic and the principal), not skip the range
    as if the topic had been deleted. The next task (a new fetcher) learns it from
    Metadata; a read under way from Fetch."""
    topic = topic_factory()
    produce_values(kafka, topic, 3_000, **{"batch.size": 4_096})
    options = {"max_partition_fetch_bytes": 4_096, "arrow_batch_rows": 100}
    with _alice_fetcher(kafka, **options) as fetcher:
        assert len(arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 100)])))) == 100
        if when == "mid_read":
            batches = fetcher.read_arrow([(topic, 0, 100, 3_000)])
            next(batches)
            _deny_alice(kafka, topic)
            with pytest.raises(TopicAuthorizationError) as caught:
                list(batches)
    if when == "next_task":
        _deny_alice(kafka, topic)
        _wait_for_denial(kafka, topic)
        with _alice_fetcher(kafka, **options) as fetcher, \
                pytest.raises(TopicAuthorizationError) as caught:
            list(fetcher.read_arrow([(topic, 0, 100, 3_000)]))
    error = caught.value
    assert error.topic == topic and error.principal == "User:alice"
    assert topic in str(error) and "User:alice" in str(error)
    assert fetcher.metrics.data_loss_incidents == 0 and fetcher.metrics.offsets_skipped == 0
    assert pickle.loads(pickle.dumps(error)).principal == "User:alice"


def _wait_for_denial(cluster: KafkaCluster, topic: str, timeout_s: float = 30.0) -> None:
    """ACLs reach every broker through the metadata log: wait until ours is in force, as
    librdkafka (logged in as alice) sees it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cluster.librdkafka_config("SASL_PLAIN"))
    deadline = time.monotonic() + timeout_s
    while True:
        error = admin.list_topics(topic, timeout=10).topics[topic].error
        if error is not None and error.code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            return
        assert time.monotonic() < deadline, f"the ACL never took effect: {error}"
        time.sleep(0.05)


def test_a_topic_not_yet_known_is_waited_for(kafka: KafkaCluster) -> None:
    """A topic the broker does not know (yet) is retried, not taken for deleted: here it is
    created, and written to, while the read waits. fail.on.data.loss=false must not turn
    the wait into a silent skip."""
    topic = f"not-yet-{uuid.uuid4().hex[:10]}"

    def create_later() -> None:
        time.sleep(1.0)
        kafka.create_topic(topic, 1)
        produce_values(kafka, topic, 50)

    creator = threading.Thread(target=create_later)
    props = {**kafka_ds_properties(kafka), "fail.on.data.loss": "false",
             "fetch.timeout.ms": "60000"}
    with Fetcher.from_properties(props) as fetcher:
        creator.start()
        try:
            rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 50)])))
        finally:
            creator.join()
        assert [r["offset"] for r in rows] == list(range(50))
        assert fetcher.metrics.data_loss_incidents == 0
        assert fetcher.metrics.retries >= 1  # it did wait for the topic


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_that_never_existed_is_unknown_not_deleted(kafka: KafkaCluster,
                                                           fail_on_data_loss: bool) -> None:
    topic = f"never-{uuid.uuid4().hex[:10]}"
    props = {**kafka_ds_properties(kafka), "fetch.timeout.ms": "2000",
             "fail.on.data.loss": str(fail_on_data_loss).lower()}
    with Fetcher.from_properties(props) as fetcher, \
            pytest.raises(UnknownTopicError, match=rf"{topic}.*fetch\.timeout\.ms") as caught:
        list(fetcher.read_arrow([(topic, 0, 0, 5)]))
    assert not isinstance(caught.value, DataLossError)
    assert fetcher.metrics.data_loss_incidents == 0


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_mid_read_is_data_loss(kafka: KafkaCluster,
                                               topic_factory: Callable[..., str],
                                               fail_on_data_loss: bool) -> None:
    topic = topic_factory()
    produce_values(kafka, topic, 3_000, **{"batch.size": 4_096})
    props = {**kafka_ds_properties(kafka), "max.partition.fetch.bytes": "4096",
             "arrow.batch.rows": "100", "fetch.timeout.ms": "60000",
             "fail.on.data.loss": str(fail_on_data_loss).lower()}
    with Fetcher.from_properties(props) as fetcher, \
            Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        batches = fetcher.read_arrow([(topic, 0, 0, 3_000)])
        got = [next(batches)]
        admin.delete_topics([topic])
        if fail_on_data_loss:
            with pytest.raises(TopicDeletedError, match="deleted") as caught:
                got += list(batches)
            assert caught.value.topic == topic and caught.value.partition == 0
            assert pickle.loads(pickle.dumps(caught.value)).topic == topic
        else:
            got += list(batches)
            assert fetcher.metrics.offsets_skipped > 0
        assert fetcher.metrics.data_loss_incidents == 1
    offsets = [r["offset"] for r in arrow_rows(got)]
    assert offsets == list(range(len(offsets))) and len(offsets) < 3_000


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_range_past_the_end_of_the_log_is_data_loss_not_a_timeout(
        kafka: KafkaCluster, topic_factory: Callable[..., str], fail_on_data_loss: bool) -> None:
    """The range ends at 60, the log at 50 (truncated by an unclean election, or an end
    offset beyond latest): after fetch.timeout.ms without progress, the read reports data
    loss at offset 50 (failing, or skipping to the range's end), as the JVM connector does
    after its poll timeout, instead of a timeout that every retry of the task repeats."""
    topic = topic_factory()
    produce_values(kafka, topic, 50)
    props = {**kafka_ds_properties(kafka), "fetch.timeout.ms": "2000",
             "fail.on.data.loss": str(fail_on_data_loss).lower()}
    with Fetcher.from_properties(props) as fetcher:
        got: list[Any] = []
        batches = fetcher.read_arrow([(topic, 0, 0, 60)], include_headers=True)
        if fail_on_data_loss:
            with pytest.raises(DataLossError) as caught:
                for batch in batches:  # the rows before the loss come out first
                    got.append(batch)
            assert caught.value.requested_offset == 50 and caught.value.available_offset == 50
            assert "the log ends at 50, below the range's end 60" in str(caught.value)
        else:
            got += list(batches)
            assert fetcher.metrics.offsets_skipped == 10
        assert fetcher.metrics.data_loss_incidents == 1
    assert arrow_rows(got) == confluent_rows(kafka, topic, 0, 0, 50)


def test_a_kept_fetcher_reads_a_topic_recreated_between_its_reads(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    """A fetcher kept between reads (as the Spark source's executor pool keeps them) caches
    the topic's id. The topic is deleted and recreated with other records; the next read,
    planned on the new topic, must return the new topic's records (as confluent-kafka reads
    them), not report the cached id's topic as deleted and skip what exists."""
    topic = topic_factory()
    produce_values(kafka, topic, 50)
    props = {**kafka_ds_properties(kafka), "fetch.timeout.ms": "30000"}
    with Fetcher.from_properties(props, keep_sessions=True) as fetcher, \
            Admin.from_properties({"bootstrap.servers": kafka.bootstrap()}) as admin:
        first = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 50)])))
        assert len(first) == 50
        admin.delete_topics([topic])
        deadline = time.monotonic() + 30
        while True:  # the deletion takes a moment to finish before the name is free again
            try:
                kafka.create_topic(topic, 1)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        produce_values(kafka, topic, 30, value_bytes=40)
        again = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, 30)],
                                                      include_headers=True)))
        assert fetcher.metrics.data_loss_incidents == 0
    assert again == confluent_rows(kafka, topic, 0, 0, 30)
    assert [len(row["value"]) for row in again] == [40] * 30  # the new records, not the old


# --- Fetch and Metadata replies cut mid-way or lost (the fault proxy) ------------------------

def test_fetch_replies_cut_mid_way_or_lost_cost_nothing(proxied_kafka: Any,
                                                        topic_factory: Callable[..., str]
                                                        ) -> None:
    """A Fetch reply truncated mid-frame (connection cut), one lost (the request times out),
    and a lost Metadata reply on the way back: the read goes on from the same positions,
    with a fresh session, and yields every offset exactly once."""
    cluster = proxied_kafka
    proxy = cluster.proxy
    topic = topic_factory(cluster=cluster, partitions=2)
    for partition in range(2):
        produce_values(cluster, topic, 20_000, partition=partition,
                       **{"compression.type": "lz4", "batch.size": 16_384})
    props = {"bootstrap.servers": cluster.proxy_bootstrap(), "include.headers": "true",
             "max.partition.fetch.bytes": "32768", "arrow.batch.rows": "1000",
             "request.timeout.ms": "3000", "fetch.max.wait.ms": "100",
             "fetch.timeout.ms": "60000"}
    before = proxy.snapshot()
    try:
        with Fetcher.from_properties(props) as fetcher:
            batches = fetcher.read_arrow([(topic, 0, 0, 20_000), (topic, 1, 0, 20_000)])
            got = [next(batches)]
            proxy.cut_mid_response(2, {FETCH})
            proxy.drop_responses(1, {FETCH})
            proxy.drop_responses(1, {METADATA})
            got += list(batches)
            retries, resets = fetcher.metrics.retries, fetcher.metrics.session_resets
    finally:
        proxy.reset()
    caused = proxy.since(before)
    assert caused["cut_mid_responses"] == 2 and caused["dropped_responses"] == 2, caused
    assert caused[swallowed(METADATA)] == 1 and caused[swallowed(FETCH)] >= 1, caused
    rows = arrow_rows(got)
    for partition in range(2):
        assert [r["offset"] for r in rows if r["partition"] == partition] == list(range(20_000))
    assert retries >= 2 and resets == 0  # lost replies are retried, not session errors
