"""The sink's task side: what one Spark task does with its partition of a batch.

Layer: spark. Runs in a Python worker on an executor, once per task.

Exactly-once (the protocol is in ``sink_commit``)::

    learn the batch id, query id and partition from the task's local properties
    refuse spark.speculation=true (a copy of the task would fence this one)
    wait for the first rows; no rows at all: return EMPTY, touching no broker
    [streaming] read the sink's last commit intent: if it covers this batch, the batch is a
        replay whose commit was already decided -> write nothing, do NOT InitProducerId (it
        would abort the transactions the driver is about to roll forward), return SKIPPED
    producer with transactional.id = <prefix>-<partition id>
    InitProducerId: fences any older attempt of this partition and aborts what it left open
      (these two steps start while the task still waits for its first rows once that wait
      passes 20 ms: the same steps in the same order, only earlier; see ``_EarlyStart``)
    send every row inside the transaction; wait for every acknowledgement
    return PREPARED with the transaction's token (EMPTY if it holds no record) -- not ended

At-least-once: an idempotent producer without transactions; send, wait, return SENT.

Producers (and the connections of the intent read) are kept per Python worker process and
reused by later tasks (``sink_pool``), except those of a batch write whose transactional ids
were made up for that job alone: they are closed once the transaction is prepared.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass

import pyarrow as pa

from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.spark import sink_pool
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.sink_faults import fault_point
from kafka_ds.spark.sink_intent import IntentStore
from kafka_ds.spark.sink_messages import SinkCommitMessage, TaskOutcome
from kafka_ds.spark.sink_options import InputColumns, SinkOptions
from kafka_ds.spark.sink_rows import RowWriter

log = logging.getLogger(__name__)

# A task still waiting for its first rows after this long starts its broker work (see
# _EarlyStart); an empty partition's input ends well before.
_EARLY_START_S = 0.02



@dataclass(frozen=True)
class TaskInfo:
    """The running task, from Spark's TaskContext and its local properties."""

    partition_id: int
    attempt: int
    batch_id: int | None  # the micro-batch; None outside streaming
    query_id: str | None  # the streaming query's id: stable across restarts
    run_id: str | None  # this run of the query: new at every (re)start
    speculation: bool

    @classmethod
    def current(cls) -> TaskInfo:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise KafkaDsError("the pykafka sink's write() must run inside a Spark task")
        props = context._localProperties or {}
        batch = props.get("streaming.sql.batchId")
        return cls(partition_id=context.partitionId(), attempt=context.attemptNumber(),
                   batch_id=int(batch) if batch is not None else None,
                   query_id=props.get("sql.streaming.queryId"),
                   run_id=props.get("spark.jobGroup.id") if batch is not None else None,
                   # SQL confs, and through them the SparkConf, reach tasks as properties.
                   speculation=str(props.get("spark.speculation", "false")).lower() == "true")


def default_sink_id(query_id: str | None) -> str:
    """The transactional id prefix of a streaming query: stable across its restarts (the id
    is in its checkpoint), different for every other query."""
    if not query_id:
        raise KafkaDsError("the pykafka sink found no streaming query id in this task; set "
                           "the option transactionalIdPrefix")
    return f"pykafka-{query_id}"


def write_task(batches: Iterable[pa.RecordBatch], options: SinkOptions, columns: InputColumns,
               sink_id: str | None, transaction_timeout_ms: int) -> SinkCommitMessage:
    """The whole of one task's write (see the module docstring)."""
    task = TaskInfo.current()
    if options.exactly_once:
        if task.speculation:
            raise KafkaOptionError(
                "the pykafka sink's exactly-once delivery cannot run with "
                "spark.speculation=true: a speculative copy of a task reuses its transactional "
                "id and would abort the transaction of the attempt Spark keeps. Set "
                "spark.speculation=false, or the option deliveryGuarantee=at-least-once")
        sink_id = sink_id or options.transactional_id_prefix or default_sink_id(task.query_id)
    else:
        sink_id = sink_id or options.transactional_id_prefix or (
            default_sink_id(task.query_id) if task.query_id else "pykafka")
    # A task with no rows touches no broker: many empty shuffle partitions cost nothing. (The
    # driver aborts what an earlier, failed attempt of such a task may have left open.) A task
    # whose first rows are slow to come does its broker work meanwhile (_EarlyStart).
    clock = _Phases()
    rows = (batch for batch in batches if batch.num_rows)
    one_shot = False
    early: _EarlyStart | None = None
    if options.exactly_once:
        properties = options.producer_properties(f"{sink_id}-{task.partition_id}",
                                                 transaction_timeout_ms)
        # A batch write without transactionalIdPrefix makes its ids up (sink.py): nobody uses
        # this transactional id again, so its producer is closed rather than kept.
        one_shot = task.batch_id is None and options.transactional_id_prefix is None
        early = _EarlyStart(lambda: _open(options, sink_id, task, properties))
    else:
        properties = options.producer_properties(None, None)
    try:
        first = next(rows, None)
    except BaseException:
        if early is not None:
            early.stop()
        raise
    clock.lap("input")
    if first is None:
        if early is not None and early.stop() is not None and one_shot:
            sink_pool.retire_producer(properties)
        return _message(TaskOutcome.EMPTY if options.exactly_once else TaskOutcome.SENT,
                        sink_id, task, clock)
    batches = itertools.chain([first], rows)
    if early is not None:
        started = early.stop()
        decided = started.result() if started is not None else _open(options, sink_id, task,
                                                                     properties)
        clock.lap("init")
        if decided:
            for _ in batches:  # the input must still be consumed
                pass
            log.info("pykafka sink %s: batch %d is a replay whose commit was decided; task %d"
                     " writes nothing", sink_id, task.batch_id, task.partition_id)
            return _message(TaskOutcome.SKIPPED, sink_id, task, clock)
    producer = sink_pool.producer(properties)
    try:
        if options.exactly_once:
            producer.begin_transaction()
        writer = RowWriter(producer, columns, options.topic, options.max_rows_per_send)
        count = writer.write(batches)
        clock.lap("send")
        fault_point("task:after-produce", batch_id=task.batch_id,
                    partition=task.partition_id, attempt=task.attempt)
        writer.wait()
        token = producer.prepare_transaction() if options.exactly_once else None
        clock.lap("acks")
    except BaseException:
        sink_pool.discard_producer(properties)
        raise
    if one_shot:
        sink_pool.retire_producer(properties)
    fault_point("task:after-prepare", batch_id=task.batch_id, partition=task.partition_id,
                attempt=task.attempt)
    if token is None:
        return _message(TaskOutcome.SENT, sink_id, task, clock, count)
    outcome = TaskOutcome.EMPTY if token.is_empty else TaskOutcome.PREPARED
    return _message(outcome, sink_id, task, clock, count, token)


