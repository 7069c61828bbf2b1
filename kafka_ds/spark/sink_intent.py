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
- The cost is the same order: a task reads the intent with ListOffsets + one Fetch of one
  record (an OffsetFetch would be one request), the driver writes it with one Produce.

Limits: the topic needs CREATE (or an operator creates it: one partition,
cleanup.policy=compact) and the sink's principal needs READ and WRITE on it. It must hold one
sink's records only (the record key is checked). Deleting it forgets the intents: a query
restarted after that cannot tell whether its last batch was committed.
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
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.protocol.txn_state import TransactionToken
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark import sink_pool
from kafka_ds.spark.options import KafkaOptionError

log = logging.getLogger(__name__)

_FORMAT_VERSION = 1


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
                 sink_id: str) -> None:
        self.cluster = cluster
        self.properties = properties
        self.topic = topic
        self.sink_id = sink_id

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
        end = latest_offsets(self.cluster, [tp], timeout_ms=timeout_ms)[tp]
        if end == 0:
            return None
        # One record: no fetch session, whose close would be one more round trip.
        records = [record for _, record in Fetcher(self.cluster, use_sessions=False)
                   .read_records([(self.topic, 0, end - 1, end)])]
        record = records[-1] if records else None
        if record is None or record.value is None:
            return None  # compacted away under a tombstone: the sink was reset on purpose
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        if key != self.sink_id:
            raise KafkaOptionError(
                f"the intent topic {self.topic!r} holds records of another sink ({key!r}, not "
                f"{self.sink_id!r}): give every query its own intent topic (option "
                "intentTopic), or leave the option out to get one per query")
        return CommitIntent.from_json(record.value, self.topic)

    def write(self, intent: CommitIntent, timeout_ms: int = 60_000) -> None:
        """Append ``intent`` and return once every in-sync replica has it (acks=all)."""
        self._ensure_topic(timeout_ms)
        props = {key: value for key, value in self.properties.items()
                 if key not in ("transactional.id", "transaction.timeout.ms")}
        props.update({"acks": "all", "enable.idempotence": "true", "linger.ms": "0",
                      "compression.type": "zstd"})
        producer = sink_pool.producer(props)  # the commit worker keeps it for later batches
        try:
            future = producer.send(self.topic, intent.to_json(),
                                   key=self.sink_id.encode("utf-8"), partition=0)
            producer.flush(timeout_ms)
            future.result(timeout_ms / 1000)
        except BaseException:
            sink_pool.discard_producer(props)
            raise

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
