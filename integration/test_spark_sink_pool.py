"""Which producers a sink task keeps in its Python worker, against a real broker.

The task's write path (``sink_task.write_task``) runs here in the test process, as a Spark
task would run it, with the task's identity given instead of read from a TaskContext. The
driver's commit (``sink_commit.BatchCommit``) then ends the transactions, and confluent-kafka
reads the topic at read_committed: closing a producer must not end or spoil what it prepared.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import read_all, read_committed
from kafka_ds.client.producer import Producer
from kafka_ds.client.transactions import fence_transactional_id
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.txn_state import TxnState
from kafka_ds.spark import sink_pool, sink_task
from kafka_ds.spark.sink_commit import BatchCommit
from kafka_ds.spark.sink_intent import IntentStore
from kafka_ds.spark.sink_messages import SinkBatchAbortedError, SinkCommitMessage, TaskOutcome
from kafka_ds.spark.sink_options import InputColumns, parse_sink_options

ROWS = 500


@pytest.fixture
def batch_task(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Partition 3, first attempt, of a batch (non-streaming) write."""
    task = sink_task.TaskInfo(partition_id=3, attempt=0, batch_id=None, query_id=None,
                              run_id=None, speculation=False)
    monkeypatch.setattr(sink_task.TaskInfo, "current", classmethod(lambda cls: task))
    yield
    for key in list(sink_pool._producers):
        sink_pool._producers.pop(key).close(0)


def _write_and_commit(kafka: KafkaCluster, topic: str, extra: dict[str, str]
                      ) -> tuple[dict[str, str], Producer | None]:
    options = parse_sink_options({"kafka.bootstrap.servers": kafka.bootstrap(), "topic": topic,
                                  **extra})
    sink_id = options.transactional_id_prefix or f"pykafka-batch-{uuid.uuid4()}"
    values = pa.array([b"row-%d" % i for i in range(ROWS)])
    batches = [pa.record_batch([values.slice(0, 200)], names=["value"]),
               pa.record_batch([values.slice(200)], names=["value"])]
    message = sink_task.write_task(iter(batches), options, InputColumns(value="value"),
                                   sink_id, 60_000)
    assert message.outcome is TaskOutcome.PREPARED and message.record_count == ROWS
    properties = options.producer_properties(f"{sink_id}-3", 60_000)
    pooled = sink_pool._producers.get(sink_pool._key(properties))
    # Nothing is visible before the driver commits.
    assert read_all(kafka.bootstrap(), topic, read_committed=True, timeout_s=5) == []
    BatchCommit(options, [message], None, sink_id, 60_000).commit()
    records = read_committed(kafka.bootstrap(), topic, expect=ROWS)
    assert sorted(r.value or b"" for r in records) == sorted(values.to_pylist())
    return properties, pooled


def test_a_batch_write_closes_the_producer_of_its_one_time_transactional_id(
        kafka: KafkaCluster, topic: str, batch_task: None) -> None:
    properties, pooled = _write_and_commit(kafka, topic, {})
    # The id was made up for this job: its producer (a thread, connections) is not kept.
    assert pooled is None
    assert sink_pool._key(properties) not in sink_pool._producers


def test_a_batch_write_with_a_prefix_keeps_its_producer_for_the_next_job(
        kafka: KafkaCluster, topic: str, batch_task: None) -> None:
    prefix = f"job-{uuid.uuid4().hex[:8]}"
    _, pooled = _write_and_commit(kafka, topic, {"transactionalIdPrefix": prefix})
    # Recurring jobs reuse the ids: the producer stays, ready for the next InitProducerId.
    assert pooled is not None and pooled.transaction_state is TxnState.PREPARED


def _slow(batches: list[pa.RecordBatch], delay_s: float,
          seen: list[TxnState | None], properties: dict[str, str]) -> Iterator[pa.RecordBatch]:
    """Spark's input when computing the partition's first rows takes ``delay_s``: records
    the state of the task's producer at the moment the rows arrive."""
    time.sleep(delay_s)
    pooled = sink_pool._producers.get(sink_pool._key(properties))
    seen.append(pooled.transaction_state if pooled is not None else None)
    yield from batches


