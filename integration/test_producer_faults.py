"""Fault injection: the producer talks to the broker only through a TCP proxy that cuts
connections after the broker processed a request (the response is lost), cuts requests in
half, swallows responses (of one API: Produce, EndTxn) for a while, and shifts a batch's
sequence. With idempotence the topic must end up with every record exactly once and in order
per partition: counted, not assumed. Each test counts the faults it caused (``snapshot`` /
``since``) and checks resends against the Produce batch headers the proxy saw.

Issue 14's regressions live here: lost replies must never hand a batch's sequences to the
next batch (bug 1), a timed-out commit or abort finishes when called again (bug 2), and an
abort does not wait for delivery.timeout.ms on a batch back for a retry (bug 3).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from integration.harness.proxy import END_TXN, PRODUCE, ProxiedKafkaCluster, swallowed
from integration.producer_util import read_all
from kafka_ds.client.cluster import Cluster, CoordinatorType
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.producer import Producer
from kafka_ds.client.transactions import UNANSWERED, end_transactions, end_transactions_until
from kafka_ds.protocol.errors import KafkaTimeoutError
from kafka_ds.protocol.txn_state import (
    TransactionAbortableError,
    TransactionStateError,
    TxnState,
)


def _topic(cluster: ProxiedKafkaCluster, partitions: int) -> str:
    name = f"faults-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions)
    return name


def _check_exactly_once_in_order(cluster: ProxiedKafkaCluster, topic: str, sent: list[bytes],
                                 partition_of: dict[bytes, int], read_committed: bool = False
                                 ) -> None:
    # Read directly from the broker (not through the proxy).
    read = read_all(cluster.bootstrap(), topic, read_committed=read_committed)
    values = [r.value for r in read]
    duplicates = [v for v, n in Counter(values).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records written twice, e.g. {duplicates[:3]}"
    assert len(values) == len(sent), f"{len(sent) - len(values)} records missing"
    for partition in set(partition_of.values()):
        expected = [v for v in sent if partition_of[v] == partition]
        assert [r.value for r in read if r.partition == partition] == expected


def _faults(cluster: ProxiedKafkaCluster, stop: threading.Event) -> None:
    proxy = next(iter(cluster.proxies.values()))
    step = 0
    while not stop.wait(0.15):
        step += 1
        if step % 3 == 0:
            proxy.cut_after_responses(1, {PRODUCE})  # the broker wrote it; we never hear
        elif step % 3 == 1:
            proxy.cut_mid_request(1, {PRODUCE})  # half a request: the broker never sees it
        else:
            proxy.cut_all()


def test_idempotent_producer_survives_cut_connections(proxied: ProxiedKafkaCluster) -> None:
    topic = _topic(proxied, 3)
    proxy = proxied.proxy
    before = dict(proxy.stats)
    stop = threading.Event()
    faults = threading.Thread(target=_faults, args=(proxied, stop), daemon=True)
    sent: list[bytes] = []
    partition_of: dict[bytes, int] = {}
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "2",
                         "batch.size": "4096", "request.timeout.ms": "5000",
                         "retry.backoff.ms": "20", "reconnect.backoff.ms": "10"})
    try:
        futures = []
        faults.start()
        deadline = time.monotonic() + 6
        i = 0
        while time.monotonic() < deadline:
            value = f"record-{i:07d}".encode()
            futures.append(producer.send(topic, value, key=str(i % 50).encode()))
            sent.append(value)
            i += 1
            if i % 500 == 0:
                time.sleep(0.01)  # spread the sends over many requests and faults
        stop.set()
        faults.join()
        producer.flush(120_000)
        for value, future in zip(sent, futures, strict=True):
            partition_of[value] = future.result(1).partition
        metrics = producer.metrics()
    finally:
        stop.set()
        proxy.reset()  # faults armed but not fired must not leak into the next test
        producer.close()
    cuts = {key: proxy.stats[key] - before[key] for key in ("cut_responses", "cut_requests")}
    assert cuts["cut_responses"] >= 3 and cuts["cut_requests"] >= 3, cuts
    assert metrics["record-retry-total"] > 0
    _check_exactly_once_in_order(proxied, topic, sent, partition_of)


def test_idempotent_producer_survives_lost_responses(proxied: ProxiedKafkaCluster) -> None:
    """Responses swallowed for longer than request.timeout.ms: the producer times the
    requests out, reconnects and resends batches the broker already wrote, each with the
    producer id, epoch and base sequence it had (so that the broker drops the copy)."""
    topic = _topic(proxied, 2)
    proxy = proxied.proxy
    sent: list[bytes] = []
    futures = []
    before = proxy.snapshot()
    first_batch = len(proxy.produced)
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "5",
                         "request.timeout.ms": "1500", "delivery.timeout.ms": "60000",
                         "retry.backoff.ms": "50"})
    try:
        for burst in range(3):
            if burst == 1:
                proxy.blackhole(2.5, api_keys={PRODUCE})
            for i in range(2000):
                value = f"b{burst}-{i:05d}".encode()
                futures.append(producer.send(topic, value, partition=i % 2))
                sent.append(value)
            time.sleep(0.3)
        producer.flush(60_000)
        partition_of = {v: f.result(1).partition for v, f in zip(sent, futures, strict=True)}
        retries = producer.metrics()["record-retry-total"]
    finally:
        proxy.reset()
        producer.close()
    caused = proxy.since(before)
    assert caused["swallowed_responses"] > 0 and caused["swallowed_bytes"] > 0, caused
    assert retries > 0
    batches = proxy.produced[first_batch:]  # this test's producer only: it ran alone
    resent = [b for b, n in Counter(batches).items() if n > 1]
    assert resent, "no batch was sent twice: the blackhole did not cost a reply"
    assert all(b.base_sequence >= 0 and b.producer_id >= 0 for b in resent)
    _check_exactly_once_in_order(proxied, topic, sent, partition_of)


def test_transactional_producer_through_faults_commits_once(proxied: ProxiedKafkaCluster
                                                            ) -> None:
    topic = _topic(proxied, 2)
    proxy = proxied.proxy
    sent: list[bytes] = []
    partition_of: dict[bytes, int] = {}
    before = proxy.stats["cut_responses"] + proxy.stats["cut_requests"]
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(),
                         "transactional.id": f"faulty-{uuid.uuid4().hex}",
                         "request.timeout.ms": "5000", "retry.backoff.ms": "20"})
    try:
        producer.init_transactions()
        for round_ in range(4):
            producer.begin_transaction()
            futures = []
            for i in range(1500):
                value = f"t{round_}-{i:05d}".encode()
                futures.append(producer.send(topic, value, partition=i % 2))
                if i % 300 == 150:
                    proxy.cut_after_responses(1, {PRODUCE})
                if i % 300 == 0:
                    proxy.cut_mid_request(1, {PRODUCE})
            producer.commit_transaction()
            for value, future in zip([f"t{round_}-{i:05d}".encode() for i in range(1500)],
                                     futures, strict=True):
                sent.append(value)
                partition_of[value] = future.result(1).partition
    finally:
        proxy.reset()
        producer.close()
    assert proxy.stats["cut_responses"] + proxy.stats["cut_requests"] - before >= 8
    _check_exactly_once_in_order(proxied, topic, sent, partition_of, read_committed=True)


def test_without_idempotence_the_same_faults_duplicate(proxied: ProxiedKafkaCluster) -> None:
    """The control: what the checks above would catch. A lost response makes a plain
    producer resend a batch the broker already wrote."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    sent = [f"plain-{i:05d}".encode() for i in range(3000)]
    with Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "2",
                   "batch.size": "4096", "enable.idempotence": "false",
                   "max.in.flight.requests.per.connection": "1",
                   "retry.backoff.ms": "20"}) as producer:
        for i, value in enumerate(sent):
            producer.send(topic, value)
            if i % 500 == 250:
                proxy.cut_after_responses(1, {PRODUCE})
                time.sleep(0.05)
        producer.flush(60_000)
    values = [r.value for r in read_all(proxied.bootstrap(), topic)]
    assert set(values) == set(sent)
    assert len(values) > len(sent), "expected duplicates from resent batches"


