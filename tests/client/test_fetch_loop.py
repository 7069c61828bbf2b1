"""The fetch engine's decisions, without a broker: what it makes of a topic that is not
authorised, not known, or gone, and the order partitions go into requests.

The loop runs over a ``Cluster`` whose lookups are stubbed; sending is captured, not done.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ds.client.cluster import Cluster, PartitionInfo, TopicInfo
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetch_config import FetchConfig, FetchMetrics
from kafka_ds.client.fetch_errors import stalled_error
from kafka_ds.client.fetch_loop import FetchLoop
from kafka_ds.client.fetch_state import PartitionRead
from kafka_ds.client.topic_errors import (
    TopicAuthorizationError,
    TopicDeletedError,
    UnknownTopicError,
)
from kafka_ds.net.pool import NetworkClient
from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.messages.fetch import PartitionData
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.types import TopicPartition

TP = TopicPartition("t", 0)
OLD_ID, NEW_ID = uuid.UUID(int=1), uuid.UUID(int=2)


class StubCluster(Cluster):
    """``topic()`` answers from a script; ``known_by_any_broker`` from a flag."""

    def __init__(self) -> None:
        config = ClientConfig.from_properties({"bootstrap.servers": "127.0.0.1:1"})
        super().__init__(NetworkClient(config.bootstrap_servers, config.connection),
                         retry_backoff_ms=10)
        self.answer: Any = None
        self.known_elsewhere: bool | None = False
        self.asked_everyone = 0
        self.invalidated = 0

    def topic(self, name: str, timeout_ms: int | None = None) -> TopicInfo:
        answer = self.answer.pop(0) if isinstance(self.answer, list) else self.answer
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, TopicInfo)
        return answer

    def invalidate(self) -> None:
        self.invalidated += 1
        super().invalidate()

    def known_by_any_broker(self, name: str, timeout_ms: int | None = None) -> bool | None:
        self.asked_everyone += 1
        return self.known_elsewhere


def _info(topic_id: uuid.UUID = OLD_ID) -> TopicInfo:
    return TopicInfo("t", topic_id, {0: PartitionInfo("t", 0, 1, 5, (1,), (1,))})


@pytest.fixture
def cluster() -> Iterator[StubCluster]:
    stub = StubCluster()
    yield stub
    stub.close()


def _loop(cluster: Cluster, **config: Any) -> tuple[FetchLoop, PartitionRead]:
    loop = FetchLoop(cluster, FetchConfig(**config), FetchMetrics(), include_headers=False)
    part = PartitionRead(TP, 0, 100, 40, last_progress_ms=loop.clock.monotonic_ms())
    loop._parts[TP] = part
    return loop, part


def _located(loop: FetchLoop, part: PartitionRead, cluster: StubCluster) -> None:
    cluster.answer = _info()
    assert loop._locate(part, loop.clock.monotonic_ms())
    part.node_id = -1  # as after a retriable error: look the leader up again


def test_an_unknown_topic_never_seen_is_retried_then_reported_unknown(
        cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=False, fetch_timeout_ms=1)
    cluster.answer = UnknownTopicError("t")
    assert not loop._locate(part, loop.clock.monotonic_ms())
    assert not part.done and loop.metrics.data_loss_incidents == 0
    assert cluster.asked_everyone == 0  # never seen: no reason to think it was deleted
    error = stalled_error(part, loop.config)
    assert isinstance(error, UnknownTopicError) and "fetch.timeout.ms" in str(error)


def test_an_unknown_topic_seen_before_and_unknown_everywhere_was_deleted(
        cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=True)
    _located(loop, part, cluster)
    cluster.answer = UnknownTopicError("t")
    cluster.known_elsewhere = False
    assert not loop._locate(part, loop.clock.monotonic_ms())
    assert part.done and loop.metrics.data_loss_incidents == 1
    error = loop._queue[-1].error
    assert isinstance(error, TopicDeletedError) and error.requested_offset == 40


@pytest.mark.parametrize("known_elsewhere", [True, None])
def test_an_unknown_topic_another_broker_knows_is_a_lagging_broker(
        cluster: StubCluster, known_elsewhere: bool | None) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=False)
    _located(loop, part, cluster)
    cluster.answer = UnknownTopicError("t")
    cluster.known_elsewhere = known_elsewhere
    assert not loop._locate(part, loop.clock.monotonic_ms())
    assert not part.done and part.position == 40 and loop.metrics.offsets_skipped == 0
    assert part.retry_at_ms > 0


def test_a_recreated_topic_is_deleted(cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=False)
    _located(loop, part, cluster)
    cluster.answer = _info(NEW_ID)
    assert not loop._locate(part, loop.clock.monotonic_ms())
    assert part.done and part.position == 100 and loop.metrics.offsets_skipped == 60


def test_not_authorised_in_metadata_is_never_skipped(cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=False)
    cluster.answer = TopicAuthorizationError("t", "User:x", "metadata")
    assert not loop._locate(part, loop.clock.monotonic_ms())
    assert part.done and part.position == 40 and loop.metrics.offsets_skipped == 0
    assert isinstance(loop._queue[-1].error, TopicAuthorizationError)


def test_not_authorised_in_fetch_is_never_skipped(cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fail_on_data_loss=False)
    loop._on_partition(part, PartitionData(
        partition_index=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        loop.clock.monotonic_ms())
    error = loop._queue[-1].error
    assert isinstance(error, TopicAuthorizationError) and "offset 40" in str(error)
    assert part.done and loop.metrics.offsets_skipped == 0


def _without_partition_0() -> TopicInfo:
    return TopicInfo("t", OLD_ID, {1: PartitionInfo("t", 1, 1, 5, (1,), (1,))})


def test_a_partition_stale_metadata_lacks_is_looked_up_again_at_once(
        cluster: StubCluster) -> None:
    """Metadata cached before the partition was added (a pooled connection kept between
    Spark tasks) must not fail the read: the partition is looked up again."""
    loop, part = _loop(cluster)
    cluster.answer = [_without_partition_0(), _info()]
    assert loop._locate(part, loop.clock.monotonic_ms())
    assert cluster.invalidated == 1 and cluster.answer == []
    assert part.node_id == 1 and part.leader_epoch == 5 and not part.done


def test_a_partition_fresh_metadata_lacks_too_is_retried_then_named_in_the_timeout(
        cluster: StubCluster) -> None:
    loop, part = _loop(cluster, fetch_timeout_ms=1)
    cluster.answer = [_without_partition_0(), _without_partition_0()]
    assert not loop._locate(part, loop.clock.monotonic_ms())  # no exception: wait and retry
    assert not part.done and part.node_id == -1 and part.retry_at_ms > 0
    assert loop.metrics.retries == 1
    error = stalled_error(part, loop.config)
    assert "t has no partition 0 (it has 1)" in str(error) and "fetch.timeout.ms" in str(error)


def test_partitions_that_returned_data_go_last_in_the_next_request(
        cluster: StubCluster) -> None:
    """As the Java consumer does: a full (sessionless) request is served in order, so the
    partition served first must not always be the same one."""
    loop = FetchLoop(cluster, FetchConfig(), FetchMetrics(), include_headers=False)
    now_ms = loop.clock.monotonic_ms()
    tps = [TopicPartition("t", p) for p in range(3)]
    for tp in tps:
        loop._parts[tp] = PartitionRead(tp, 0, 1000, 0, now_ms, node_id=1)
    sent: list[list[TopicPartition]] = []

    def capture(node: Any, partitions: dict[TopicPartition, Any]) -> None:
        sent.append(list(partitions))

    loop._send = capture  # type: ignore[method-assign]
    loop._dispatch()
    batch = encode_batch([NewRecord(None, b"v", 0)], base_offset=0)
    loop._on_partition(loop._parts[tps[0]],
                       PartitionData(partition_index=0, error_code=0, high_watermark=1000,
                                     records=memoryview(batch)), now_ms)
    loop._dispatch()
    assert sent == [tps, [tps[1], tps[2], tps[0]]]


# --- KIP-392: reading from the replica the leader prefers --------------------------------

def _three_replicas() -> TopicInfo:
    return TopicInfo("t", OLD_ID, {0: PartitionInfo("t", 0, 1, 5, (1, 2, 3), (1, 2, 3))})


def _redirected(cluster: StubCluster, **config: Any) -> tuple[FetchLoop, PartitionRead, list[int]]:
    """A loop whose partition the leader (node 1) just sent to replica 2; records where each
    dispatch would send it."""
    from kafka_ds.client.cluster import BrokerInfo

    cluster.brokers = {n: BrokerInfo(n, "127.0.0.1", 9000 + n, f"rack-{n}") for n in (1, 2, 3)}
    cluster.answer = _three_replicas()
    loop, part = _loop(cluster, client_rack="rack-2", **config)
    targets: list[int] = []
    loop._send = lambda node, partitions: targets.append(node.node_id)  # type: ignore[method-assign]
    loop._dispatch()
    now_ms = loop.clock.monotonic_ms()
    loop._on_partition(part, PartitionData(partition_index=0, error_code=0, high_watermark=100,
                                           preferred_read_replica=2), now_ms)
    loop._nodes.clear()  # no requests in flight: every dispatch sends
    loop._dispatch()
    loop._nodes.clear()
    return loop, part, targets


def test_the_replica_the_leader_prefers_is_read_from(cluster: StubCluster) -> None:
    loop, part, targets = _redirected(cluster)
    assert targets == [1, 2]
    assert part.preferred_node == 2
    assert part.preferred_until_ms >= loop.clock.monotonic_ms() + cluster.metadata_max_age_ms - 1000


def test_out_of_range_on_the_preferred_replica_goes_back_to_the_leader_without_data_loss(
        cluster: StubCluster) -> None:
    loop, part, targets = _redirected(cluster)
    loop._out_of_range = lambda part: pytest.fail("judged data loss on a follower's log")  # type: ignore[method-assign]
    loop._on_partition(part, PartitionData(partition_index=0, error_code=int(
        ErrorCode.OFFSET_OUT_OF_RANGE)), loop.clock.monotonic_ms())
    loop._dispatch()
    assert targets[-1] == 1 and part.preferred_node == -1 and part.retry_at_ms == 0
    assert loop.metrics.preferred_replica_fallbacks == 1


def test_an_error_from_the_preferred_replica_sends_the_read_to_the_leader(
        cluster: StubCluster) -> None:
    loop, part, targets = _redirected(cluster)
    loop._on_partition(part, PartitionData(partition_index=0, error_code=int(
        ErrorCode.NOT_LEADER_OR_FOLLOWER)), loop.clock.monotonic_ms())
    part.retry_at_ms = 0  # past retry.backoff.ms
    loop._dispatch()
    assert targets[-1] == 1 and part.preferred_node == -1


def test_the_preferred_replica_expires_after_metadata_max_age(cluster: StubCluster) -> None:
    loop, part, targets = _redirected(cluster)
    part.preferred_until_ms = loop.clock.monotonic_ms() - 1
    loop._dispatch()
    assert targets[-1] == 1 and part.preferred_node == -1


def test_a_preferred_replica_missing_from_the_metadata_is_not_used(cluster: StubCluster) -> None:
    loop, part, targets = _redirected(cluster)
    del cluster.brokers[2]  # fenced or gone: no longer a live broker
    part.node_id = -1  # as when the partition is located again
    loop._dispatch()
    assert targets[-1] == 1 and part.preferred_node == -1
