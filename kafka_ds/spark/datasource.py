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

    Speed: on Spark 4.1 and later set ``spark.python.unix.domain.socket.enabled=true``. Over
    Spark's default TCP socket to its Python workers each Python task waits about 40 ms for
    its input (Nagle's algorithm against a delayed acknowledgement), on every micro-batch.

    **Writing (sink)**: every row exactly once, where ``format("kafka")`` is at-least-once::

        query = (events.selectExpr("CAST(user AS STRING) AS key", "to_json(struct(*)) AS value")
                 .writeStream.format("pykafka")
                 .option("kafka.bootstrap.servers", "broker1:9092,broker2:9092")
                 .option("topic", "events-clean")
                 .option("checkpointLocation", "/checkpoints/events-clean")
                 .start())

        df.write.format("pykafka").option("kafka.bootstrap.servers", "broker1:9092") \\
            .option("topic", "snapshot").mode("append").save()   # all rows, or none

    Batch writes need ``.mode("append")``: Spark runs Python data sources in Append or
    Overwrite mode only (its default, ErrorIfExists, is refused before the sink is asked),
    and Overwrite is refused as by ``format("kafka")``.

    Input columns, matched by exact name as Spark's sink does (other columns are ignored):

    - ``value`` (required): string or binary. Null writes a null value (a tombstone).
    - ``key``: string or binary; null or absent: no key.
    - ``topic``: string; the ``topic`` option, when set, wins for every row. A null topic in a
      row fails the task ("Null topic present in the data").
    - ``partition``: int; null or absent: keyed rows go where the Java producer (and so the
      JVM sink) puts them, ``murmur2(key) % partitions``; unkeyed rows fill one partition a
      batch at a time (sticky, KIP-794). A partition the topic does not have fails the task.
    - ``headers``: array<struct<key: string, value: binary>>; null: no headers.
    - ``timestamp`` (beyond Spark): timestamp, or long epoch milliseconds; the record's
      CreateTime. Null or absent: the time of the write. Spark's sink ignores this column,
      so a DataFrame read from Kafka and written back keeps its records' timestamps here
      where ``format("kafka")`` stamps them anew: drop the column for the old behaviour.

    A missing ``value``, a column of another type, or no topic at all fails the query at
    start with Spark's own messages (``Required attribute 'value' not found``, ``key
    attribute unsupported type ...``, ``topic option required when no 'topic' attribute is
    present ...``).

    Sink options (case-insensitive):

    - ``kafka.bootstrap.servers`` (required), and every ``kafka.<property>`` of the Java
      producer and client (security, ``kafka.compression.type``, ``kafka.linger.ms`` ...),
      passed on with the prefix removed. Refused as in Spark: ``kafka.key.serializer``,
      ``kafka.value.serializer``; refused because the sink manages it:
      ``kafka.transactional.id``. Defaults that differ from the Java producer's, chosen for
      throughput: ``batch.size`` 512 KiB, ``max.request.size`` 4 MiB, ``buffer.memory``
      64 MiB.
    - ``topic``: the topic of every row. It must exist (the sink creates no output topic).
    - ``deliveryGuarantee``: ``exactly-once`` (default) or ``at-least-once`` (an idempotent
      producer without transactions, as Spark's sink: a retried task or a replayed batch
      writes its rows again, but nothing is lost).
    - ``transactionalIdPrefix``: the prefix of the sink's transactional ids, one per Spark
      partition: ``<prefix>-<partition id>``. Default: ``pykafka-<streaming query id>``,
      which survives restarts from the checkpoint and differs between queries; for batch
      writes ``pykafka-batch-<random>``. Two queries must never share a prefix.
    - ``intentTopic``: the topic of the commit intents (below); default ``<prefix>.intent``.
    - ``kafka.transaction.timeout.ms``: how long Kafka keeps a transaction open before it
      aborts it. Default 15 minutes, or the broker's ``transaction.max.timeout.ms`` if lower;
      a value above that maximum fails the query at start.
    - ``failOnDataLoss`` (true): see "limits".
    - ``maxRowsPerSend`` (200000): Spark's Arrow batches are gathered up to this many rows
      (or 4 MiB) before they are partitioned, encoded and handed to the producer at once.
    - ``workerGcFreeze`` (true): as the source's option of that name: a reused Python
      worker's long-lived objects leave the cyclic garbage collector after its first write
      (``gc.freeze``), so the ``gc.collect()`` Spark runs after every task stays cheap.
    - ``workerMemoryReuse`` (true): the Python worker keeps the memory it frees for its next
      batches (Arrow allocates through glibc, which is told not to hand freed buffers of up
      to 32 MiB back to the kernel) instead of faulting in fresh pages for every batch: at
      1 KB rows that cost more CPU than encoding and sending them. The worker's resident
      memory then stays near the most it has used. Linux with glibc only; elsewhere a no-op.

    **How exactly-once works.** Each task writes its rows in a Kafka transaction of its own
    (transactional id ``<prefix>-<partition id>``), waits for every acknowledgement, and
    does *not* commit: it returns the transaction's producer id and epoch to the driver. The
    driver's commit checks that every transaction is still open, writes a *commit intent*
    (the batch id and every transaction) to the intent topic, then commits all
    transactions. A read_committed consumer sees a micro-batch's rows only once it is
    committed, and each row once:

    - a task that fails and is retried: the retry's InitProducerId aborts what the failed
      attempt left open;
    - a driver that dies before the intent is written: nothing of the batch is committed;
      the restarted query writes it again (same transactional ids: the leftovers are
      aborted);
    - a driver that dies after the intent is written (before, during or after the commits,
      before Spark's commit log): the restarted query finds the intent, its tasks write
      nothing, and the driver commits the recorded transactions (committing twice is
      harmless);
    - transactions a restart leaves behind (fewer partitions than before, a dead task
      attempt) are found (ListTransactions) and aborted at the first commit after the
      restart, or when a batch fails, so read_committed readers are not held back.

    Batch writes (``df.write``) are all-or-nothing the same way, without the intent (there
    is no replay to serve). Exactly-once covers what this sink writes; read it with
    ``kafka.isolation.level=read_committed`` (``isolation.level`` in other clients).

    **Limits.** Kafka has no prepared state without a timeout (KIP-939 is not usable on
    released brokers): a batch must be committed within ``kafka.transaction.timeout.ms`` of
    its first record, *including a restart after a crash*. A transaction that expired before
    the commit was decided fails the batch with nothing visible (restarting writes it
    again). One that expired after (the driver was down longer than the timeout) is lost:
    the query fails with a data-loss error naming the batch, the Spark and Kafka partitions
    and the cause, and fails again on every restart until ``failOnDataLoss=false`` accepts
    the loss. Size the timeout for batch time plus restart time, up to the broker's
    ``transaction.max.timeout.ms`` (raise that if needed). ``spark.speculation=true`` is
    refused: a speculative copy of a task would abort the transaction of the attempt Spark
    keeps. A task attempt that Spark gave up for lost but still runs (a zombie) is fenced by
    the next attempt; if it fences the kept attempt first, the commit's check sees it and the
    batch fails with nothing visible (only a zombie waking in the milliseconds between that
    check and the commits could still cost a partition's rows, reported as data loss).
    While a batch is open, read_committed readers of its partitions wait at its first record
    (the last stable offset). When every task of a batch fails before reporting (and the
    checkpoint is not on a local file system), the driver cannot name the default prefix:
    that batch's transactions are aborted at the restart, or by the timeout; set
    ``transactionalIdPrefix`` to abort them at once.

    **ACLs and broker settings** (exactly-once): WRITE on the output topics; WRITE (which
    implies DESCRIBE) on the TransactionalId resources of the prefix (a PREFIXED ACL on
    ``<prefix>-``); CREATE (or an operator-made topic: one partition,
    ``cleanup.policy=compact``), READ and WRITE on the intent topic; DESCRIBE_CONFIGS on the
    cluster to check the timeout at start (optional: without it the check is skipped). The
    transaction state log needs ``transaction.state.log.replication.factor`` and
    ``min.isr`` the cluster can meet. At-least-once needs WRITE on the output topics and,
    for the idempotent producer, IDEMPOTENT_WRITE on the cluster on brokers before 3.0.
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
