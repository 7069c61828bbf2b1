"""The sink of ``format("pykafka")``: writers for batch and streaming writes.

Layer: spark. ``PyKafkaDataSource.writer`` / ``streamWriter`` call ``create_batch_writer`` /
``create_stream_writer`` on the driver: options and the input schema are checked there, so
mistakes fail the query at start. The writers are Spark's Arrow writers: each task gets
``pyarrow.RecordBatch``es (``sink_task``), the driver commits or aborts (``sink_commit``).

Spark creates the streaming writer again for every micro-batch, and for every commit, in a
Python worker of the driver: the checks that need the brokers (the topic exists, the
transaction timeout fits the broker's maximum) are remembered per worker process.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kafka_ds.client.admin import Admin
from kafka_ds.client.cluster import Cluster, UnknownTopicError
from kafka_ds.client.config import ClientConfig
from kafka_ds.protocol.errors import BrokerError, KafkaDsError
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.sink_commit import BatchCommit
from kafka_ds.spark.sink_memory import reuse_worker_memory
from kafka_ds.spark.sink_options import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    InputColumns,
    SinkOptions,
    input_columns,
    parse_sink_options,
)
from kafka_ds.spark.sink_task import write_task
from kafka_ds.spark.worker_gc import freeze_worker_heap

log = logging.getLogger(__name__)

# (bootstrap and security settings, topic, asked timeout) -> transaction timeout to use
_checked: dict[tuple[Any, ...], int] = {}


class _Writer:
    """What both writers carry to the tasks and the commit: small and picklable."""

    def __init__(self, options: SinkOptions, columns: InputColumns, sink_id: str | None,
                 transaction_timeout_ms: int) -> None:
        self.options = options
        self.columns = columns
        self.sink_id = sink_id  # None for streaming: each task derives it from the query id
        self.transaction_timeout_ms = transaction_timeout_ms

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.worker_memory_reuse:  # once per worker, before its first batch
            reuse_worker_memory()
        message = write_task(iterator, self.options, self.columns, self.sink_id,
                             self.transaction_timeout_ms)
        if self.options.worker_gc_freeze:  # once per worker, after its first write
            freeze_worker_heap()
        return message

    def _commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None,
                abort: bool) -> None:
        commit = BatchCommit(self.options, messages, batch_id, self.sink_id,
                             self.transaction_timeout_ms)
        commit.abort() if abort else commit.commit()


class PyKafkaStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """Streaming writes: one set of Kafka transactions per micro-batch (see sink_commit)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, batchId, abort=False)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._commit(messages, batchId, abort=True)


class PyKafkaBatchWriter(_Writer, DataSourceArrowWriter):
    """Batch writes (``df.write``): all-or-nothing through the same transactions."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(messages, None, abort=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._commit(messages, None, abort=True)


def create_stream_writer(options: Mapping[str, str], schema: StructType,
                         overwrite: bool) -> PyKafkaStreamWriter:
    """The writer of ``df.writeStream.format("pykafka")`` (any output mode: complete mode
    writes the whole result every batch, as Spark's sink does)."""
    sink_options = parse_sink_options(options)
    columns = input_columns(schema, sink_options)
    timeout_ms = startup_checks(sink_options)
    return PyKafkaStreamWriter(sink_options, columns, None, timeout_ms)


def create_batch_writer(options: Mapping[str, str], schema: StructType,
                        overwrite: bool) -> PyKafkaBatchWriter:
    """The writer of ``df.write.format("pykafka")``: mode append only (Spark's sink also takes
    ErrorIfExists, which Spark does not offer Python data sources)."""
    if overwrite:
        raise KafkaOptionError("Save mode Overwrite not allowed for Kafka: use "
                               ".mode(\"append\") (Spark runs Python data sources in Append or "
                               "Overwrite mode only, so Spark's default ErrorIfExists is not "
                               "available either)")
    sink_options = parse_sink_options(options)
    columns = input_columns(schema, sink_options)
    timeout_ms = startup_checks(sink_options)
    # One prefix per write job: its transactional ids are used once (set the option to reuse
    # ids across recurring jobs: the coordinator keeps each id for 7 days).
    sink_id = sink_options.transactional_id_prefix or f"pykafka-batch-{uuid.uuid4()}"
    return PyKafkaBatchWriter(sink_options, columns, sink_id, timeout_ms)


def startup_checks(options: SinkOptions) -> int:
    """Check what needs the brokers; returns the transaction timeout tasks will use.

    The ``topic`` option must name an existing topic. For exactly-once, an explicit
    ``kafka.transaction.timeout.ms`` must not exceed the broker's transaction.max.timeout.ms
    (InitProducerId would refuse it in every task); without one, the timeout is 15 minutes
    or the broker's maximum if lower.
    """
    key = (tuple(sorted((k, v) for k, v in options.properties.items())), options.topic,
           options.transaction_timeout_ms, options.exactly_once)
    cached = _checked.get(key)
    if cached is not None:
        return cached
    asked = options.transaction_timeout_ms
    timeout_ms = asked or DEFAULT_TRANSACTION_TIMEOUT_MS
    with Cluster.connect(ClientConfig.from_properties(options.properties)) as cluster:
        if options.topic is not None:
            try:
                cluster.topic(options.topic)
            except UnknownTopicError:
                raise KafkaOptionError(
                    f"topic {options.topic!r} (option 'topic') does not exist: create it "
                    "first, the pykafka sink does not create topics") from None
        if options.exactly_once:
            maximum = _broker_max_timeout_ms(cluster)
            if maximum is not None and asked is not None and asked > maximum:
                raise KafkaOptionError(
                    f"kafka.transaction.timeout.ms={asked} is above the broker's "
                    f"transaction.max.timeout.ms ({maximum}): lower the option, or raise the "
                    "broker setting")
            if maximum is not None and asked is None and maximum < timeout_ms:
                log.info("pykafka sink: transaction timeout %d ms (the broker's "
                         "transaction.max.timeout.ms)", maximum)
                timeout_ms = maximum
    _checked[key] = timeout_ms
    return timeout_ms


def _broker_max_timeout_ms(cluster: Cluster) -> int | None:
    try:
        config = Admin(cluster).describe_broker_config()
    except (BrokerError, KafkaDsError) as exc:  # e.g. no DESCRIBE_CONFIGS on the cluster
        log.warning("pykafka sink: cannot read the broker's transaction.max.timeout.ms (%s); "
                    "tasks fail at once if the transaction timeout is above it", exc)
        return None
    value = config.get("transaction.max.timeout.ms")
    return int(value) if value else None