def test_expired_batches_then_recovery_without_duplicates(proxied: ProxiedKafkaCluster
                                                          ) -> None:
    """Responses vanish for longer than delivery.timeout.ms: those records fail with a
    timeout (their fate unknown: the broker may hold them). The partition stays unresolved
    until the producer can prove what the broker holds, bumping its epoch if it cannot;
    records sent afterwards are written once each, and nothing is written twice."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "0",
                         "request.timeout.ms": "1000", "delivery.timeout.ms": "2500",
                         "retry.backoff.ms": "50"})
    try:
        producer.send(topic, b"before").result(30)
        proxy.blackhole(4.0, {PRODUCE})
        lost = [producer.send(topic, f"lost-{i}".encode()) for i in range(50)]
        errors = [future.exception(30) for future in lost]
        # Expired (a late answer may still beat the expiry check: then it is a success).
        assert all(e is None or isinstance(e, KafkaTimeoutError) for e in errors), errors
        assert sum(isinstance(e, KafkaTimeoutError) for e in errors) >= 1
        assert "delivery.timeout.ms" in str(next(e for e in errors if e is not None))
        proxy.reset()  # ends the blackhole
        after = [producer.send(topic, f"after-{i}".encode()) for i in range(50)]
        offsets = [future.result(30).offset for future in after]
        assert offsets == sorted(offsets)
        assert producer.metrics()["epoch-bump-total"] >= 1
    finally:
        proxy.reset()
        producer.close()
    values = [r.value for r in read_all(proxied.bootstrap(), topic)]
    assert len(values) == len(set(values)), "a record was written twice"
    assert values[0] == b"before"
    assert [v for v in values if v.startswith(b"after")] == [f"after-{i}".encode()
                                                            for i in range(50)]


def test_lost_replies_until_retries_run_out_never_give_sequences_away(
        proxied: ProxiedKafkaCluster) -> None:
    """Issue 14, bug 1. Batch A (10 records) is written, but every reply to it is lost until
    its retries run out. Batch B, the same size, must not get A's sequences: the broker
    would take B for a copy of A, answer DUPLICATE_SEQUENCE_NUMBER (or success), and B's
    records would be acknowledged without ever being written. The producer leaves the
    partition unresolved and bumps its epoch on the same producer id (KIP-360) instead."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "0",
                         "request.timeout.ms": "1500", "retries": "2",
                         "retry.backoff.ms": "50", "delivery.timeout.ms": "120000"})
    a_values = [f"a-{i}".encode() for i in range(10)]
    b_values = [f"b-{i}".encode() for i in range(10)]
    try:
        producer.send(topic, b"first", partition=0).result(30)  # the broker knows us now
        before = proxy.snapshot()
        first = len(proxy.produced)
        proxy.drop_responses(3, api_keys={PRODUCE})  # A's three attempts: all replies lost
        a_error = producer.send_many(topic, a_values, partition=0).exception(60)
        assert a_error is not None, "A must fail: none of its replies arrived"
        assert proxy.since(before)["dropped_responses"] == 3
        attempts = proxy.produced[first:]
        assert len(attempts) == 3 and len(set(attempts)) == 1, attempts  # resent as it was
        a_batch = attempts[0]
        assert producer.send_many(topic, b_values, partition=0).result(30) == 10
        b_batch = proxy.produced[-1]
        bumps = producer.metrics()["epoch-bump-total"]
    finally:
        proxy.reset()
        producer.close()
    # B went out in a new epoch of the same producer id, from sequence 0 (issue 13, KIP-360).
    assert (b_batch.producer_id, b_batch.producer_epoch, b_batch.base_sequence) == (
        a_batch.producer_id, a_batch.producer_epoch + 1, 0), (a_batch, b_batch)
    assert bumps == 1
    values = [r.value for r in read_all(proxied.bootstrap(), topic)]
    assert values.count(b"first") == 1
    assert [v for v in values if v.startswith(b"b-")] == b_values, \
        "records of B were acknowledged but are not in the log"
    assert [v for v in values if v.startswith(b"a-")] == a_values  # written once, as it was


