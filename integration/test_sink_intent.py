"""The exactly-once sink's commit against a real broker, with the requests that go wrong.

The intent is the commit point: once a reader has decided "no intent for batch B" and the
batch's transactions were aborted, no earlier write of B's intent may become visible, or the
restarted query rolls forward transactions that no longer exist (``SinkDataLossError``).
These tests deliver the driver's last request late through the proxy (``hold_requests``,
the bytes were on the wire when the driver gave up or died) or leave a write open, and read
the topic with confluent-kafka as the oracle of what a read_committed reader sees. After the
intent, every transaction of the batch must end committed, even if an EndTxn's answer is
lost (``blackhole``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from integration.harness.proxy import END_TXN, PRODUCE, ProxiedKafkaCluster, swallowed
from integration.producer_util import read_all, read_committed
from kafka_ds.client.admin import Admin
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.offsets import earliest_offsets
from kafka_ds.client.producer import Producer
from kafka_ds.client.transactions import fence_transactional_id
from kafka_ds.protocol.errors import KafkaTimeoutError
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark import sink_commit, sink_intent, sink_pool, sink_task
from kafka_ds.spark.sink_commit import BatchCommit
from kafka_ds.spark.sink_intent import (
    CommitIntent,
    IntentStore,
    intent_for,
    intent_transactional_id,
)
from kafka_ds.spark.sink_messages import SinkCommitMessage, TaskOutcome
from kafka_ds.spark.sink_options import InputColumns, SinkOptions, parse_sink_options


@pytest.fixture
def patient_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers wait a minute before settling an open intent write themselves, so that a
    test passes only if the settle it means to test (abort's, or an explicit one) ran."""
    monkeypatch.setattr(sink_intent, "_SETTLE_WAIT_MS", 60_000)


@pytest.fixture
def store(proxied: ProxiedKafkaCluster) -> Iterator[IntentStore]:
    """A store of a new sink id whose every byte goes through the proxy."""
    sink_id = f"intent-{uuid.uuid4().hex[:8]}"
    properties = {"bootstrap.servers": proxied.proxy_bootstrap()}
    cluster = Cluster.connect(ClientConfig.from_properties(properties))
    store = IntentStore(cluster, properties, f"{sink_id}.intent", sink_id)
    try:
        yield store
    finally:
        sink_pool.discard_producer(store._producer_properties())
        cluster.close()


def _intent(store: IntentStore, batch_id: int) -> CommitIntent:
    return intent_for(store.sink_id, "q", "r", batch_id, 2, None, [])


def _batches_seen(proxied: ProxiedKafkaCluster, topic: str, *, read_committed: bool
                  ) -> list[int]:
    return [CommitIntent.from_json(record.value or b"", topic).batch_id
            for record in read_all(proxied.bootstrap(), topic, read_committed=read_committed)]


def _prepare(options: SinkOptions, values: list[bytes], batch_id: int, run_id: str,
             monkeypatch: pytest.MonkeyPatch) -> list[SinkCommitMessage]:
    """Two tasks of a micro-batch write ``values`` (split in two) as Spark's would."""
    messages = []
    half = len(values) // 2
    for partition, part in enumerate((values[:half], values[half:])):
        task = sink_task.TaskInfo(partition_id=partition, attempt=0, batch_id=batch_id,
                                  query_id="q", run_id=run_id, speculation=False)
        monkeypatch.setattr(sink_task.TaskInfo, "current",
                            classmethod(lambda cls, task=task: task))
        messages.append(sink_task.write_task(
            iter([pa.record_batch([pa.array(part)], names=["value"])]), options,
            InputColumns(value="value"), None, 60_000))
    return messages


def _sink_options(proxied: ProxiedKafkaCluster, name: str) -> tuple[SinkOptions, str]:
    """Options of an exactly-once sink through the proxy, and its new 2-partition topic."""
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    proxied.create_topic(topic, 2)
    return parse_sink_options({"kafka.bootstrap.servers": proxied.proxy_bootstrap(),
                               "topic": topic,
                               "transactionalIdPrefix": f"{name}-{uuid.uuid4().hex[:8]}"}), topic


def _close_pooled(options: SinkOptions) -> None:
    for key in list(sink_pool._producers):
        sink_pool._producers.pop(key).close(0)
    sink_pool.discard_cluster(options.properties)


