"""The commit intent: the sink's durable record that a batch's transactions are to be committed.

Layer: spark (over ``kafka_ds.client``). See ``sink_commit`` for the protocol that uses it.

Where it lives: one compacted topic per sink (default ``<transactionalIdPrefix>.intent``, one
partition), every record keyed by the sink id; the last record is the sink's latest intent.
The alternative, OffsetCommit metadata in a consumer group, was rejected:

- group offsets expire ``offsets.retention.minutes`` (7 days) after the last commit. A query
  that crashed between its last commit and Spark's commit log and stays down longer would
  find no intent on restart and write its last batch a second time. A compacted topic keeps
  the last record of a key forever.
- ``offset.metadata.max.bytes`` (4096) holds the transactions of ~150 Spark partitions; more
  would need chunking over several offsets, whose single append is not documented as atomic.
- The cost is of the same order: a task reads the intent with two ListOffsets (the last
  stable offset and the high watermark) and one Fetch of a few records (an OffsetFetch
  would be one request); the driver writes it with InitProducerId, Produce and EndTxn
  (about 5 ms on a local broker, against 1 ms for the idempotent append it replaced).

Each intent is written in a Kafka transaction of its own (transactional id
``<sink id>-intent``) and read read_committed, so that giving up on a write is final. An
idempotent append has no such end: a Produce the driver stopped waiting for (its 60 s
elapsed, the driver died) may still reach the log later, after ``abort`` had read "no intent"
and aborted the batch's transactions; the restarted query would then find the intent, roll
forward transactions that no longer exist, and fail with ``SinkDataLossError``. With a
transaction, ``settle`` (InitProducerId on the intent's id) ends whatever write is still in
flight: it aborts an open one (a late Produce or EndTxn of the old epoch is then refused) or
completes one whose commit the coordinator had already decided; either way, what a reader
sees next stays true.

Limits: the topic needs CREATE (or an operator creates it: one partition,
cleanup.policy=compact) and the sink's principal needs READ and WRITE on it, and WRITE on
the transactional id ``<sink id>-intent`` (the PREFIXED ACL on ``<prefix>-`` that its tasks
need covers it). It must hold one sink's records only (the record key is checked).
Deleting it forgets the intents: a query restarted after that cannot tell whether its last
batch was committed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_ds.client.admin import Admin
from kafka_ds.client.cluster import Cluster, UnknownTopicError
from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import earliest_offsets, latest_offsets
from kafka_ds.client.transactions import fence_transactional_id
from kafka_ds.protocol.errors import DataLossError, KafkaTimeoutError
from kafka_ds.protocol.txn_state import TransactionToken
from kafka_ds.protocol.types import IsolationLevel, TopicPartition
from kafka_ds.spark import sink_pool
from kafka_ds.spark.options import KafkaOptionError

log = logging.getLogger(__name__)

_FORMAT_VERSION = 1
# A driver that died inside an intent write leaves its transaction open this long at most
# (unless the next reader settles it sooner): a read_committed reader of the topic waits
# behind it, and the next write fences it anyway.
_TRANSACTION_TIMEOUT_MS = 60_000
# How long a reader lets an intent transaction it finds open finish on its own (its commit
# markers are written after EndTxn answers: a few ms) before it settles it.
_SETTLE_WAIT_MS = 3_000
# The first look back from the last stable offset: each intent takes two offsets (the record
# and its commit marker); a failed write adds aborted ones.
_FIRST_WINDOW = 8


def intent_transactional_id(sink_id: str) -> str:
    """The transactional id of a sink's intent writes: under the ACL prefix of its tasks'
    ``<sink id>-N`` ids, yet not one of them, so that the sink's cleanup of lingering task
    transactions never fences it."""
    return f"{sink_id}-intent"


@dataclass(frozen=True)
class CommitIntent:
    """Batch ``batch_id`` of sink ``sink_id`` commits these transactions (and nothing else)."""

    sink_id: str
    query_id: str | None
    run_id: str | None  # the query run that wrote it: a new run means the query restarted
    batch_id: int
    spark_partitions: int  # partitions of this batch
    max_spark_partitions: int  # the most any batch of this sink had: ids above may linger
    transactions: tuple[TransactionToken, ...]
    written_ms: int

    def to_json(self) -> bytes:
        return json.dumps({
            "version": _FORMAT_VERSION, "sink": self.sink_id, "query": self.query_id,
            "run": self.run_id, "batch": self.batch_id, "partitions": self.spark_partitions,
            "maxPartitions": self.max_spark_partitions, "writtenMs": self.written_ms,
            "transactions": [{
                "id": token.transactional_id, "pid": token.producer_id,
                "epoch": token.producer_epoch, "tv": token.protocol_version,
                "records": token.record_count,
                "partitions": [[topic, partition] for topic, partition in token.partitions],
            } for token in self.transactions],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, topic: str) -> CommitIntent:
        try:
            doc = json.loads(data)
            if doc.get("version") != _FORMAT_VERSION:
                raise ValueError(f"format version {doc.get('version')!r}")
            return cls(
                sink_id=doc["sink"], query_id=doc["query"], run_id=doc["run"],
                batch_id=int(doc["batch"]), spark_partitions=int(doc["partitions"]),
                max_spark_partitions=int(doc["maxPartitions"]),
                written_ms=int(doc["writtenMs"]),
                transactions=tuple(TransactionToken(
                    transactional_id=item["id"], producer_id=int(item["pid"]),
                    producer_epoch=int(item["epoch"]), protocol_version=int(item["tv"]),
                    partitions=tuple((str(t), int(p)) for t, p in item["partitions"]),
                    record_count=int(item["records"])) for item in doc["transactions"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise KafkaOptionError(
                f"the intent topic {topic!r} holds a record the pykafka sink cannot read "
                f"({exc}): it must be dedicated to one sink (option intentTopic)") from None


class IntentStore:
    """Reads and writes one sink's intents in its topic over a ``Cluster`` it borrows."""

    def __init__(self, cluster: Cluster, properties: Mapping[str, str], topic: str,
                 sink_id: str, transaction_timeout_ms: int | None = None) -> None:
        self.cluster = cluster
        self.properties = properties
        self.topic = topic
        self.sink_id = sink_id
        # The sink's own timeout is within the broker's transaction.max.timeout.ms (checked
        # at query start): never ask the coordinator for more than that.
        self.transaction_timeout_ms = min(_TRANSACTION_TIMEOUT_MS,
                                          transaction_timeout_ms or _TRANSACTION_TIMEOUT_MS)

    def latest(self, query_id: str | None, timeout_ms: int = 30_000) -> CommitIntent | None:
        """The last intent of query ``query_id`` under this sink id, or None if there is none.

        An intent of another query (a new checkpoint, or another query, with the same
        transactionalIdPrefix) is not this query's: its batch ids mean nothing here, so it
        is ignored (with a warning). ``query_id`` None accepts any.
        """
        intent = self._last(timeout_ms)
        if intent is not None and query_id is not None and intent.query_id != query_id:
            log.warning("pykafka sink %s: the intent topic %r holds the last intent of query "
                        "%s (batch %d), not of this query %s: this query starts afresh",
                        self.sink_id, self.topic, intent.query_id, intent.batch_id, query_id)
            return None
        return intent

    def _last(self, timeout_ms: int) -> CommitIntent | None:
        tp = TopicPartition(self.topic, 0)
        try:
            self.cluster.topic(self.topic, timeout_ms=timeout_ms)
        except UnknownTopicError:
            return None
        stable = self._stable_end(tp, timeout_ms)
        record = self._last_committed_record(tp, stable, timeout_ms)
        if record is None or record.value is None:
            return None  # compacted away under a tombstone: the sink was reset on purpose
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        if key != self.sink_id:
            raise KafkaOptionError(
                f"the intent topic {self.topic!r} holds records of another sink ({key!r}, not "
                f"{self.sink_id!r}): give every query its own intent topic (option "
                "intentTopic), or leave the option out to get one per query")
        return CommitIntent.from_json(record.value, self.topic)

    def _stable_end(self, tp: TopicPartition, timeout_ms: int) -> int:
        """The topic's last stable offset once no intent write is in flight.

        An open intent transaction is either one whose commit markers are still being
        written (right after a write: wait for them) or one that nobody will finish on its
        own (its driver died or gave up, or a zombie may still commit it): reading past it
        now could contradict what it becomes, so it is settled first.
        """
        started = time.monotonic()
        settled = False
        pause_s = 0.001  # markers land ~3 ms after a commit: look again soon, then less often
        while True:
            stable = latest_offsets(self.cluster, [tp], timeout_ms=timeout_ms,
                                    isolation_level=IsolationLevel.READ_COMMITTED)[tp]
            end = latest_offsets(self.cluster, [tp], timeout_ms=timeout_ms)[tp]
            if stable >= end:
                return stable
            waited_ms = (time.monotonic() - started) * 1000
            if not settled and waited_ms >= _SETTLE_WAIT_MS:
                log.warning("pykafka sink %s: an intent write of transactional id %r is still "
                            "open in %r after %d ms (its driver died or gave up): settling "
                            "it", self.sink_id, intent_transactional_id(self.sink_id),
                            self.topic, _SETTLE_WAIT_MS)
                self.settle(timeout_ms)
                settled = True
            elif settled and waited_ms >= _SETTLE_WAIT_MS + timeout_ms:
                raise KafkaTimeoutError(
                    f"the intent topic {self.topic!r} still holds an open transaction "
                    f"{timeout_ms} ms after its intent writes were settled: another "
                    "transactional producer writes to it; it must be dedicated to one sink "
                    "(option intentTopic)")
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.1)

    def _last_committed_record(self, tp: TopicPartition, stable: int, timeout_ms: int
                               ) -> Any:
        """The last committed record below ``stable``, looking further back while the window
        holds only markers and aborted writes; None if the partition has none."""
        if stable == 0:
            return None
        # A few records: no session, whose close would cost a round trip.
        fetcher = Fetcher(self.cluster, FetchConfig(
            isolation_level=IsolationLevel.READ_COMMITTED, fetch_timeout_ms=timeout_ms),
            use_sessions=False)
        window = _FIRST_WINDOW
        first: int | None = None
        high = stable
        while True:
            low = max(stable - window, 0)
            if first is None and low == 0:
                first = earliest_offsets(self.cluster, [tp], timeout_ms=timeout_ms)[tp]
            if first is not None:
                low = max(low, first)
            if low >= high:
                return None
            try:
                records = [record for _, record in
                           fetcher.read_records([(tp.topic, 0, low, high)])]
            except DataLossError:
                if first is not None:
                    raise
                # The window reaches below the log start (DeleteRecords, or retention on an
                # operator's compact,delete topic): that is no loss, start there instead.
                first = earliest_offsets(self.cluster, [tp], timeout_ms=timeout_ms)[tp]
                continue
            if records:
                return records[-1]
            if first is not None and low <= first:
                return None
            high, window = low, window * 8

    def settle(self, timeout_ms: int = 60_000) -> None:
        """End the intent write that may still be in flight, whoever started it: after this,
        no earlier write can become visible, and one already decided is visible.

        InitProducerId on the intent's transactional id: the coordinator aborts an open
        transaction (a late Produce or EndTxn of the old epoch is refused from now on) and
        completes one whose commit it had decided. This process's pooled intent producer is
        fenced by it, so it is dropped here.
        """
        sink_pool.discard_producer(self._producer_properties())
        fence_transactional_id(self.cluster, intent_transactional_id(self.sink_id),
                               transaction_timeout_ms=self.transaction_timeout_ms,
                               timeout_ms=timeout_ms)

    def write(self, intent: CommitIntent, timeout_ms: int = 60_000) -> None:
        """Commit ``intent`` in a transaction of its own; return once every in-sync replica
        has it (acks=all).

        Every write starts with InitProducerId (one round trip), even on the producer kept
        from the last batch: that producer may have been fenced since (``abort`` or a reader
        settled the id in another worker), and a zombie driver's write is fenced by it. A
        write that fails after that is not retried: a fence in the middle of it means
        someone settled the id, and may have decided on "no intent" already.
        """
        self._ensure_topic(timeout_ms)
        props = self._producer_properties()
        producer = sink_pool.producer(props)  # the commit worker keeps it for later batches
        try:
            producer.init_transactions(timeout_ms)
            producer.begin_transaction()
            producer.send(self.topic, intent.to_json(), key=self.sink_id.encode("utf-8"),
                          partition=0)
            producer.commit_transaction(timeout_ms)
        except BaseException:
            sink_pool.discard_producer(props)
            raise

    def _producer_properties(self) -> dict[str, str]:
        props = {key: value for key, value in self.properties.items()
                 if key not in ("transactional.id", "transaction.timeout.ms")}
        props.update({"acks": "all", "enable.idempotence": "true", "linger.ms": "0",
                      "compression.type": "zstd",
                      "transactional.id": intent_transactional_id(self.sink_id),
                      "transaction.timeout.ms": str(self.transaction_timeout_ms)})
        return props

    def _ensure_topic(self, timeout_ms: int) -> None:
        try:
            self.cluster.topic(self.topic, timeout_ms=timeout_ms)
            return
        except UnknownTopicError:
            pass
        brokers = max(len(self.cluster.brokers), 1)
        replicas = min(3, brokers)
        config = {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, replicas))}
        log.info("creating the pykafka sink's intent topic %r (1 partition, replication "
                 "factor %d, compacted)", self.topic, replicas)
        Admin(self.cluster).create_topic(self.topic, 1, replicas, config, exist_ok=True,
                                         timeout_ms=timeout_ms)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def intent_for(sink_id: str, query_id: str | None, run_id: str | None, batch_id: int,
               spark_partitions: int, previous: CommitIntent | None,
               tokens: list[TransactionToken]) -> CommitIntent:
    most = max(spark_partitions, previous.max_spark_partitions if previous else 0)
    return CommitIntent(sink_id, query_id, run_id, batch_id, spark_partitions, most,
                        tuple(tokens), now_ms())


def intent_summary(intent: CommitIntent | None) -> dict[str, Any]:
    """For log lines."""
    if intent is None:
        return {}
    return {"batch": intent.batch_id, "transactions": len(intent.transactions),
            "run": intent.run_id}