def test_out_of_order_sequence_bumps_the_epoch_on_the_same_producer_id(
        proxied: ProxiedKafkaCluster) -> None:
    """Issue 13 (KIP-360): the proxy shifts one batch's base sequence, so the broker sees a
    gap the producer does not know of and answers OUT_OF_ORDER_SEQUENCE_NUMBER for the
    batch the producer believes is next. The idempotent producer bumps its epoch itself,
    keeping its producer id (a null-transactional-id InitProducerId would hand out a new
    id), restarts the partition's sequences at 0 and resends: nothing lost or doubled."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    producer = Producer({"bootstrap.servers": proxied.proxy_bootstrap(), "linger.ms": "0",
                         "retry.backoff.ms": "50"})
    values = [f"v-{i}".encode() for i in range(30)]
    try:
        assert producer.send_many(topic, values[:10], partition=0).result(30) == 10
        before = proxy.snapshot()
        first = len(proxy.produced)
        proxy.rewrite_sequences(1, delta=5)
        assert producer.send_many(topic, values[10:20], partition=0).result(30) == 10
        assert producer.send_many(topic, values[20:], partition=0).result(30) == 10
        sent = proxy.produced[first:]
        bumps = producer.metrics()["epoch-bump-total"]
    finally:
        proxy.reset()
        producer.close()
    assert proxy.since(before)["rewritten_sequences"] == 1
    shifted, resent, last = sent[0], sent[1], sent[-1]
    assert shifted.base_sequence == 10 + 5
    assert (resent.producer_id, resent.producer_epoch, resent.base_sequence) == (
        shifted.producer_id, shifted.producer_epoch + 1, 0)
    assert (last.producer_id, last.producer_epoch, last.base_sequence) == (
        shifted.producer_id, shifted.producer_epoch + 1, 10)
    assert bumps == 1
    assert [r.value for r in read_all(proxied.bootstrap(), topic)] == values


def _txn_producer(cluster: ProxiedKafkaCluster, **extra: str) -> Producer:
    return Producer({"bootstrap.servers": cluster.proxy_bootstrap(),
                     "transactional.id": f"faults-{uuid.uuid4().hex}", "linger.ms": "0",
                     "retry.backoff.ms": "50", **extra})


def _committed(cluster: ProxiedKafkaCluster, topic: str) -> list[bytes | None]:
    return [r.value for r in read_all(cluster.bootstrap(), topic, read_committed=True)]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_timed_out_end_of_transaction_finishes_when_called_again(
        proxied: ProxiedKafkaCluster, commit: bool) -> None:
    """Issue 14, bug 2. Every EndTxn reply is lost: commit_transaction() (abort_transaction())
    times out, although the coordinator did end the transaction. As in the Java client
    (KIP-266), the same call made again finishes it; any other call says so. Then the
    producer goes on."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    values = [f"v-{i}".encode() for i in range(10)]
    producer = _txn_producer(proxied, **{"request.timeout.ms": "3000"})
    end = producer.commit_transaction if commit else producer.abort_transaction
    other = producer.abort_transaction if commit else producer.commit_transaction
    action = "commit_transaction" if commit else "abort_transaction"
    try:
        producer.init_transactions()
        producer.begin_transaction()
        assert producer.send_many(topic, values, partition=0).result(30) == 10
        before = proxy.snapshot()
        proxy.blackhole(120, api_keys={END_TXN})
        with pytest.raises(KafkaTimeoutError, match=rf"{action}\(\)"):
            end(timeout_ms=4000)
        assert proxy.since(before).get(swallowed(END_TXN), 0) >= 1  # the fault fired
        proxy.reset()
        for refused in (producer.begin_transaction, other):
            with pytest.raises(TransactionStateError, match=rf"{action}\(\) again"):
                refused()
        end(timeout_ms=30_000)  # the same call again: ends it (repeating EndTxn is safe)
        producer.begin_transaction()
        assert producer.send(topic, b"next", partition=0).result(30) is not None
        producer.commit_transaction()
    finally:
        proxy.reset()
        producer.close()
    assert _committed(proxied, topic) == (values if commit else []) + [b"next"]


