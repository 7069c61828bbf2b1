"""The worker-level connection pool: reuse, bounds, idle eviction, no leaked sockets, and, in
Spark, micro-batches that do not reconnect (connections counted at a proxy in front of the
broker, which sees every connection a client opens).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from integration.fetch_helpers import produce_values
from integration.harness.cluster import KafkaCluster
from integration.harness.proxy import ProxiedKafkaCluster
from integration.spark_source_util import unique_name, wait_for_rows, wait_until
from kafka_ds.client.fetcher import OffsetRange
from kafka_ds.spark.fetcher_pool import FetcherPool
from kafka_ds.spark.source import KafkaInputPartition, read_partition


def _sockets() -> int:
    """Open sockets of this process (TCP connections and socket pairs), from /proc."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


@pytest.fixture
def filled_topic(kafka: KafkaCluster, topic: str) -> str:
    produce_values(kafka, topic, 100)
    return topic


def _read(pool: FetcherPool, props: dict[str, str], topic: str) -> int:
    with pool.lease(props) as fetcher:
        return sum(b.num_rows for b in fetcher.read_arrow([(topic, 0, 0, 100)]))


def test_reads_reuse_one_connection_set_and_close_all_releases_it(
        kafka: KafkaCluster, filled_topic: str) -> None:
    pool = FetcherPool(capacity=4, idle_timeout_ms=60_000)
    props = {"bootstrap.servers": kafka.bootstrap()}
    before = _sockets()
    assert _read(pool, props, filled_topic) == 100
    in_use = _sockets() - before
    assert in_use >= 1
    for _ in range(9):
        assert _read(pool, props, filled_topic) == 100
    assert _sockets() - before == in_use  # no new socket after the first read
    assert (pool.metrics.created, pool.metrics.reused, pool.idle_count()) == (1, 9, 1)
    pool.close_all()
    assert _sockets() == before


def test_tasks_continue_the_pooled_fetch_session(kafka: KafkaCluster, filled_topic: str) -> None:
    """The next task on a worker continues the broker's fetch session incrementally: no
    full request opens it and no close request ends it per task."""
    pool = FetcherPool(capacity=4, idle_timeout_ms=60_000)
    props = {"bootstrap.servers": kafka.bootstrap()}
    before = _sockets()
    with pool.lease(props) as fetcher:
        assert sum(b.num_rows for b in fetcher.read_arrow([(filled_topic, 0, 0, 50)])) == 50
        assert fetcher.sent_requests[0].is_full and fetcher.open_sessions == 1
    for start in (50, 75):
        with pool.lease(props) as again:
            assert again is fetcher
            rows = sum(b.num_rows for b in again.read_arrow([(filled_topic, 0, start,
                                                              start + 25)]))
            assert rows == 25
            assert not any(s.is_full for s in again.sent_requests)
    assert (fetcher.metrics.full_requests, fetcher.metrics.session_resets) == (1, 0)
    assert all(s.request.session_epoch != -1 for s in fetcher.sent_requests)
    loop = fetcher._loop
    assert loop is not None
    pool.close_all()  # closes the session (epoch -1) and the sockets
    assert fetcher.open_sessions == 0
    assert loop.sent_requests[-1].request.session_epoch == -1
    assert _sockets() == before


def test_a_failed_read_closes_its_connection(kafka: KafkaCluster, filled_topic: str) -> None:
    pool = FetcherPool()
    props = {"bootstrap.servers": kafka.bootstrap()}
    before = _sockets()
    with pytest.raises(RuntimeError), pool.lease(props) as fetcher:
        next(fetcher.read_arrow([(filled_topic, 0, 0, 100)]))
        raise RuntimeError("the task failed half-way")
    assert pool.metrics.closed_on_error == 1 and pool.idle_count() == 0
    assert _sockets() == before


def test_idle_connections_are_evicted_and_closed(kafka: KafkaCluster,
                                                 filled_topic: str) -> None:
    pool = FetcherPool(idle_timeout_ms=300)
    props = {"bootstrap.servers": kafka.bootstrap()}
    before = _sockets()
    assert _read(pool, props, filled_topic) == 100
    assert pool.idle_count() == 1 and _sockets() > before
    # the evictor thread closes it without another lease
    wait_until(lambda: pool.idle_count() == 0, 30, "idle eviction")
    assert pool.metrics.evicted_idle == 1
    assert _sockets() == before
    pool.close_all()


