"""The cases of ``make bench``: each runs kafka_ds beside its peers and returns Measurements.

Layer: benchmarks. The measuring functions are the existing scripts' (``bench_records``,
``bench_producer``, ``bench_fetcher``, ``bench_spark_source``, ``bench_spark_sink``), called
with the sizes a ``Config`` gives; what is new here is only the loop that interleaves the
connectors within each repetition (so a burst of load elsewhere on the machine hits them
alike), and the two cases no script had: the Python worker's memory inside Spark, and
end-to-end latency at a steady rate.

Run as ``python -m integration.benchmarks.report_cases --feed BOOTSTRAP TOPIC RATE SECONDS``
it is the latency case's paced producer (a process of its own, so that its GIL and the
driver's do not delay each other).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from integration.benchmarks import (
    bench_fetcher,
    bench_producer,
    bench_records,
    bench_spark_sink,
    bench_spark_source,
    floor_source,
)
from integration.benchmarks.report_writer import Latency, Measurement, MemoryTrace, Target
from integration.harness.cluster import KafkaCluster
from integration.harness.procfs import cpu_s_of, descendants, memory_mib

ROOT = Path(__file__).resolve().parents[2]
JVM = "kafka (JVM)"


@dataclass
class Config:
    """Sizes of one run: ``QUICK`` (under 5 minutes on 2 cores) or ``FULL`` (the README's)."""

    runs: int
    sizes: list[int]
    codecs: list[str]
    decode_buffer_bytes: int
    produce_records: int
    kafka_python_produce_records: int
    produce_modes: list[str]
    consume_bytes: int
    kafka_python_consume_records: int
    spark_read_bytes: int
    spark_write_bytes: int
    memory_records: int
    latency_rate: int
    latency_seconds: float
    # Repetitions of the Spark read case (its queries pay seconds of start each, whatever
    # the topic's size); None: ``runs``.
    spark_read_runs: int | None = None
    # The decode case again on batches of this size (None: not), beside bench_records' 64 KiB:
    # the Java producer's default batch.size, where each batch holds ~16 records of 1 KB and
    # our per-batch Python cost shows (bench-results/README.md, "Small producer batches").
    decode_small_batch_bytes: int | None = 16 << 10
    # The micro-batch size case: one topic of ``micro_batch_bytes`` per value size (the run's
    # sizes when ``micro_batch_sizes`` is None), read by availableNow queries of n
    # micro-batches for each n of ``micro_batch_counts``, each query ``micro_batch_runs``
    # times.
    micro_batch_bytes: int = 400_000_000
    micro_batch_counts: tuple[int, ...] = (16, 8, 4)
    micro_batch_sizes: list[int] | None = None
    micro_batch_runs: int = 3

    @property
    def spark_read_rounds(self) -> int:
        return self.spark_read_runs or self.runs


QUICK = Config(runs=3, sizes=[100, 1000], codecs=["none"], decode_buffer_bytes=1 << 20,
               produce_records=40_000, kafka_python_produce_records=5_000,
               produce_modes=["idempotent"], consume_bytes=10_000_000,
               kafka_python_consume_records=20_000, spark_read_bytes=12_000_000,
               spark_write_bytes=12_000_000, memory_records=60_000, latency_rate=10_000,
               latency_seconds=6,  # six queries of 3 s: the latency case's warm-up and halves
               # The Spark read's 42 queries took 2m12s of a 4.7 min quick run (2026-11-28,
               # load 0.6), mostly each query's fixed start: 2 rounds make them 30 (1m30s).
               spark_read_runs=2,
               # A warm-up of three small queries, then three of one size, once each (12 s
               # in all on the fastest machine here): a smoke test of the case.
               micro_batch_bytes=12_000_000, micro_batch_counts=(3,), micro_batch_sizes=[100],
               micro_batch_runs=1)
FULL = Config(runs=5, sizes=[100, 1000], codecs=["none", "lz4", "zstd"],
              decode_buffer_bytes=2 << 20, produce_records=200_000,
              kafka_python_produce_records=30_000, produce_modes=["idempotent", "transactional"],
              consume_bytes=200_000_000, kafka_python_consume_records=200_000,
              spark_read_bytes=200_000_000, spark_write_bytes=200_000_000,
              memory_records=300_000, latency_rate=10_000, latency_seconds=60)

Progress = Callable[[str], None]

# The goals of issue 11, checked in the report against what the run measured.
# Where a peer is measured with its defaults and tuned, so are we, and the best of each side
# is compared.
RECEIVE_AHEAD = "kafka_ds (receive.ahead)"
# What a Python connector doing no work of its own reaches: floor_source's reader, and
# bench_spark_sink's writer that only iterates Spark's Arrow batches.
FLOOR_NAME = "no-I/O Python source"
NO_IO_SINK = "no-I/O Python sink"
TARGETS = [
    Target("Spark read", " 100 B ", ("pykafka",), (JVM,), 2.0, ceiling=FLOOR_NAME),
    Target("Spark read", " 1000 B ", ("pykafka",), (JVM,), 1.5, ceiling=FLOOR_NAME),
    Target("Spark write", "", ("pykafka exactly-once",), (JVM,), 1.5, ceiling=NO_IO_SINK),
    Target("client consume", "", ("kafka_ds", RECEIVE_AHEAD),
           ("confluent-kafka (tuned)", "confluent-kafka (defaults)"), 2.0),
    Target("client produce", "", ("kafka_ds send()",), ("confluent-kafka",), 1.0),
]


def _label(size: int, codec: str) -> str:
    return f"{size} B {codec}"


def _interleaved(runs: int, readers: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """``runs`` rounds, each calling every reader once, in turn."""
    samples: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(runs):
        for name, read in readers.items():
            samples[name].append(read())
    return samples


def _measurements(case: str, scenario: str, samples: dict[str, list[float]],
                  ours: set[str]) -> list[Measurement]:
    return [Measurement(case, scenario, name, name in ours, values)
            for name, values in samples.items()]


def decode(config: Config, progress: Progress) -> list[Measurement]:
    """bench_records: decode into Spark's Arrow schema vs kafka-python's decoder, CPU time;
    with ``decode_small_batch_bytes``, again on batches of that size."""
    out = []
    args = bench_records.Options(buffer_bytes=config.decode_buffer_bytes,
                                 runs=max(5, config.runs), clock="cpu")
    variants = [(args, "")]
    if config.decode_small_batch_bytes:
        small = config.decode_small_batch_bytes
        variants.append((replace(args, batch_bytes=small), f", {small >> 10} KiB batches"))
    for (variant, suffix), size, codec in itertools.product(variants, config.sizes,
                                                           ["none", "lz4", "zstd"]):
        rates = bench_records.measure_rates(size, bench_records.CODECS[codec], variant)
        scenario = _label(size, codec) + suffix
        out += [Measurement("decode (one core, CPU time)", scenario, "kafka_ds decode+arrow",
                            True, rates["decode_samples"]),
                Measurement("decode (one core, CPU time)", scenario, "kafka-python decoder",
                            False, rates["kafka_python_decode_samples"])]
        progress(f"decode {scenario}: {rates['decode'] / 1e6:.2f} M rec/s "
                 f"({rates['decode'] / rates['kafka_python_decode']:.1f}x kafka-python; "
                 f"this process got {rates['core_share']:.0%} of a core)")
    return out


# The CPU cases of client produce: records per CPU-second (higher is better, like the rates, so
# that ratios read the same way), of every thread of the process and of the calling thread
# alone (its sends, commits and flush). Wall rates of per-record sends swing by about 0.2x between
# quiet runs of the same code on 2 cores shared with the broker; CPU time much less. And only
# ours runs its background work (the sender thread) under the GIL, serialised with send(),
# where librdkafka's threads run beside produce(): the calling-thread figure compares the
# per-record call itself, the all-threads figure the whole cost.
PRODUCE_CPU_CASES = {"all": "client produce, records per CPU-second (all threads)",
                     "caller": "client produce, records per CPU-second (calling thread)"}
PER_CPU_SECOND = "records per CPU-second"


def client_produce(cluster: KafkaCluster, config: Config, progress: Progress
                   ) -> list[Measurement]:
    """bench_producer's clients, one fresh topic per client and repetition: records/s, and
    records per CPU-second (``PRODUCE_CPU_CASES``)."""
    out = []
    cpu_rows = []
    names = {"ours": "kafka_ds send()", "ours-bulk": "kafka_ds send_many()",
             "confluent": "confluent-kafka", "kafka-python": "kafka-python"}
    ours = {names["ours"], names["ours-bulk"]}
    for mode in config.produce_modes:
        for size in config.sizes:
            for codec in config.codecs:
                cpu: dict[str, dict[str, list[float]]] = {
                    kind: {name: [] for name in names.values()} for kind in PRODUCE_CPU_CASES}
                samples = _interleaved(config.runs, {
                    name: partial(_produce_once, cluster, client, size, codec, mode, config,
                                  {kind: cpu[kind][name] for kind in cpu})
                    for client, name in names.items()})
                scenario = f"{mode} {_label(size, codec)}"
                rows = _measurements("client produce", scenario, samples, ours)
                out += rows
                for kind, case in PRODUCE_CPU_CASES.items():
                    cpu_rows += [Measurement(case, scenario, name, name in ours, values,
                                             PER_CPU_SECOND)
                                 for name, values in cpu[kind].items()]
                progress(f"client produce {scenario}: " + _line(rows, names["ours"]))
    return out + cpu_rows


def _produce_once(cluster: KafkaCluster, client: str, size: int, codec: str, mode: str,
                  config: Config, cpu: dict[str, list[float]]) -> float:
    """One bench_producer client writing one fresh topic: records/s; appends its records per
    CPU-second to ``cpu["all"]`` and ``cpu["caller"]``."""
    topic = f"bench-produce-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 1)
    count = (config.kafka_python_produce_records if client == "kafka-python"
             else config.produce_records)
    values = bench_producer.bench_values(size, count)
    rate: float = bench_producer.CLIENTS[client](cluster.bootstrap(), topic, values, None,
                                                 codec, mode == "transactional")
    cpu["all"].append(1e6 / max(bench_producer.last_cpu_us_per_record, 1e-6))
    cpu["caller"].append(1e6 / max(bench_producer.last_caller_cpu_us_per_record, 1e-6))
    return rate


def client_consume(cluster: KafkaCluster, config: Config, progress: Progress
                   ) -> list[Measurement]:
    """bench_fetcher's readers on one 1-partition topic per (size, codec): ours with its
    defaults and with ``receive.ahead`` (which pays where a core is free), confluent-kafka
    with its defaults and tuned."""
    out = []
    for size in config.sizes:
        for codec in config.codecs:
            records = config.consume_bytes // size
            topic = f"bench-consume-{size}-{codec}-{uuid.uuid4().hex[:6]}"
            bench_fetcher._produce(cluster, topic, records, size, codec)
            capped = min(records, config.kafka_python_consume_records)
            bench_fetcher._ours(cluster, topic, min(records, 100_000), {})  # warm up
            samples = _interleaved(config.runs, {
                "kafka_ds": partial(bench_fetcher._ours, cluster, topic, records, {}),
                RECEIVE_AHEAD: partial(bench_fetcher._ours, cluster, topic, records,
                                       {"receive.ahead": "true"}),
                "confluent-kafka (tuned)":
                    partial(bench_fetcher._confluent, cluster, topic, records),
                "confluent-kafka (defaults)":
                    partial(bench_fetcher._confluent, cluster, topic, records, False),
                "kafka-python": partial(bench_fetcher._kafka_python, cluster, topic, capped),
                "Java ConsumerPerformance": partial(bench_fetcher._java, cluster, topic, records),
            })
            rows = _measurements("client consume", _label(size, codec), samples,
                                 {"kafka_ds", RECEIVE_AHEAD})
            out += rows
            progress(f"client consume {_label(size, codec)} ({records} records): " + _line(rows))
    return out


def spark_read(spark: Any, cluster: KafkaCluster, config: Config, progress: Progress
               ) -> list[Measurement]:
    """bench_spark_source's batch and availableNow reads, every column aggregated."""
    out = []
    bootstrap = cluster.bootstrap()
    topics = {}
    for size in config.sizes:
        for codec in config.codecs:
            records = config.spark_read_bytes // size
            topic = f"bench-read-{size}-{codec}-{uuid.uuid4().hex[:6]}"
            bench_spark_source._produce(cluster, topic, records, size, codec)
            topics[(size, codec)] = (topic, records)
    # Beside the two connectors, floor_source's no-I/O Python source handing Spark rows of the
    # same shape: what any Python source pays Spark, so the report shows how much of a gap to
    # a target is Spark's (it is no peer: no target counts it).
    floor_source.register(spark)
    formats = (*bench_spark_source.FORMATS, FLOOR)
    warm_topic, warm_records = next(iter(topics.values()))
    warm_size = next(iter(topics))[0]
    for fmt in formats:  # JVM classes, Python workers, stream start
        args = _read_args(fmt, warm_topic, warm_records, warm_size)
        bench_spark_source._batch(spark, fmt, bootstrap, *args)
        bench_spark_source._stream(spark, fmt, bootstrap, *args)
    names = {"pykafka": "pykafka", "kafka": JVM, FLOOR: FLOOR_NAME}
    steady = "availableNow, middle micro-batches"
    modes = ("batch", "availableNow", steady)
    for (size, codec), (topic, records) in topics.items():
        samples: dict[str, dict[str, list[float]]] = {
            mode: {names[f]: [] for f in formats} for mode in modes}
        for _ in range(config.spark_read_rounds):
            for fmt in formats:
                args = _read_args(fmt, topic, records, size)
                samples["batch"][names[fmt]].append(
                    bench_spark_source._batch(spark, fmt, bootstrap, *args)["rps"])
            for fmt in formats:
                # Whole query (start included: a Python source starts a planner process per
                # query; the end too: the JVM consumer waits at the log's end) and the middle
                # micro-batches (a long-running query's steady state).
                stream = bench_spark_source._stream(spark, fmt, bootstrap,
                                                    *_read_args(fmt, topic, records, size))
                samples["availableNow"][names[fmt]].append(stream["rps"])
                samples[steady][names[fmt]].append(stream["steady_rps"])
        for mode in modes:
            rows = _measurements("Spark read", f"{mode} {_label(size, codec)}", samples[mode],
                                 {"pykafka"})
            out += rows
            progress(f"Spark read {mode} {_label(size, codec)} ({records} records): "
                     + _line(rows))
    return out


FLOOR = floor_source.KAFKA_FORMAT
MICRO_BATCH_CASE = "Spark read by micro-batch size"
MICRO_BATCH_WARM_BYTES = 4_000_000


def spark_micro_batches(spark: Any, cluster: KafkaCluster, config: Config,
                        progress: Progress) -> list[Measurement]:
    """Steady-state rows/s of availableNow reads whose micro-batches hold 1/n of a topic, for
    each n of ``micro_batch_counts``: how each connector's rate moves with
    ``maxOffsetsPerTrigger``, which the Spark read case keeps at a quarter of its topic.

    Uncompressed values only (the codec is not the question), bench_spark_source's stream
    (every column aggregated in ``foreachBatch``), the middle micro-batches of each query
    (neither the first, which carries the query's start, nor the last, which reads to the end
    of the log). The no-I/O Python source reads the same shape beside the two connectors."""
    out: list[Measurement] = []
    bootstrap = cluster.bootstrap()
    floor_source.register(spark)
    formats = (*bench_spark_source.FORMATS, FLOOR)
    names = {"pykafka": "pykafka", "kafka": JVM, FLOOR: FLOOR_NAME}
    sizes = config.micro_batch_sizes or config.sizes
    # Unmeasured first: each format streams a small topic in bench_spark_source's four
    # micro-batches (JVM classes, Python workers, a query's start and later micro-batches
    # with their commits; ``_stream`` wants three or more), so that the first
    # round is as warm as the others even when no other case ran before this one. Without
    # it, a run of this case alone (2026-12-07/micro-batches) read its first 25 MB round a
    # third slower than the next two, both connectors alike.
    def stream(fmt: str, topic: str, records: int, size: int, count: int) -> float:
        """Steady rows/s of ``topic`` read by ``fmt`` in ``count`` micro-batches. As
        bench_spark_source's own limit: a few rows over 1/count, so that the sticky
        partitioner's uneven partitions leave no sliver of a last micro-batch."""
        topic_or_floor, rows, meter, options = _read_args(fmt, topic, records, size)
        limit = str(records // count + bench_spark_source.PARTITIONS)
        return bench_spark_source._stream(spark, fmt, bootstrap, topic_or_floor, rows, meter,
                                          {**options, "maxOffsetsPerTrigger": limit}
                                          )["steady_rps"]

    warm_records = min(config.micro_batch_bytes, MICRO_BATCH_WARM_BYTES) // sizes[0]
    warm_topic = f"bench-micro-batches-warm-{uuid.uuid4().hex[:6]}"
    bench_spark_source._produce(cluster, warm_topic, warm_records, sizes[0], "none")
    for fmt in formats:
        stream(fmt, warm_topic, warm_records, sizes[0], bench_spark_source.TRIGGERS)
    for size in sizes:
        records = config.micro_batch_bytes // size
        topic = f"bench-micro-batches-{size}-{uuid.uuid4().hex[:6]}"
        bench_spark_source._produce(cluster, topic, records, size, "none")
        for count in config.micro_batch_counts:
            samples: dict[str, list[float]] = {names[fmt]: [] for fmt in formats}
            for _ in range(config.micro_batch_runs):
                for fmt in formats:
                    samples[names[fmt]].append(stream(fmt, topic, records, size, count))
            scenario = (f"{_label(size, 'none')}, {config.micro_batch_bytes // count / 1e6:.0f} MB"
                        f" ({records // count} rows) per micro-batch")
            rows_found = _measurements(MICRO_BATCH_CASE, scenario, samples, {"pykafka"})
            out += rows_found
            progress(f"{MICRO_BATCH_CASE} {scenario}: " + _line(rows_found))
    return out


def _read_args(fmt: str, topic: str, records: int, size: int
               ) -> tuple[str, int, None, dict[str, str]]:
    """``(topic, records, meter, options)`` for bench_spark_source's reads of ``fmt``: the
    floor makes up a topic of the same rows in bench_spark_source's partitions."""
    if fmt != FLOOR:
        return topic, records, None, {}
    whole, options = floor_source.kafka_shape(records, size, bench_spark_source.PARTITIONS)
    return topic, whole, None, options


def _write_once(writer: str, df: Any, bootstrap: str, topic: str, codec: str,
                rows: int) -> float:
    """One bench_spark_sink write of the cached ``df``: rows/s, after the pause that keeps the
    broker's work for the previous write out of it (``bench_spark_sink.SETTLE_S``)."""
    time.sleep(bench_spark_sink.SETTLE_S)
    started = time.perf_counter()
    bench_spark_sink._write(writer, df, bootstrap, topic, codec)
    return rows / (time.perf_counter() - started)


def spark_write(spark: Any, cluster: KafkaCluster, config: Config, progress: Progress
                ) -> list[Measurement]:
    """bench_spark_sink's writers: pykafka exactly-once and at-least-once vs the JVM sink,
    beside its no-I/O writer (Spark's own cost of handing a Python sink its rows)."""
    out: list[Measurement] = []
    bootstrap = cluster.bootstrap()
    names = {"eos": "pykafka exactly-once", "alo": "pykafka at-least-once", "jvm": JVM,
             "noop": NO_IO_SINK}
    spark.dataSource.register(bench_spark_sink._noop_source())
    partitions = 4
    for size in config.sizes:
        for codec in config.codecs:
            rows_count = config.spark_write_bytes // size
            df = bench_spark_sink._input(spark, rows_count, size, partitions)
            topic = f"bench-write-{size}-{codec}-{uuid.uuid4().hex[:6]}"
            cluster.create_topic(topic, partitions)
            # Warm up each path, in every Python worker; the first scenario with its whole
            # input, as bench_spark_sink does (a cold first scenario cost the JVM sink most).
            warm = df if not out else bench_spark_sink.warm_input(df, partitions)
            for writer in names:
                bench_spark_sink._write(writer, warm, bootstrap, topic, codec)

            samples = _interleaved(config.runs, {
                name: partial(_write_once, writer, df, bootstrap, topic, codec, rows_count)
                for writer, name in names.items()})
            df.unpersist()
            rows = _measurements("Spark write", _label(size, codec), samples,
                                 {names["eos"], names["alo"]})
            out += rows
            progress(f"Spark write {_label(size, codec)} ({rows_count} rows): " + _line(rows))
    return out


# --- memory -------------------------------------------------------------------------------

_FETCH_BYTES = 1 << 20
_ARROW_ROWS = 4096


def memory(spark: Any, cluster: KafkaCluster, config: Config, progress: Progress
           ) -> MemoryTrace:
    """Peak RSS of the Python worker while one task reads a topic >= 10x the fetch bounds.

    One partition, so one task and one worker; the fetch bounds are lowered to 1 MiB
    responses and 4096-row Arrow batches, so that what a worker may buffer (one response
    decoding, one in flight, one Arrow batch) is ~6 MB and the topic is many times that.
    Every Python process under Spark's JVM is sampled; the trace is the one that spent the
    most CPU during the read (the worker that ran the task; Spark reuses workers).
    """
    size = 1000
    bound = 2 * _FETCH_BYTES + _ARROW_ROWS * (size + 100)
    records = max(config.memory_records, 10 * bound // size + 1)
    topic = f"bench-memory-{uuid.uuid4().hex[:6]}"
    bench_fetcher._produce(cluster, topic, records, size, "none")
    jvm_pid = spark.sparkContext._gateway.proc.pid

    def read(end: int | None) -> None:
        reader = (spark.read.format("pykafka")
                  .option("kafka.bootstrap.servers", cluster.bootstrap())
                  .option("subscribe", topic)
                  .option("kafka.fetch.max.bytes", str(_FETCH_BYTES))
                  .option("kafka.max.partition.fetch.bytes", str(_FETCH_BYTES))
                  .option("kafka.arrow.batch.rows", str(_ARROW_ROWS)))
        if end is not None:
            reader = reader.option("endingOffsets", f'{{"{topic}": {{"0": {end}}}}}')
        rows = bench_spark_source._every_column(reader.load())[0][-1]
        assert rows == (records if end is None else end), rows

    read(1000)  # start the Python worker, connect, import
    pids = descendants(jvm_pid)
    baseline = {pid: memory_mib(pid) for pid in pids}  # (RSS, anonymous) MiB
    cpu_before = {pid: cpu_s_of(pid, with_children=False) for pid in pids}
    seconds: list[float] = []
    memory_by_pid: dict[int, list[tuple[float, float]]] = {}
    done = threading.Event()

    def sample() -> None:
        began = refreshed = time.perf_counter()
        while not done.is_set():
            now = time.perf_counter()
            if now - refreshed > 1.0:  # a worker forked during the read
                pids[:] = descendants(jvm_pid)
                refreshed = now
            seconds.append(now - began)
            for pid in pids:
                memory_by_pid.setdefault(pid, [(0.0, 0.0)] * (len(seconds) - 1)).append(
                    memory_mib(pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        read(None)
    finally:
        done.set()
        sampler.join(10)
    worker = max(memory_by_pid, key=lambda pid: cpu_s_of(pid, with_children=False)
                 - cpu_before.get(pid, 0.0))
    rss_mb, anon_mb = ([sample[i] for sample in memory_by_pid[worker]] for i in (0, 1))
    before_mb = baseline.get(worker, (0.0, 0.0))
    trace = MemoryTrace(records * size, bound, seconds, rss_mb, before_mb[0], anon_mb,
                        before_mb[1])
    progress(f"memory: {records * size / 1e6:.0f} MB read by one task, worker RSS "
             f"{trace.baseline_mb:.0f} MB before, peak {trace.early_peak_mb:.0f} MB in the first "
             f"third, {trace.peak_mb:.0f} MB overall; anonymous {trace.anon_baseline_mb:.0f} MB "
             f"before, peak {trace.anon_peak_mb:.0f} MB ({len(seconds)} samples)")
    return trace


# --- latency ------------------------------------------------------------------------------

def feed(bootstrap: str, topic: str, rate: int, seconds: float) -> None:
    """Produce ``rate`` records/s for ``seconds``, in 10 ms steps; CreateTime = produce call."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    per_step = max(1, rate // 100)
    started = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        for _ in range(per_step):
            producer.produce(topic, value=b"%099d" % sent)
            sent += 1
        producer.poll(0)
        delay = started + sent / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    producer.flush(30)


def _latency_lags(spark: Any, bootstrap: str, topic: str, fmt: str, seconds: float) -> Any:
    """Milliseconds from produce call to ``foreachBatch`` of every record one query saw in
    ``seconds`` past its warm-up micro-batches (a numpy array)."""
    import numpy as np
    from pyspark.sql import functions as F

    lags: list[np.ndarray] = []
    warm_batches = 3

    def each_batch(df: Any, batch_id: int) -> None:
        stamps = df.select(F.unix_millis("timestamp").alias("t")).toArrow().column("t")
        now_ms = time.time() * 1000
        if batch_id >= warm_batches and len(stamps):
            lags.append(now_ms - np.asarray(stamps.to_numpy(zero_copy_only=False), dtype=float))

    checkpoint = tempfile.mkdtemp(prefix="bench-latency-")
    query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
             .start())
    try:
        deadline = time.monotonic() + seconds + 120
        while not lags and time.monotonic() < deadline:  # past the warm-up batches
            time.sleep(0.2)
        lags.clear()
        time.sleep(seconds)
    finally:
        query.stop()
    assert lags, f"{fmt}: no micro-batch with records within {seconds + 120} s"
    return np.concatenate(lags)


def latency(spark: Any, cluster: KafkaCluster, config: Config, progress: Progress
            ) -> list[Latency]:
    """End-to-end p50/p99 from the produce call to foreachBatch, at a steady rate."""
    import numpy as np

    topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 2)
    budget_s = 6 * (config.latency_seconds / 2 + 60)  # six queries, each warming up
    feeder = subprocess.Popen(
        [sys.executable, "-m", "integration.benchmarks.report_cases", "--feed",
         cluster.bootstrap(), topic, str(config.latency_rate), str(budget_s)], cwd=ROOT)
    # A session's streaming queries get faster for minutes (the JVM warming up, its JIT most
    # likely): six 20 s queries in a fresh session, alternating, measured p50 536, 433, 329,
    # 296, 271 and 259 ms (2026-11-28), every phase of a micro-batch (checkpoint writes,
    # planning, the batch itself) falling alike. Run once each, pykafka first, the case
    # reported pykafka trailing (p50 339 and 357 ms against 261 and 295 ms). So each
    # connector first runs a query that is not measured, then two measured halves in the
    # order A B B A, which cancels what drift is left, and its records are pooled.
    first, second = bench_spark_source.FORMATS
    half_s = config.latency_seconds / 2
    lags: dict[str, list[Any]] = {first: [], second: []}
    try:
        for fmt in (first, second):
            warm = _latency_lags(spark, cluster.bootstrap(), topic, fmt, half_s)
            progress(f"latency {fmt} warm-up (not measured): p50 {np.percentile(warm, 50):.0f} ms")
        for fmt in (first, second, second, first):
            lags[fmt].append(_latency_lags(spark, cluster.bootstrap(), topic, fmt, half_s))
            progress(f"latency {fmt} half {len(lags[fmt])} of 2: p50 "
                     f"{np.percentile(lags[fmt][-1], 50):.0f} ms")
    finally:
        feeder.terminate()
        feeder.wait(30)
    out: list[Latency] = []
    for fmt, halves in lags.items():
        values = np.concatenate(halves)
        found = Latency("pykafka" if fmt == "pykafka" else JVM, fmt == "pykafka", len(values),
                        float(np.percentile(values, 50)), float(np.percentile(values, 99)),
                        float(values.max()), config.latency_rate)
        out.append(found)
        progress(f"latency {found.connector} at {config.latency_rate} rec/s: p50 "
                 f"{found.p50_ms:.0f} ms, p99 {found.p99_ms:.0f} ms ({found.records} records)")
    return out


def _line(rows: list[Measurement], ours_name: str | None = None) -> str:
    """The medians, and the ratios of ``ours_name`` (by default our fastest) to each peer."""
    ours = [m for m in rows if m.ours and ours_name in (None, m.connector)]
    text = ", ".join(f"{m.connector} {m.median / 1e6:.3f} M/s" for m in rows)
    if ours:
        best = max(ours, key=lambda m: m.median)
        text += f" | {best.connector}: " + ", ".join(
            f"{best.median / m.median:.2f}x {m.connector}" for m in rows if not m.ours)
    return text


if __name__ == "__main__":
    if sys.argv[1:2] == ["--feed"]:
        feed(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