def test_abort_sends_a_retried_batch_instead_of_waiting_for_its_expiry(
        proxied: ProxiedKafkaCluster) -> None:
    """Issue 14, bug 3. A batch is in flight when abort_transaction() starts; its reply is
    lost, so it comes back for a retry. While aborting it must still go out (its partition
    is in the transaction and it has its sequence), as in the Java client: the abort then
    ends within seconds, not after delivery.timeout.ms."""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    delivery_timeout_s = 60
    producer = _txn_producer(proxied, **{"request.timeout.ms": "2000",
                                         "delivery.timeout.ms": str(delivery_timeout_s * 1000)})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"first", partition=0).result(30)  # the partition is added
        before = proxy.snapshot()
        first = len(proxy.produced)
        proxy.drop_responses(1, api_keys={PRODUCE})
        in_flight = producer.send(topic, b"in flight", partition=0)
        _wait_for(lambda: len(proxy.produced) > first, "the Produce request to go out")
        started = time.monotonic()
        producer.abort_transaction()
        took_s = time.monotonic() - started
        assert in_flight.exception(1) is None  # resent during the abort, and acknowledged
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0).result(30)
        producer.commit_transaction()
    finally:
        proxy.reset()
        producer.close()
    assert proxy.since(before)["dropped_responses"] == 1
    attempts = proxy.produced[first:first + 2]
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # the same batch, resent
    assert took_s < delivery_timeout_s / 4, f"abort took {took_s:.1f} s"
    assert _committed(proxied, topic) == [b"after"]