def test_capacity_bounds_idle_entries_and_keys_separate_settings(
        kafka: KafkaCluster, filled_topic: str) -> None:
    pool = FetcherPool(capacity=2, idle_timeout_ms=60_000)
    props = {"bootstrap.servers": kafka.bootstrap()}
    before = _sockets()
    # three tasks at once in one worker: three connection sets, two kept afterwards
    with pool.lease(props) as first, pool.lease(props) as second, pool.lease(props) as third:
        assert len({id(first), id(second), id(third)}) == 3
        assert pool.leased_count() == 3
    assert pool.idle_count() == 2 and pool.metrics.evicted_capacity == 1
    other = {**props, "client.id": "another-query"}
    with pool.lease(other):
        pass  # a different key: never served from the first key's entries
    assert pool.metrics.created == 4 and pool.metrics.reused == 0
    pool.close_all()
    assert _sockets() == before


def test_an_abandoned_task_gives_back_a_sound_connection(kafka: KafkaCluster,
                                                         filled_topic: str) -> None:
    pool_args = (16, 60_000)
    props = {"bootstrap.servers": kafka.bootstrap(), "arrow.batch.rows": "10",
             "max.partition.fetch.bytes": "1024"}
    task = KafkaInputPartition([OffsetRange(filled_topic, 0, 0, 100)])
    partial = read_partition(props, False, *pool_args, task)
    assert next(partial).num_rows > 0
    partial.close()  # Spark stops reading early (e.g. a LIMIT)
    from kafka_ds.spark.fetcher_pool import worker_pool

    pool = worker_pool(*pool_args)
    assert pool.idle_count() >= 1
    created = pool.metrics.created
    assert sum(b.num_rows for b in read_partition(props, False, *pool_args, task)) == 100
    assert pool.metrics.created == created  # reused, and it still reads correctly


# --- in Spark: connections per worker over many micro-batches ---------------------------------

@pytest.fixture(scope="module")
def proxied(kafka_version: str) -> Iterator[ProxiedKafkaCluster]:
    with ProxiedKafkaCluster(nodes=1, version=kafka_version) as cluster:
        yield cluster


def _live_links(cluster: ProxiedKafkaCluster) -> int:
    proxy = cluster.proxies[1]
    with proxy._lock:
        return sum(1 for link in proxy._links if not link.closed)


def test_micro_batches_open_a_constant_number_of_connections(
        spark: Any, proxied: ProxiedKafkaCluster) -> None:
    topic = f"src-pool-{uuid.uuid4().hex[:6]}"
    proxied.create_topic(topic, 2)
    proxy = proxied.proxies[1]
    options = {"kafka.bootstrap.servers": proxied.proxy_bootstrap(), "subscribe": topic,
               "startingOffsets": "earliest", "fetcherPool.idleTimeoutMs": "10000"}
    name = unique_name("pool")
    before = proxy.stats["connections"]
    query = (spark.readStream.format("pykafka").options(**options).load().writeStream
             .format("memory").queryName(name).trigger(processingTime="100 milliseconds")
             .start())
    opened = []
    try:
        for batch in range(10):
            produce_values(proxied, topic, 20, partition=batch % 2)
            wait_for_rows(spark, query, name, 20 * (batch + 1))
            opened.append(proxy.stats["connections"] - before)
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert len(batches) >= 8
    # The driver (planning) and each Python worker that ran a task connect once; after the
    # first batches every micro-batch reuses them. Without the pool each batch would open
    # its own (bootstrap + broker) connections: 20 or more here (checked: 4, 6, 8 ... 26
    # with leases never served from the pool).
    assert opened[-1] - opened[2] <= 2, opened
    assert opened[-1] <= 10, opened
    # Nothing left open once the query stopped and the workers' idle entries expired.
    wait_until(lambda: _live_links(proxied) == 0, 60, "the pooled connections to close")
