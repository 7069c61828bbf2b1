"""Fetch sessions kept between reads (``Fetcher(keep_sessions=True)``, the Spark worker pool's
fetchers): the next read continues each broker's session incrementally, on the wire, against
a real broker; a session the broker lost, an abandoned read and ``close`` are handled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.fetch_helpers import arrow_rows, produce_values
from integration.harness.cluster import KafkaCluster
from integration.props import kafka_ds_properties
from kafka_ds.client.fetcher import Fetcher, SentFetch
from kafka_ds.protocol.errors import KafkaDsError


@pytest.fixture
def kept(kafka: KafkaCluster) -> Iterator[Fetcher]:
    fetcher = Fetcher.from_properties({**kafka_ds_properties(kafka), "fetch.max.wait.ms": "100"},
                                      keep_sessions=True)
    yield fetcher
    fetcher.close()


@pytest.fixture
def two_partitions(kafka: KafkaCluster, topic_factory: Callable[..., str]) -> str:
    topic = topic_factory(partitions=2)
    for partition in (0, 1):
        produce_values(kafka, topic, 150, partition=partition)
    return topic


def _offsets(batches: list[Any], partition: int) -> list[int]:
    return [r["offset"] for r in arrow_rows(batches) if r["partition"] == partition]


def _partitions(sent: SentFetch) -> set[int]:
    return {p.partition for t in sent.request.topics for p in t.partitions}


def _forgotten(sent: SentFetch) -> set[int]:
    return {p for f in sent.request.forgotten_topics_data for p in f.partitions}


def test_the_next_read_continues_the_session_incrementally(kept: Fetcher,
                                                           two_partitions: str) -> None:
    topic = two_partitions
    first = list(kept.read_arrow([(topic, 0, 0, 50), (topic, 1, 0, 50)]))
    assert _offsets(first, 0) == list(range(50)) and _offsets(first, 1) == list(range(50))
    opening = kept.sent_requests[0]
    assert opening.is_full and opening.request.session_epoch == 0
    # Nothing closes the session at the end of the read: it stays open for the next one.
    assert all(s.request.session_epoch != -1 for s in kept.sent_requests)
    assert kept.open_sessions == 1
    (session,) = kept._sessions.values()
    session_id, next_epoch = session.session_id, session.next_epoch
    assert session_id != 0 and next_epoch >= 1

    second = list(kept.read_arrow([(topic, 0, 50, 100), (topic, 1, 50, 100)]))
    assert _offsets(second, 0) == list(range(50, 100))
    assert _offsets(second, 1) == list(range(50, 100))
    resumed = kept.sent_requests[0]
    assert not resumed.is_full
    assert (resumed.request.session_id, resumed.request.session_epoch) == (session_id,
                                                                           next_epoch)
    assert _partitions(resumed) == {0, 1}  # both positions moved: both sent as changes

    # A read of p1 alone forgets p0 in its first (incremental) request.
    third = list(kept.read_arrow([(topic, 1, 100, 150)]))
    assert _offsets(third, 1) == list(range(100, 150)) and not _offsets(third, 0)
    narrowed = kept.sent_requests[0]
    assert not narrowed.is_full and narrowed.request.session_id == session_id
    assert _partitions(narrowed) == {1} and _forgotten(narrowed) == {0}
    assert kept.metrics.full_requests == 1 and kept.metrics.session_resets == 0


def test_a_session_the_broker_lost_between_reads_is_opened_again(
        kept: Fetcher, two_partitions: str) -> None:
    topic = two_partitions
    assert len(list(kept.read_arrow([(topic, 0, 0, 50)]))) >= 1
    # As if the broker had evicted the session from its cache (or restarted) meanwhile.
    (session,) = kept._sessions.values()
    session.session_id = 0x7FFF0002
    rows = arrow_rows(list(kept.read_arrow([(topic, 0, 50, 150)])))
    assert [r["offset"] for r in rows] == list(range(50, 150))
    assert kept.metrics.session_resets == 1  # FETCH_SESSION_ID_NOT_FOUND, once
    assert kept.metrics.full_requests == 2  # then a full request opened a new session
    assert kept.open_sessions == 1


def test_an_abandoned_read_restarts_its_session_and_cannot_resume(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    produce_values(kafka, topic, 2_000, **{"batch.size": 4_096})
    props = {**kafka_ds_properties(kafka), "max.partition.fetch.bytes": "4096",
             "arrow.batch.rows": "50"}
    with Fetcher.from_properties(props, keep_sessions=True) as fetcher:
        abandoned = fetcher.read_arrow([(topic, 0, 0, 2_000)])
        assert next(abandoned).num_rows > 0  # a request for the next data is in flight now
        assert fetcher.sent_requests[-1].request.session_epoch > 0  # incremental
        session_id = fetcher.sent_requests[-1].request.session_id
        rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 1_000, 2_000)])))
        assert [r["offset"] for r in rows] == list(range(1_000, 2_000))
        # The lost request's epoch is unknown: the next read opened the session anew with a
        # full request that retires the old one (its id, epoch 0).
        restart = fetcher.sent_requests[0]
        assert restart.is_full
        assert (restart.request.session_id, restart.request.session_epoch) == (session_id, 0)
        with pytest.raises(KafkaDsError, match="abandoned"):
            list(abandoned)


def test_close_ends_the_kept_sessions(kafka: KafkaCluster, two_partitions: str) -> None:
    fetcher = Fetcher.from_properties(kafka_ds_properties(kafka), keep_sessions=True)
    assert len(list(fetcher.read_arrow([(two_partitions, 0, 0, 150)]))) >= 1
    loop = fetcher._loop
    assert loop is not None and fetcher.open_sessions == 1
    (session,) = fetcher._sessions.values()
    session_id = session.session_id
    fetcher.close()
    assert fetcher.open_sessions == 0
    close = loop.sent_requests[-1]
    assert (close.request.session_id, close.request.session_epoch) == (session_id, -1)


def test_without_keep_sessions_each_read_closes_its_session(kafka: KafkaCluster,
                                                            two_partitions: str) -> None:
    with Fetcher.from_properties(kafka_ds_properties(kafka)) as fetcher:
        for start in (0, 50):
            assert len(list(fetcher.read_arrow([(two_partitions, 0, start, start + 50)]))) >= 1
            assert fetcher.sent_requests[0].is_full
            assert fetcher.sent_requests[-1].request.session_epoch == -1
            assert fetcher.open_sessions == 0