def test_a_batch_failing_during_commit_does_not_stall_it(proxied: ProxiedKafkaCluster) -> None:
    """Issue 14, bug 3. commit_transaction() flushes; meanwhile one batch fails
    (MESSAGE_TOO_LARGE for a single record), so the transaction can only abort. Of the
    other partition's batches, the first is waiting for a retry (its reply was lost) and the
    others are queued behind it. The retry must still go out, and the queued batches (never
    sent) fail at once, as the Java client aborts undrained batches, instead of holding the
    commit until delivery.timeout.ms. Then abort works and so does the next transaction."""
    topic = _topic(proxied, 1)
    small_topic = f"faults-small-{uuid.uuid4().hex[:10]}"
    proxied.create_topic(small_topic, 1, config={"max.message.bytes": "1000"})
    proxy = proxied.proxy
    delivery_timeout_s = 60
    producer = _txn_producer(proxied, **{"linger.ms": "25000", "batch.size": "4096",
                                         "delivery.timeout.ms": str(delivery_timeout_s * 1000),
                                         "request.timeout.ms": "2000"})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        before = proxy.snapshot()
        first = len(proxy.produced)
        proxy.drop_responses(1, api_keys={PRODUCE})
        # Three batches: the first goes at once (a full batch waits behind it) and its reply
        # is lost; the others wait for its acknowledgement (the epoch's first on the
        # partition goes alone).
        queued = [producer.send(topic, b"%d" % i * 3000, partition=0) for i in range(3)]
        assert len({id(future.batch) for future in queued}) == 3
        _wait_for(lambda: len(proxy.produced) > first, "the first batch to go out")
        too_large = producer.send(small_topic, b"x" * 2000, partition=0)
        started = time.monotonic()
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.commit_transaction()
        took_s = time.monotonic() - started
        assert took_s < delivery_timeout_s / 4, f"commit took {took_s:.1f} s"
        assert too_large.exception(1) is not None
        assert queued[0].exception(1) is None  # retried during the abortable error
        assert all(isinstance(f.exception(1), TransactionAbortableError) for f in queued[1:])
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
    finally:
        proxy.reset()
        producer.close()
    assert proxy.since(before)["dropped_responses"] == 1
    assert _committed(proxied, topic) == [b"after"]