def test_a_task_waiting_for_its_first_rows_initialises_its_transaction_meanwhile(
        kafka: KafkaCluster, topic: str, batch_task: None) -> None:
    prefix = f"early-{uuid.uuid4().hex[:8]}"
    options = parse_sink_options({"kafka.bootstrap.servers": kafka.bootstrap(), "topic": topic,
                                  "transactionalIdPrefix": prefix})
    properties = options.producer_properties(f"{prefix}-3", 60_000)
    seen: list[TxnState | None] = []
    values = pa.array([b"late-%d" % i for i in range(ROWS)])
    # Far above the early start's 20 ms, and far above InitProducerId on a loaded machine.
    rows = _slow([pa.record_batch([values], names=["value"])], 5.0, seen, properties)
    message = sink_task.write_task(rows, options, InputColumns(value="value"), prefix, 60_000)
    # InitProducerId was done while Spark was still computing the rows.
    assert seen == [TxnState.READY]
    assert message.outcome is TaskOutcome.PREPARED and message.record_count == ROWS
    BatchCommit(options, [message], None, prefix, 60_000).commit()
    records = read_committed(kafka.bootstrap(), topic, expect=ROWS)
    assert sorted(r.value or b"" for r in records) == sorted(values.to_pylist())


def test_an_empty_task_still_touches_no_broker(kafka: KafkaCluster, topic: str,
                                               batch_task: None) -> None:
    prefix = f"empty-{uuid.uuid4().hex[:8]}"
    options = parse_sink_options({"kafka.bootstrap.servers": kafka.bootstrap(), "topic": topic,
                                  "transactionalIdPrefix": prefix})
    properties = options.producer_properties(f"{prefix}-3", 60_000)
    message = sink_task.write_task(iter([pa.record_batch([pa.array([], pa.binary())],
                                                         names=["value"])]),
                                   options, InputColumns(value="value"), prefix, 60_000)
    assert message.outcome is TaskOutcome.EMPTY
    assert sink_pool._key(properties) not in sink_pool._producers


def test_a_streaming_commit_checks_its_transactions_while_it_reads_the_intent(
        kafka: KafkaCluster, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's DescribeTransactions goes out before the intent read's ListOffsets (both
    only read) and its answer still decides: both micro-batches commit, and a transaction
    fenced before the commit still aborts the batch."""
    prefix = f"overlap-{uuid.uuid4().hex[:8]}"
    options = parse_sink_options({"kafka.bootstrap.servers": kafka.bootstrap(), "topic": topic,
                                  "transactionalIdPrefix": prefix})
    cluster = sink_pool.cluster(options.properties)
    sent: list[str] = []
    original = cluster.client.send

    def recording(node: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(ApiKey(request.API_KEY).name)
        return original(node, request, *args, **kwargs)

    monkeypatch.setattr(cluster.client, "send", recording)

    def micro_batch(batch_id: int) -> tuple[list[SinkCommitMessage], list[bytes]]:
        values = [b"b%d-%d" % (batch_id, i) for i in range(ROWS)]
        messages = []
        for partition, part in enumerate((values[:200], values[200:])):
            task = sink_task.TaskInfo(partition_id=partition, attempt=0, batch_id=batch_id,
                                      query_id="q", run_id="r", speculation=False)
            monkeypatch.setattr(sink_task.TaskInfo, "current",
                                classmethod(lambda cls, task=task: task))
            messages.append(sink_task.write_task(
                iter([pa.record_batch([pa.array(part)], names=["value"])]), options,
                InputColumns(value="value"), None, 60_000))
        return messages, values

    try:
        expected: list[bytes] = []
        for batch_id in (0, 1):
            messages, values = micro_batch(batch_id)
            sent.clear()
            BatchCommit(options, messages, batch_id, None, 60_000).commit()
            expected += values
        # Batch 1 found batch 0's intent: its ListOffsets came after DescribeTransactions,
        # and one Fetch without a session read it (no second one to close a session).
        assert sent.index("DESCRIBE_TRANSACTIONS") < sent.index("LIST_OFFSETS"), sent
        assert sent.count("FETCH") == 1, sent
        store = IntentStore(cluster, options.properties, options.intent_topic_for(prefix),
                            prefix)
        intent = store.latest("q")
        assert intent is not None and intent.batch_id == 1 and len(intent.transactions) == 2
        records = read_committed(kafka.bootstrap(), topic, expect=len(expected))
        assert sorted(r.value or b"" for r in records) == sorted(expected)
        messages, _ = micro_batch(2)
        fence_transactional_id(cluster, f"{prefix}-1")  # a zombie took partition 1 over
        with pytest.raises(SinkBatchAbortedError):
            BatchCommit(options, messages, 2, None, 60_000).commit()
        assert len(read_all(kafka.bootstrap(), topic, read_committed=True, timeout_s=5)) == \
            len(expected)
    finally:
        for key in list(sink_pool._producers):
            sink_pool._producers.pop(key).close(0)
        sink_pool.discard_cluster(options.properties)
