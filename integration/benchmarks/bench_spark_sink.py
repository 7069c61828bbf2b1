"""The pykafka sink beside Spark's JVM Kafka sink: same Spark session, same broker, same run.

A script, not a test (``make bench-sink``)::

    python -m integration.benchmarks.bench_spark_sink [--bootstrap HOST:PORT] [--runs 3]
        [--rows 2000000] [--sizes 100 1024] [--codecs none lz4] [--partitions 4]
        [--profile] [--commit-batches 20] [--py-spy DIR] [--tcp-python-sockets]
        [--settle-s 1.0] [--arrow-max-bytes N]

Without ``--bootstrap`` it starts a one-node harness broker. The session runs Spark's Python
workers over Unix domain sockets (``spark_settings``; ``--tcp-python-sockets`` for TCP). The
input is a cached DataFrame of ``--partitions`` partitions (local[2], as the harness session)
whose ``value`` is ``size`` bytes on average (from half to one and a half times ``size``):
bench_fetcher's JSON-like payload lines, as the client benchmarks send. Each scenario
(value size x codec) writes it, ``--runs`` times and alternating, with:

- ``jvm``: ``format("kafka")``, Spark's own sink (at-least-once: it has nothing else);
- ``eos``: ``format("pykafka")``, exactly-once (the default);
- ``alo``: ``format("pykafka")``, ``deliveryGuarantee=at-least-once``;
- ``noop``: a Python ``DataSourceArrowWriter`` that only iterates Spark's Arrow batches:
  what Spark's JVM -> Arrow -> Python path costs before any sink work.

and prints median rows/s and the ratios ``eos/jvm`` and ``alo/jvm``. Rows go to a topic of
``--partitions`` partitions, unkeyed (each writer's partitioner spreads them).

``--commit-batches N`` then runs a streaming query (Kafka in, pykafka exactly-once out, N
micro-batches) and reports the driver's commit time per micro-batch, read from the sink's own
log lines (intent read and write, EndTxn for every transaction, checks), beside Spark's
``addBatch`` (write + commit) and the tasks' phases (waiting for input; the intent read and
InitProducerId, or what is left of them once the input came; sending; waiting for the last
acknowledgements). Each scenario prints the same
timeline for its exactly-once batch writes (median over the runs) from the batch write's log
line. ``--profile`` runs one
task's write path outside Spark under cProfile (the same Arrow batches Spark hands the
writer) and prints where the time goes. ``--py-spy DIR`` records the Python workers during
the exactly-once writes inside Spark (py-spy, a dev extra; every thread, the producer's
sender included) and prints the top frames by self time.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from integration.benchmarks import bench_fetcher
from integration.harness.procfs import cpu_s_of, descendants

WRITERS = ["jvm", "eos", "alo", "noop"]
# Seconds of pause before each measured write, in no rate and no CPU figure. The broker
# keeps working for a while after the JVM sink's write returns: at 1 KB lz4 the writer that
# came next paid up to 0.9 us per row more broker CPU (user time, not GC), whichever of eos
# and alo it was, and little once a noop write (0.5 s) or a pause ran in between; in the
# fixed order jvm, eos, alo, eos paid it every time (eos/alo 0.64-0.72 against 0.93-1.03;
# 2026-11-25, 1 KB lz4, one run of 3-4 rounds per order).
SETTLE_S = 1.0
_COMMIT_LINE = re.compile(r"committed batch (\d+) \((\d+) transactions, \d+ records\) in "
                          r"(\d+) ms; slowest task by phase \(ms\): (\{.*\})")
_BATCH_WRITE_LINE = re.compile(r"committed the batch write \(\d+ transactions, \d+ records\) in "
                               r"(\d+) ms; slowest task by phase \(ms\): (\{.*\})")


def _noop_source() -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Done(WriterCommitMessage):
        pass

    class NoopWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> Any:
            for _ in iterator:
                pass
            return Done()

    class NoopSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "noop_arrow"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return NoopWriter()

    return NoopSource


def _input(spark: Any, rows: int, size: int, partitions: int, lengths: str = "varied") -> Any:
    """A cached DataFrame of ``rows`` rows in ``partitions`` partitions whose ``value`` column
    holds bench_fetcher's JSON-like payload lines, in turn: the values every client benchmark
    sends and reads, so a codec has the same text to compress here as there (lz4 about 2x at
    100 B, about 1x at 1 KB; zstd 3x and 1.7x). The input this replaced repeated one hash
    through each value, which lz4 shrank 13x and zstd 25x at 1 KB, so its compressed writes
    sent the broker a thirteenth or a 25th of the bytes.

    The lengths vary from half to one and a half times ``size``: values of one length would
    measure an encoder's shortcut for equal widths. ``lengths="fixed"``: every value ``size``
    bytes (the line cut or padded with spaces), to compare the two."""
    from pyspark.sql import functions as F

    lines = bench_fetcher.payload_lines(size)
    payloads = spark.createDataFrame(list(enumerate(lines)), "line BIGINT, text BINARY")
    value = (F.col("text") if lengths == "varied"
             else F.expr(f"CAST(rpad(CAST(text AS STRING), {size}, ' ') AS BINARY)"))
    # A broadcast join keeps each partition's ids in order, so consecutive rows carry
    # consecutive lines, as the client benchmarks send them.
    df = (spark.range(0, rows, 1, partitions)
          .join(F.broadcast(payloads), F.col("id") % len(lines) == F.col("line"))
          .select(value.alias("value")))
    df = df.cache()
    assert df.count() == rows
    return df


def warm_input(df: Any, partitions: int) -> Any:
    """A few rows of ``df`` in ``partitions`` tasks: a warm-up that starts (and imports into)
    every Python worker the measured writes use, not only the one a single task would."""
    return df.limit(1000 * partitions).repartition(partitions)


def _write(writer: str, df: Any, bootstrap: str, topic: str, codec: str) -> None:
    if writer == "noop":
        df.write.format("noop_arrow").mode("append").save()
        return
    fmt = "kafka" if writer == "jvm" else "pykafka"
    out = (df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
           .option("topic", topic).option("kafka.compression.type", codec))
    if writer == "alo":
        out = out.option("deliveryGuarantee", "at-least-once")
    out.mode("append").save()


class CpuMeter:
    """CPU seconds spent by the broker, the Spark JVM and its Python workers: where the time
    of a write goes on a machine where all three share the cores."""

    def __init__(self, spark: Any, broker_pid: int | None) -> None:
        self.jvm_pid = spark.sparkContext._gateway.proc.pid
        self.broker_pid = broker_pid

    def sample(self) -> dict[str, float]:
        return {"broker": cpu_s_of(self.broker_pid) if self.broker_pid else 0.0,
                "jvm": cpu_s_of(self.jvm_pid, with_children=False),
                "python": sum(cpu_s_of(pid) for pid in descendants(self.jvm_pid))}


def _batch_write_phases(log: Path | None, since: int) -> dict[str, float]:
    """The exactly-once batch write's timeline from the sink's commit log line written after
    byte ``since`` of ``log``: the slowest task's phases and the driver's commit, in ms."""
    if log is None or not log.exists():
        return {}
    with log.open("rb") as file:
        file.seek(since)
        found = list(_BATCH_WRITE_LINE.finditer(file.read().decode(errors="replace")))
    if not found:
        return {}
    phases = {name: float(ms) for name, ms in ast.literal_eval(found[-1].group(2)).items()}
    return {**phases, "commit": float(found[-1].group(1))}


def _scenario(spark: Any, admin: Any, meter: CpuMeter, bootstrap: str, rows: int, size: int,
              codec: str, partitions: int, runs: int, spy: Any = None,
              log: Path | None = None, lengths: str = "varied",
              writers: list[str] = WRITERS, full_warm_up: bool = False,
              settle_s: float = SETTLE_S) -> dict[str, Any]:
    df = _input(spark, rows, size, partitions, lengths)
    topic = f"bench-sink-{size}-{codec}-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, partitions)
    rates: dict[str, list[float]] = {writer: [] for writer in writers}
    cpu: dict[str, list[dict[str, float]]] = {writer: [] for writer in writers}
    timelines: list[dict[str, float]] = []
    # Warm up every path. The first scenario of a run writes its whole input once per writer:
    # the broker's and Spark's JITs compile their hot paths over the first million rows or
    # so, and a cold first scenario measured every writer (the JVM sink most) at up to twice
    # the CPU per row of the next ones (2026-11-24, 100 B: broker 1.2-1.4 against 0.45 us
    # per row for the JVM sink's writes). Later scenarios warm up with a few rows per task.
    for writer in writers:
        _write(writer, df if full_warm_up else warm_input(df, partitions), bootstrap, topic,
               codec)
    for run in range(runs):
        for writer in writers:
            # What the broker still does for the previous write stays out of this one.
            time.sleep(settle_s)
            if spy is not None and writer == "eos":
                spy.start(f"eos-{size}-{codec}-{run}")
            log_bytes = log.stat().st_size if log is not None and log.exists() else 0
            before = meter.sample()
            started = time.perf_counter()
            try:
                _write(writer, df, bootstrap, topic, codec)
            finally:
                if spy is not None:
                    spy.stop()
            rates[writer].append(rows / (time.perf_counter() - started))
            after = meter.sample()
            cpu[writer].append({k: (after[k] - before[k]) * 1e6 / rows for k in after})
            if writer == "eos" and (timeline := _batch_write_phases(log, log_bytes)):
                timelines.append(timeline)
    df.unpersist()
    admin.delete_topics([topic])
    out: dict[str, Any] = {writer: statistics.median(values) for writer, values in rates.items()}
    out["cpu_us_per_row"] = {writer: {k: statistics.median(sample[k] for sample in samples)
                                      for k in samples[0]} for writer, samples in cpu.items()}
    if timelines:
        out["eos_phases_ms"] = {name: statistics.median(t.get(name, 0.0) for t in timelines)
                                for name in timelines[0]}
    return out


def _commit_latency(spark: Any, admin: Any, bootstrap: str, batches: int, log: Path) -> None:
    """Streaming: the driver's commit time per micro-batch, from the sink's log lines."""
    from kafka_ds.client.producer import Producer

    source, target = f"bench-src-{uuid.uuid4().hex[:6]}", f"bench-dst-{uuid.uuid4().hex[:6]}"
    admin.create_topic(source, 4)
    admin.create_topic(target, 4)
    per_batch = 50_000
    with Producer({"bootstrap.servers": bootstrap, "batch.size": "524288"}) as producer:
        import pyarrow as pa
        for _ in range(batches):
            producer.send_arrow(source, pa.array([b"x" * 100] * per_batch))
        producer.flush()
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_batch)).load().select("value")
             .writeStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", target)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-commit-"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    matches = list(_COMMIT_LINE.finditer(log.read_text()))
    commits = {int(m.group(1)): int(m.group(3)) for m in matches}
    phases = {int(m.group(1)): ast.literal_eval(m.group(4)) for m in matches}
    add_batch = {p["batchId"]: p["durationMs"].get("addBatch", 0) for p in query.recentProgress}
    steady = sorted(commits)[1:]  # batch 0 also creates the intent topic and a Python worker
    values = [commits[b] for b in steady]
    print(f"\nstreaming, exactly-once, {per_batch} rows of 100 B per micro-batch, 4 tasks:")
    print(f"  driver commit per micro-batch: median {statistics.median(values):.0f} ms, "
          f"max {max(values)} ms (batches {steady[0]}..{steady[-1]}; batch 0: "
          f"{commits.get(0)} ms)")
    print(f"  Spark addBatch (write + commit): median "
          f"{statistics.median(add_batch[b] for b in steady if b in add_batch):.0f} ms")
    names = list(phases[steady[0]])
    print("  slowest task per batch, by phase (median ms): " + ", ".join(
        f"{name} {statistics.median(phases[b].get(name, 0) for b in steady):.0f}"
        for name in names))


def _profile(bootstrap: str, admin: Any, size: int, codec: str) -> None:
    """One task's write path outside Spark: cProfile over the same Arrow input Spark sends."""
    import cProfile
    import pstats

    import pyarrow as pa

    from kafka_ds.client.producer import Producer
    from kafka_ds.spark.sink_memory import reuse_worker_memory
    from kafka_ds.spark.sink_options import InputColumns, parse_sink_options
    from kafka_ds.spark.sink_rows import RowWriter

    # As a task's worker does (option workerMemoryReuse, on by default): without it every
    # encoded section faults fresh pages in, and the profile shows mostly page faults.
    reuse_worker_memory()

    topic = f"bench-prof-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 4)
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                  "kafka.compression.type": codec})
    rows = 1_000_000 if size <= 100 else 200_000
    # The payload lines the Spark writes send (``_input``), 10,000 rows a batch as Spark's.
    value = pa.array(bench_fetcher.payload_lines(size)[:10_000])
    batches = [pa.record_batch([value], names=["value"])] * (rows // 10_000)
    props = dict(options.producer_properties(f"bench-prof-{uuid.uuid4().hex}", 60_000))
    producer = Producer(props)
    producer.init_transactions()
    producer.begin_transaction()
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    writer = RowWriter(producer, InputColumns(value="value"), topic, options.max_rows_per_send)
    writer.write(batches)
    writer.wait()
    producer.prepare_transaction()
    profiler.disable()
    elapsed = time.perf_counter() - started
    producer.close()
    print(f"\nprofile: one task, {rows} rows of {size} B, {codec}, exactly-once, outside "
          f"Spark: {rows / elapsed / 1e6:.2f} M rows/s (main thread below; the sender thread "
          "compresses and sends in parallel)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--codecs", nargs="+", default=["none", "lz4"])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--lengths", nargs="+", default=["varied"], choices=["varied", "fixed"],
                        help="values of varying length (half to 1.5x the size; the default) "
                             "and/or of one length: a scenario for each")
    parser.add_argument("--writers", nargs="+", default=WRITERS, choices=WRITERS)
    parser.add_argument("--commit-batches", type=int, default=20)
    parser.add_argument("--settle-s", type=float, default=SETTLE_S,
                        help="pause before each measured write (in no rate, no CPU figure)")
    parser.add_argument("--arrow-max-bytes", type=int, default=None,
                        help="spark.sql.execution.arrow.maxBytesPerBatch for the writes (Spark's "
                             "Arrow batches to the Python writers; default: Spark's own, "
                             "batches of maxRecordsPerBatch=10000 rows)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="record the Python workers of the exactly-once writes into this "
                             "dir with py-spy and print the top frames")
    parser.add_argument("--tcp-python-sockets", action="store_true",
                        help="Spark's default TCP sockets to the Python workers instead of the "
                             "Unix domain sockets the README recommends")
    args = parser.parse_args()

    from integration.benchmarks import spark_settings
    from integration.harness.cluster import KafkaCluster
    from integration.harness.jars import fetch_spark_kafka_jars

    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        cluster = KafkaCluster(nodes=1).start()
        bootstrap = cluster.bootstrap()
    # The sink's commit log lines, from the driver's Python workers, into a file.
    log_dir = Path(tempfile.mkdtemp(prefix="bench-sink-log-"))
    log = log_dir / "sink.log"
    (log_dir / "sitecustomize.py").write_text(
        f"import logging\nhandler = logging.FileHandler({str(log)!r})\n"
        "logging.getLogger('kafka_ds.spark.sink_commit').addHandler(handler)\n"
        "logging.getLogger('kafka_ds.spark.sink_commit').setLevel(logging.INFO)\n")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(log_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    try:
        from integration.harness.spark import spark_session
        from kafka_ds.client.admin import Admin
        from kafka_ds.spark import PyKafkaDataSource

        spark = spark_session(fetch_spark_kafka_jars(),
                              conf=spark_settings.session_conf(args.tcp_python_sockets))
        spark.sparkContext.setLogLevel("ERROR")
        if args.arrow_max_bytes is not None:
            # 10,000 rows of 1 KB make 10 MB Arrow batches; capped at 2 MiB, Spark's JVM spent
            # 0.3-0.7 us less CPU per row handing them to a noop writer (2026-11-25).
            spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch",
                           str(args.arrow_max_bytes))
        spark.dataSource.register(PyKafkaDataSource)
        spark.dataSource.register(_noop_source())
        with Admin.from_properties({"bootstrap.servers": bootstrap}) as admin:
            results = []
            broker = cluster.pid(cluster.node_ids[0]) if cluster is not None else None
            meter = CpuMeter(spark, broker)
            spy = None
            if args.py_spy is not None:
                from integration.benchmarks import cpu_meter
                from integration.benchmarks.bench_spark_source import PySpy

                args.py_spy.mkdir(parents=True, exist_ok=True)
                spy = PySpy(args.py_spy, cpu_meter.CpuMeter(broker))
            for size in args.sizes:
                rows = args.rows if size <= 100 else max(args.rows // 4, 1)
                for codec, lengths in itertools.product(args.codecs, args.lengths):
                    medians = _scenario(spark, admin, meter, bootstrap, rows, size, codec,
                                        args.partitions, args.runs, spy, log, lengths,
                                        args.writers, full_warm_up=not results,
                                        settle_s=args.settle_s)
                    medians["lengths"] = lengths
                    results.append((size, codec, rows, medians))
                    _print_row(size, codec, rows, medians)
                    if spy is not None:
                        print(f"py-spy, Python workers of the exactly-once writes, {size} B "
                              f"{codec} (self time, top frames):")
                        for share, frame in spy.summary(since=f"eos-{size}-{codec}-"):
                            print(f"  {share:5.1f}%  {frame}", flush=True)
            print(f"\nsummary (median rows/s over {args.runs} runs, local[2], "
                  f"{args.partitions} partitions):")
            for size, codec, rows, medians in results:
                _print_row(size, codec, rows, medians)
            print(json.dumps([{"size": s, "codec": c, "rows": r, **m}
                              for s, c, r, m in results], default=float))
            if args.commit_batches:
                _commit_latency(spark, admin, bootstrap, args.commit_batches, log)
            if args.profile:
                _profile(bootstrap, admin, args.sizes[0], args.codecs[-1])
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


def _print_row(size: int, codec: str, rows: int, medians: dict[str, Any]) -> None:
    cpu = medians["cpu_us_per_row"]
    writers = [writer for writer in WRITERS if writer in cpu]
    jvm = medians.get("jvm")
    print(f"{size:>5} B {codec:>5} {medians.get('lengths', 'varied'):>6} {rows:>8} rows | "
          + " | ".join(f"{writer} {medians[writer] / 1e6:5.2f} M/s"
                       + (f" ({medians[writer] / jvm:4.2f}x)"
                          if jvm and writer in ("eos", "alo") else "")
                       for writer in writers), flush=True)
    print("        CPU us/row (broker / Spark JVM / Python workers): " + " | ".join(
        f"{writer} {cpu[writer]['broker']:.2f} / {cpu[writer]['jvm']:.2f} / "
        f"{cpu[writer]['python']:.2f}" for writer in writers), flush=True)
    phases = medians.get("eos_phases_ms")
    if phases:  # the slowest task's phases, then the driver's commit (sink_task, sink_commit)
        print("        eos timeline (median ms; slowest task by phase, then the driver's "
              "commit): " + ", ".join(f"{name} {ms:.0f}" for name, ms in phases.items()),
              flush=True)
    if not {"jvm", "eos", "noop"} <= set(writers):
        return
    # When the cores are the limit, rates go as 1 / CPU per row. Even a sink whose own work
    # cost nothing would pay Spark's JVM -> Arrow -> Python path (noop) and the broker.
    totals = {writer: sum(cpu[writer].values()) for writer in writers}
    floor = totals["noop"] + cpu["eos"]["broker"]
    print(f"        CPU us/row in all: jvm {totals['jvm']:.2f} | eos {totals['eos']:.2f} "
          f"(jvm/eos {totals['jvm'] / totals['eos']:.2f}x) | ceiling if the sink's own work "
          f"were free (noop + broker): {totals['jvm'] / floor:.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
