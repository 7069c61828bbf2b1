"""Fetching from the closest replica (KIP-392, issue 13 point 3) in the 3-node cluster, whose
nodes each sit in their own rack (``rack-<id>``) under Kafka's RackAwareReplicaSelector.

A fetcher in a follower's rack must read the data from that follower, not the leader, and
when the follower dies mid-read it must go back to the leader and finish, every record read
exactly once. The proof is what the fetcher sent (each Fetch carries the rack and goes to a
node) and where the record bytes came from, counted for this read alone.
"""

from __future__ import annotations

from collections.abc import Callable

from integration.fetch_helpers import produce_values
from integration.harness.cluster import KafkaCluster
from integration.harness.nodeconf import rack
from kafka_ds.client.fetcher import Fetcher

RECORDS = 4_000


def test_reads_go_to_the_follower_in_the_clients_rack_and_fall_back_to_the_leader(
        kafka_cluster3: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    cluster = kafka_cluster3
    topic = topic_factory(partitions=1, replication_factor=3, cluster=cluster)
    # Small batches (the broker returns at least one whole batch, whatever the limits).
    produce_values(cluster, topic, RECORDS, value_bytes=200, acks="all",
                   **{"batch.size": 8192})
    partition = cluster.partitions(topic)[0]
    leader = partition.leader
    follower = max(n for n in cluster.node_ids if n != leader)
    properties = {"bootstrap.servers": cluster.bootstrap(), "client.rack": rack(follower),
                  # Small responses, so that the read takes many fetches on either side of
                  # the follower's death.
                  "max.partition.fetch.bytes": "32768", "fetch.max.bytes": "32768",
                  "retry.backoff.ms": "200", "fetch.timeout.ms": "120000"}
    offsets: list[int] = []
    values: list[bytes | None] = []
    killed = False
    try:
        with Fetcher.from_properties(properties) as fetcher:
            records = fetcher.read_records([(topic, 0, 0, RECORDS)])
            for _, record in records:
                offsets.append(record.offset)
                values.append(record.value)
                if len(offsets) == RECORDS // 2:
                    before_kill = dict(fetcher.metrics.per_node_bytes)
                    sent_before_kill = fetcher.sent_requests
                    cluster.kill(follower)
                    killed = True
            after = dict(fetcher.metrics.per_node_bytes)
            sent = fetcher.sent_requests
            fallbacks = fetcher.metrics.preferred_replica_fallbacks
    finally:
        if killed:
            cluster.restart_node(follower)  # the session's cluster stays whole for others
    # Every record exactly once, in order, as written.
    assert offsets == list(range(RECORDS))
    assert values == [b"%08d" % i + b"x" * 192 for i in range(RECORDS)]
    # Before the kill: the leader was asked first and named the follower; all data came from
    # the follower in our rack. Every request said which rack we are in.
    # (Later requests to the leader only take the partition out of its fetch session.)
    assert sent_before_kill[0].node_id == leader and sent_before_kill[0].request.topics
    assert {s.node_id for s in sent_before_kill[1:]} <= {leader, follower}
    assert not [s for s in sent_before_kill[1:] if s.node_id == leader and s.request.topics]
    assert any(s.node_id == follower for s in sent_before_kill)
    assert set(before_kill) == {follower} and before_kill[follower] > 0
    assert all(s.request.rack_id == rack(follower) for s in sent if s.request.session_epoch >= 0)
    # After it: the rest came from the leader, none from the third replica.
    from_leader = after.get(leader, 0)
    # The follower may still have answered the one request in flight when it was killed
    # (pipelining): at most one response, fetch.max.bytes.
    late_from_follower = after[follower] - before_kill[follower]
    assert from_leader > 0 and late_from_follower <= 32768, (
        leader, follower, before_kill, after, fallbacks,
        [(s.node_id, s.request.session_epoch, len(s.request.topics)) for s in sent])
    assert set(after) == {leader, follower}
    assert fallbacks >= 1
