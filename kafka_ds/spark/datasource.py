"""``PyKafkaDataSource``: the DataSource Spark finds under ``format("pykafka")``.

This class only routes: Spark pickles it to the driver's planner and to every executor, so it
holds nothing but the option map. The source lives in ``kafka_ds.spark.source`` and the sink in
``kafka_ds.spark.sink``; both are imported when first asked for, so a read never loads the
sink's code and the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType


class PyKafkaDataSource(DataSource):
    """Kafka for Spark Structured Streaming, in pure Python: ``format("pykafka")``.

    A drop-in for Spark's ``format("kafka")`` that needs no JVM package: ``pip install kafka-ds``
    registers it (Spark finds the ``pyspark_pykafka`` module), so replacing ``"kafka"`` by
    ``"pykafka"`` is the only change. Explicit registration also works::

        spark.dataSource.register(kafka_ds.spark.PyKafkaDataSource)

    **Reading (source)**::

        df = (spark.readStream.format("pykafka")
              .option("kafka.bootstrap.servers", "broker1:9092,broker2:9092")
              .option("subscribe", "orders,payments")
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 500000)
              .load())
        events = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "timestamp")

        batch = (spark.read.format("pykafka")
                 .option("kafka.bootstrap.servers", "broker1:9092")
                 .option("assign", '{"orders": [0, 1]}')
                 .option("startingOffsets", '{"orders": {"0": 100, "1": -2}}')
                 .option("endingOffsets", "latest")
                 .load())

    Schema (fixed; ``.schema(...)`` is rejected), every column nullable:
    ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long,
    ``timestamp`` timestamp, ``timestampType`` int (0 CreateTime, 1 LogAppendTime), and with
    ``includeHeaders=true`` ``headers`` array<struct<key: string, value: binary>> (null when a
    record has none; order and duplicate keys kept).

    Source options (names are case-insensitive; the same as ``format("kafka")``):

    - ``kafka.bootstrap.servers`` (required): ``host:port`` list.
    - exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regular
      expression searched in topic names; internal topics excluded) or ``assign`` (JSON
      ``{"topicA": [0, 1]}``). A named topic that does not exist is an error at query start.
    - ``startingOffsets``: ``earliest``, ``latest`` or JSON ``{"t": {"0": 23, "1": -2}}``
      (-2 earliest, -1 latest; every read partition must be listed). Beyond Spark, a topic may
      be ``"earliest"`` or ``"latest"`` as a whole: ``{"t": "earliest"}``. Default ``latest``
      for streams, ``earliest`` for batch (where latest is rejected). A stream uses it only on
      its first start; restarts continue from the checkpoint.
    - ``endingOffsets`` (batch only): ``latest`` (default) or JSON (-1 latest; -2 rejected).
    - ``startingTimestamp`` / ``endingTimestamp``: one timestamp (ms) for every partition;
      ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON of timestamps per
      partition. Precedence: timestamp > by-timestamp > offsets. ``endingTimestamp`` is
      ignored by streams, as in Spark. ``startingOffsetsByTimestampStrategy``: ``error``
      (default: fail when no record is at or after the timestamp) or ``latest``.
    - ``failOnDataLoss`` (true): fail, or warn and skip, when offsets to read are gone
      (retention, deleted topics or partitions, a recreated topic). Errors carry Spark's
      ``KAFKA_DATA_LOSS.*`` names.
    - ``maxOffsetsPerTrigger``: cap on offsets per micro-batch, spread over partitions in
      proportion to their backlog. ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (15m):
      wait for that many new offsets, at most that long. ``Trigger.AvailableNow`` honours the
      cap and stops at the offsets latest when the query started; ``Trigger.Once`` reads all.
      Batch reads ignore these with a warning.
    - ``minPartitions`` / ``maxRecordsPerPartition``: split large offset ranges into more
      tasks (Spark's algorithm; ``maxRecordsPerPartition`` also works with batch
      ``earliest``/``latest``).
    - ``includeHeaders`` (false), ``kafkaConsumer.pollTimeoutMs`` (120000: a task fails after
      that long without progress), ``fetchOffset.numRetries`` (3) and
      ``fetchOffset.retryIntervalMs`` (1000) for offset lookups.
    - ``kafka.*``: passed to the client with the prefix removed (``kafka.security.protocol``,
      ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``
      with PEM files, ``kafka.isolation.level``, ``kafka.fetch.max.bytes`` ...). Under
      ``kafka.isolation.level=read_committed`` batches end at the last stable offset.
      Rejected as in Spark: ``kafka.auto.offset.reset``, ``kafka.key.deserializer``,
      ``kafka.value.deserializer``, ``kafka.enable.auto.commit``,
      ``kafka.interceptor.classes``. ``kafka.group.id`` and ``groupIdPrefix`` are accepted
      and change nothing (no consumer group is joined).

    Beyond Spark:

    - ``maxBytesPerTrigger``: cap on stored (compressed) bytes per micro-batch, estimated
      from a small sample of each partition.
    - ``commitOffsetsToGroup``: after each micro-batch commits, write its end offsets to this
      consumer group, so ``kafka-consumer-groups.sh --describe`` and other lag tools show the
      query. Never read back; the checkpoint stays the truth. A failed commit logs a warning.
    - ``mergeRangesBelowOffsets`` (5000): ranges smaller than this on the same leader share a
      task and a fetch session (0 disables; off when ``minPartitions`` or
      ``maxRecordsPerPartition`` is set).
    - ``fetcherPool.capacity`` (16) and ``fetcherPool.idleTimeoutMs`` (300000): broker
      connections each Python worker keeps between tasks, so micro-batches do not reconnect.

    Progress: ``reportLatestOffset`` fills ``progress.sources[i].latestOffset``. Spark's
    ``minOffsetsBehindLatest``/``max``/``avg`` metrics cannot be reported by a Python source
    (Spark 4.3); ``kafka_ds.spark.progress.offsets_behind_latest(progress["sources"][0])``
    computes them from the progress entry.

    Differences from ``format("kafka")`` to know: batch offsets are resolved on the driver
    when the query is planned (Spark resolves earliest/latest in each task); a stream started
    at ``latest`` runs an empty first batch that records the start; ``minOffsetsPerTrigger`` is
    ignored under ``Trigger.AvailableNow``, which always drains; tasks carry no preferred
    locations (the Python API has none).
    """

    @classmethod
    def name(cls) -> str:
        return "pykafka"

    def schema(self) -> StructType:
        from kafka_ds.spark.source import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from kafka_ds.spark.source import create_batch_reader

        return create_batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafka_ds.spark.source import create_stream_reader

        return create_stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafka_ds.spark.sink import create_batch_writer

        return create_batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafka_ds.spark.sink import create_stream_writer

        return create_stream_writer(self.options, schema, overwrite)