def _wait_released(proxied: ProxiedKafkaCluster, before: dict[str, int]) -> None:
    """Until the held request went upstream, then 2 s for the broker to handle it."""
    deadline = time.monotonic() + 20
    while proxied.proxy.since(before)["released_requests"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proxied.proxy.since(before)["released_requests"] >= 1  # it reached the broker
    time.sleep(2.0)


def test_a_commit_of_an_intent_that_arrives_after_settle_is_refused(
        proxied: ProxiedKafkaCluster, store: IntentStore, patient_readers: None) -> None:
    """The driver's EndTxn(commit) of batch 2's intent is still on the wire when it gives
    up (and drops its producer); abort() settles the intent's id and reads batch 1. When the
    EndTxn reaches the coordinator 5 s later it must commit nothing: batch 2's record was
    appended (read_uncommitted sees it) yet never becomes visible."""
    store.write(_intent(store, 1))
    proxy = proxied.proxy
    before = proxy.snapshot()
    proxy.hold_requests(5.0, 1, {END_TXN})
    with pytest.raises(KafkaTimeoutError):
        store.write(_intent(store, 2), timeout_ms=1_500)
    assert proxy.since(before)["held_requests"] == 1  # the commit went out, and was held
    store.settle()
    decided = store.latest("q")
    assert decided is not None and decided.batch_id == 1
    _wait_released(proxied, before)  # the coordinator answers it PRODUCER_FENCED
    assert _batches_seen(proxied, store.topic, read_committed=False) == [1, 2]
    assert _batches_seen(proxied, store.topic, read_committed=True) == [1]
    again = store.latest("q")
    assert again is not None and again.batch_id == 1


def test_a_reader_settles_an_intent_write_whose_driver_died(
        proxied: ProxiedKafkaCluster, store: IntentStore,
        caplog: pytest.LogCaptureFixture) -> None:
    """A driver appended batch 2's intent and died before EndTxn: the transaction stays open
    (the topic's last stable offset is stuck below it). A reader waits for it a little, then
    settles it (aborted) and reads batch 1; a later write still works."""
    store.write(_intent(store, 1))
    dead = Producer({"bootstrap.servers": proxied.bootstrap(),
                     "transactional.id": intent_transactional_id(store.sink_id),
                     "transaction.timeout.ms": "600000"})
    dead.init_transactions()
    dead.begin_transaction()
    dead.send(store.topic, _intent(store, 2).to_json(), key=store.sink_id.encode(),
              partition=0)
    dead.flush(10_000)
    dead.close(0)  # no EndTxn: only its transaction timeout (10 min) would end it
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kafka_ds.spark.sink_intent"):
        decided = store.latest("q")
    waited_s = time.monotonic() - started
    assert decided is not None and decided.batch_id == 1
    assert 2.5 < waited_s < 30, waited_s  # it waited, then settled (not the 10 min timeout)
    assert any("still open" in r.getMessage() for r in caplog.records)
    assert _batches_seen(proxied, store.topic, read_committed=True) == [1]
    store.write(_intent(store, 3))
    latest = store.latest("q")
    assert latest is not None and latest.batch_id == 3
    assert _batches_seen(proxied, store.topic, read_committed=True) == [1, 3]


def test_a_produce_of_an_intent_that_arrives_after_settle_is_refused(
        proxied: ProxiedKafkaCluster, store: IntentStore, patient_readers: None) -> None:
    """A driver sent batch 2's intent record and died with the Produce still on the wire.
    A settle, then the Produce reaches the partition 5 s later with the old epoch: the
    broker refuses it (KIP-890: the partition checks the transaction with its
    coordinator), so not even a read_uncommitted reader sees it."""
    store.write(_intent(store, 1))
    proxy = proxied.proxy
    dead = Producer({"bootstrap.servers": proxied.proxy_bootstrap(),
                     "transactional.id": intent_transactional_id(store.sink_id),
                     "transaction.timeout.ms": "600000"})
    dead.init_transactions()
    dead.begin_transaction()
    before = proxy.snapshot()
    proxy.hold_requests(5.0, 1, {PRODUCE})
    dead.send(store.topic, _intent(store, 2).to_json(), key=store.sink_id.encode(),
              partition=0)
    deadline = time.monotonic() + 10
    while proxy.since(before)["held_requests"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.since(before)["held_requests"] == 1
    dead.close(0)  # died: no EndTxn, no abort
    store.settle()
    decided = store.latest("q")
    assert decided is not None and decided.batch_id == 1
    _wait_released(proxied, before)
    assert _batches_seen(proxied, store.topic, read_committed=False) == [1]
    again = store.latest("q")
    assert again is not None and again.batch_id == 1


def test_a_kept_intent_producer_fenced_elsewhere_writes_the_next_intent(
        proxied: ProxiedKafkaCluster, store: IntentStore) -> None:
    """Another worker's abort() settled the intent's id, fencing the producer this worker
    kept from the last batch: the next write still succeeds (each write starts with its
    own InitProducerId) instead of failing the query."""
    store.write(_intent(store, 1))
    kept = sink_pool.producer(store._producer_properties())
    fence_transactional_id(store.cluster, intent_transactional_id(store.sink_id))
    store.write(_intent(store, 2))
    assert sink_pool.producer(store._producer_properties()) is kept  # no failure, kept on
    assert _batches_seen(proxied, store.topic, read_committed=True) == [1, 2]
    latest = store.latest("q")
    assert latest is not None and latest.batch_id == 2


def test_the_last_intent_is_read_when_the_log_no_longer_starts_at_zero(
        proxied: ProxiedKafkaCluster, store: IntentStore) -> None:
    """DeleteRecords (or retention on an operator's compact,delete intent topic) moved the
    log start past the reader's first look back: it starts there instead of failing."""
    proxied.create_topic(store.topic, 1, config={"cleanup.policy": "compact,delete"})
    for batch_id in range(1, 6):
        store.write(_intent(store, batch_id))  # a record and a commit marker each
    tp = TopicPartition(store.topic, 0)
    Admin(store.cluster).delete_records({tp: 8})
    assert earliest_offsets(store.cluster, [tp])[tp] == 8
    assert _batches_seen(proxied, store.topic, read_committed=True) == [5]
    latest = store.latest("q")
    assert latest is not None and latest.batch_id == 5


def test_the_last_intent_is_found_behind_more_aborted_writes_than_one_look_covers(
        proxied: ProxiedKafkaCluster, store: IntentStore) -> None:
    """Six aborted intent writes (12 offsets of records and abort markers) sit after batch
    1's: the reader looks further back than its first window of 8 offsets and finds it."""
    store.write(_intent(store, 1))
    writer = Producer({"bootstrap.servers": proxied.bootstrap(),
                       "transactional.id": intent_transactional_id(store.sink_id)})
    try:
        writer.init_transactions()
        for batch_id in range(2, 8):
            writer.begin_transaction()
            writer.send(store.topic, _intent(store, batch_id).to_json(),
                        key=store.sink_id.encode(), partition=0)
            writer.flush(10_000)
            writer.abort_transaction()
    finally:
        writer.close()
    assert _batches_seen(proxied, store.topic, read_committed=False) == [1, 2, 3, 4, 5, 6, 7]
    assert _batches_seen(proxied, store.topic, read_committed=True) == [1]
    decided = store.latest("q")
    assert decided is not None and decided.batch_id == 1


def test_a_batch_whose_intent_write_was_given_up_on_is_written_once_after_a_restart(
        proxied: ProxiedKafkaCluster, monkeypatch: pytest.MonkeyPatch,
        patient_readers: None) -> None:
    """The sink end to end (tasks and driver in this process, as Spark would call them):
    batch 0's commit gives up on its intent write while the intent's EndTxn(commit) is still
    on the wire; Spark then calls abort(), which aborts the tasks' transactions. The EndTxn
    reaches the coordinator later. The restarted query (a new run) replays batch 0: its
    tasks must write again and its commit must make every row visible exactly once. A late
    intent that became visible would make the replay skip its writes and roll forward the
    aborted transactions: SinkDataLossError, the batch's rows lost (what an idempotent
    intent append that landed late did)."""
    options, topic = _sink_options(proxied, "late-intent")
    values = [b"row-%d" % i for i in range(400)]
    original_write = IntentStore.write
    monkeypatch.setattr(IntentStore, "write",  # the driver's 60 s, shortened for the test
                        lambda self, intent, timeout_ms=0: original_write(self, intent, 1_500))

    try:
        first = _prepare(options, values, 0, "run-1", monkeypatch)
        assert [m.outcome for m in first] == [TaskOutcome.PREPARED] * 2
        proxy = proxied.proxy
        before = proxy.snapshot()
        proxy.hold_requests(5.0, 1, {END_TXN})  # the first EndTxn of the commit: the intent's
        with pytest.raises(KafkaTimeoutError):
            BatchCommit(options, first, 0, None, 60_000).commit()
        assert proxy.since(before)["held_requests"] == 1
        BatchCommit(options, first, 0, None, 60_000).abort()
        deadline = time.monotonic() + 20
        while proxy.since(before)["released_requests"] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proxy.since(before)["released_requests"] >= 1  # the late EndTxn got there
        time.sleep(2.0)
        replay = _prepare(options, values, 0, "run-2", monkeypatch)
        assert [m.outcome for m in replay] == [TaskOutcome.PREPARED] * 2  # not skipped
        BatchCommit(options, replay, 0, None, 60_000).commit()
        records = read_committed(proxied.bootstrap(), topic, expect=len(values))
        assert sorted(r.value or b"" for r in records) == sorted(values)
    finally:
        _close_pooled(options)


def test_a_commit_whose_coordinator_stops_answering_asks_again_and_commits_every_transaction(
        proxied: ProxiedKafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """After batch 0's intent is written, the transaction coordinator answers no EndTxn for
    4.5 s (the requests reach it; the answers are lost), longer than each try waits (3 s
    here, 60 s in production). The batch is decided, so the driver must go on asking
    rather than fail with part of it committed; asked again, the coordinator says each is
    done (a retry of the same end), and every row is visible once."""
    options, topic = _sink_options(proxied, "lost-end")
    values = [b"row-%d" % i for i in range(400)]
    proxy = proxied.proxy
    monkeypatch.setattr(sink_commit, "_TIMEOUT_MS", 3_000)  # each try waits 3 s, not 60
    armed_at: list[dict[str, int]] = []
    original_fault_point = sink_commit.fault_point

    def arm_after_intent(point: str, **details: object) -> None:
        if point == "commit:after-intent":
            armed_at.append(proxy.snapshot())
            proxy.blackhole(4.5, {END_TXN})
        original_fault_point(point, **details)  # type: ignore[arg-type]

    monkeypatch.setattr(sink_commit, "fault_point", arm_after_intent)
    try:
        first = _prepare(options, values, 0, "run-1", monkeypatch)
        BatchCommit(options, first, 0, None, 60_000).commit()
        assert len(armed_at) == 1
        assert proxy.since(armed_at[0])[swallowed(END_TXN)] >= 2  # answers lost, both tries
        records = read_committed(proxied.bootstrap(), topic, expect=len(values))
        assert sorted(r.value or b"" for r in records) == sorted(values)
        assert len(records) == len(values)
    finally:
        _close_pooled(options)


def test_abort_of_a_decided_batch_commits_it_now(
        proxied: ProxiedKafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """commit() fails right after writing batch 0's intent; Spark's abort() finds the batch
    decided and commits its transactions now, not leaving them to a restart that may come
    after transaction.timeout.ms. The replay then writes nothing and every row is visible
    once."""
    options, topic = _sink_options(proxied, "decided")
    values = [b"row-%d" % i for i in range(400)]
    original_fault_point = sink_commit.fault_point
    fired: list[str] = []

    def fail_after_intent(point: str, **details: object) -> None:
        if point == "commit:after-intent" and not fired:
            fired.append(point)
            raise RuntimeError("the driver failed after the intent")
        original_fault_point(point, **details)  # type: ignore[arg-type]

    monkeypatch.setattr(sink_commit, "fault_point", fail_after_intent)
    try:
        first = _prepare(options, values, 0, "run-1", monkeypatch)
        with pytest.raises(RuntimeError, match="after the intent"):
            BatchCommit(options, first, 0, None, 60_000).commit()
        assert fired == ["commit:after-intent"]
        assert read_all(proxied.bootstrap(), topic, read_committed=True, timeout_s=5) == []
        BatchCommit(options, first, 0, None, 60_000).abort()
        records = read_committed(proxied.bootstrap(), topic, expect=len(values))
        assert sorted(r.value or b"" for r in records) == sorted(values)
        replay = _prepare(options, values, 0, "run-2", monkeypatch)
        assert [m.outcome for m in replay] == [TaskOutcome.SKIPPED] * 2
        BatchCommit(options, replay, 0, None, 60_000).commit()
        again = read_all(proxied.bootstrap(), topic, read_committed=True)
        assert sorted(r.value or b"" for r in again) == sorted(values)
    finally:
        _close_pooled(options)