@pytest.fixture(scope="module")
def proxied3(kafka_version: str) -> Iterator[ProxiedKafkaCluster]:
    """Three nodes, each behind its own proxy (for a leader change with a reply held). A
    killed broker is fenced after 3 s of missed heartbeats instead of 9: leadership moves
    sooner."""
    with ProxiedKafkaCluster(nodes=3, version=kafka_version, broker_properties={
            "broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}) as cluster:
        yield cluster


@pytest.mark.cluster
def test_abort_during_a_leader_change_returns_promptly(proxied3: ProxiedKafkaCluster) -> None:
    """Issue 14, bug 3, with a real leader change: a batch is in flight to the partition
    leader (its reply held by the leader's proxy) when abort_transaction() starts; then the
    leader is killed. The batch comes back for a retry, goes to the new leader, and the abort
    ends once the cluster has elected it: well within delivery.timeout.ms, which is what
    the abort waited for before."""
    cluster = proxied3
    topic = f"leader-change-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, 3, replication_factor=3)
    transactional_id = f"leader-change-{uuid.uuid4().hex}"
    with Cluster.connect(ClientConfig.from_properties(
            {"bootstrap.servers": cluster.bootstrap()})) as view:
        coordinator = view.coordinator(CoordinatorType.TRANSACTION, transactional_id)
    partition, victim = next((p.partition, p.leader) for p in cluster.partitions(topic)
                             if p.leader != coordinator)
    delivery_timeout_s = 90
    producer = Producer({"bootstrap.servers": cluster.proxy_bootstrap(),
                         "transactional.id": transactional_id, "linger.ms": "0",
                         "retry.backoff.ms": "100", "request.timeout.ms": "30000",
                         "delivery.timeout.ms": str(delivery_timeout_s * 1000)})
    proxy = cluster.proxies[victim]
    outcome: list[BaseException | None] = []
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"first", partition=partition).result(30)
        first = len(proxy.produced)
        proxy.drop_responses(1, {PRODUCE})
        in_flight = producer.send(topic, b"in flight", partition=partition)
        _wait_for(lambda: len(proxy.produced) > first, "the Produce request to go out")

        def abort() -> None:
            try:
                producer.abort_transaction()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        aborting = threading.Thread(target=abort, daemon=True)
        started = time.monotonic()
        aborting.start()
        assert producer._txn is not None
        _wait_for(lambda: producer._txn.machine.state is TxnState.ABORTING,  # type: ignore[union-attr]
                  "the abort to start")
        cluster.kill(victim)  # kill -9: the held request fails, leadership moves
        aborting.join(delivery_timeout_s * 1.5)
        took_s = time.monotonic() - started
        assert outcome == [None], outcome
        assert took_s < delivery_timeout_s / 2, f"abort took {took_s:.1f} s"
        assert in_flight.exception(1) is None  # resent to the new leader during the abort
        producer.begin_transaction()
        producer.send(topic, b"after", partition=partition).result(60)
        producer.commit_transaction()
    finally:
        proxy.reset()
        producer.close(0 if outcome != [None] else None)
        cluster.restart_node(victim)
    committed = [r.value for r in read_all(cluster.bootstrap(), topic, read_committed=True)]
    assert committed == [b"after"]


def _wait_for(condition: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_leader_killed_mid_stream_exactly_once(kafka_cluster3: Any) -> None:
    """kill -9 the leader of a partition while producing (replication factor 3): the producer
    gets NOT_LEADER_OR_FOLLOWER or loses the connection, refreshes metadata, and resends to
    the new leader; every record is written once, in order."""
    cluster = kafka_cluster3
    topic = f"failover-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(topic, 2, replication_factor=3)
    victim = next(p.leader for p in cluster.partitions(topic) if p.partition == 0)
    sent: list[bytes] = []
    futures = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": "5",
                         "request.timeout.ms": "5000", "retry.backoff.ms": "100"})
    try:
        for i in range(20_000):
            value = f"f-{i:06d}".encode()
            futures.append(producer.send(topic, value, partition=i % 2))
            sent.append(value)
            if i == 5_000:
                cluster.kill(victim)
            if i % 1000 == 0:
                time.sleep(0.02)
        producer.flush(120_000)
        partition_of = {v: f.result(1).partition for v, f in zip(sent, futures, strict=True)}
        retries = producer.metrics()["record-retry-total"]
    finally:
        producer.close()
        cluster.restart_node(victim)
    assert retries > 0
    read = read_all(cluster.bootstrap(), topic)
    values = [r.value for r in read]
    assert len(values) == len(set(values)) == len(sent)
    for partition in (0, 1):
        assert [r.value for r in read if r.partition == partition] == [
            v for v in sent if partition_of[v] == partition]


def test_ending_many_transactions_outlasts_a_coordinator_that_does_not_answer(
        proxied: ProxiedKafkaCluster) -> None:
    """The sink's commit ends every transaction of a batch at once. A coordinator that did not
    answer raised out of end_transactions and left the transactions after it untried, open
    until transaction.timeout.ms, while those before it were committed. Now each gets its
    answer or UNANSWERED, and end_transactions_until asks again until all are ended. (The
    proxy swallows answers: the broker may well have committed; asking again is safe.)"""
    topic = _topic(proxied, 1)
    proxy = proxied.proxy
    tokens = []
    for index in range(3):  # straight to the broker: only the ends go through the proxy
        with Producer({"bootstrap.servers": proxied.bootstrap(), "linger.ms": "0",
                       "transactional.id": f"until-{uuid.uuid4().hex}"}) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"v%d" % index, partition=0).result(30)
            tokens.append(producer.prepare_transaction())
    config = ClientConfig.from_properties({"bootstrap.servers": proxied.proxy_bootstrap(),
                                           "retry.backoff.ms": "50"})
    with Cluster.connect(config) as cluster:
        try:
            before = proxy.snapshot()
            proxy.blackhole(120, api_keys={END_TXN})
            assert end_transactions(cluster, tokens, True, timeout_ms=1500) == \
                [UNANSWERED] * 3
            assert proxy.since(before).get(swallowed(END_TXN), 0) >= 3  # the fault fired
            proxy.reset()
            proxy.blackhole(2.0, api_keys={END_TXN})  # answers come back after 2 s
            codes = end_transactions_until(cluster, tokens, True, deadline_ms=30_000,
                                           timeout_ms=1000, backoff_ms=200)
        finally:
            proxy.reset()
    assert codes == [0, 0, 0]
    assert sorted(v for v in _committed(proxied, topic) if v is not None) == \
        [b"v0", b"v1", b"v2"]