def _open(options: SinkOptions, sink_id: str, task: TaskInfo, properties: dict[str, str]
          ) -> bool:
    """Exactly-once, before the first send: True when the batch is a replay whose commit was
    decided (nothing to write, and no InitProducerId: it would abort what the driver is about
    to roll forward); otherwise InitProducerId on the task's pooled producer, which fences
    any older attempt of this partition and aborts what it left open."""
    if task.batch_id is not None and _batch_decided(
            options, sink_id, task, int(properties["transaction.timeout.ms"])):
        return True
    producer = sink_pool.producer(properties)
    try:
        producer.init_transactions()
    except BaseException:
        sink_pool.discard_producer(properties)
        raise
    return False


class _EarlyStart:
    """Runs the task's first broker work in a thread if Spark is slow to hand it rows.

    Spark computes a partition's first rows while the task waits for them (on a cached
    1 KB DataFrame, 0.2 s of a 1 s write); the intent read and InitProducerId (tens of ms on
    a loaded machine) can go on meanwhile. They start only after ``_EARLY_START_S``, so that
    empty tasks, whose input ends at once, still touch no broker. The steps and their order
    are the same as when the task runs them itself: only when they run changes.
    """

    def __init__(self, work: Callable[[], bool]) -> None:
        self._work = work
        self._lock = threading.Lock()
        self._stopped = False
        self._future: Future[bool] | None = None
        self._timer = threading.Timer(_EARLY_START_S, self._run)
        self._timer.daemon = True
        self._timer.start()

    def _run(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._future = future = Future[bool]()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(self._work())
        except BaseException as exc:
            future.set_exception(exc)

    def stop(self) -> Future[bool] | None:
        """Cancel the work if it has not started; else wait until it ends and return it."""
        with self._lock:
            self._stopped = True
            future = self._future
        self._timer.cancel()
        if future is not None:
            futures_wait([future])
        return future


class _Phases:
    """Milliseconds spent in each phase of the task, for the driver's log line."""

    def __init__(self) -> None:
        self.laps: list[tuple[str, int]] = []
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps.append((name, int((now - self._last) * 1000)))
        self._last = now


def _message(outcome: TaskOutcome, sink_id: str, task: TaskInfo, clock: _Phases,
             count: int = 0, token: object = None) -> SinkCommitMessage:
    return SinkCommitMessage(
        outcome=outcome, sink_id=sink_id, partition_id=task.partition_id, attempt=task.attempt,
        batch_id=task.batch_id, query_id=task.query_id, run_id=task.run_id,
        record_count=count, token=token,  # type: ignore[arg-type]
        phases_ms=tuple(clock.laps))


def _batch_decided(options: SinkOptions, sink_id: str, task: TaskInfo,
                   transaction_timeout_ms: int) -> bool:
    """Whether the query's last commit intent is for the task's batch or a later one."""
    assert task.batch_id is not None
    try:
        intent = IntentStore(sink_pool.cluster(options.properties), options.properties,
                             options.intent_topic_for(sink_id), sink_id,
                             transaction_timeout_ms).latest(task.query_id)
    except KafkaOptionError:
        raise
    except KafkaDsError:
        sink_pool.discard_cluster(options.properties)
        raise
    return intent is not None and intent.batch_id >= task.batch_id
