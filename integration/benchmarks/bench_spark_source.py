"""Spark source throughput: ``format("pykafka")`` beside the JVM connector, same broker, one run.

Not a test: a script (``make bench-spark-source``) that starts a single-node Kafka, writes one
topic per (value size, codec) with the broker's ProducerPerformance tool (4 partitions,
distinct JSON-like values, no keys), starts one local[2] SparkSession with the JVM connector on
its classpath, warms both formats up (a batch read and a stream), and for each topic measures,
alternating the two formats within each round:

- batch read: ``spark.read...load()`` aggregated over every column (lengths of key, value and
  topic, sums of partition, offset and timestampType, max timestamp), so every value is
  materialised; a ``count()`` would let Spark skip the columns;
- streaming read: ``Trigger.AvailableNow`` over the whole topic in 4 micro-batches
  (``maxOffsetsPerTrigger``), each aggregated the same way in ``foreachBatch``. Three figures:
  ``stream`` from ``start()`` to the end of the query; ``stream-steady`` over the middle
  micro-batches (all but the first and the last: the steady state of a long-running query),
  with their CPU per row; and ``start_s``, from ``start()`` to the first trigger.
  ``stream-triggers`` lines give, per format, the first, middle (median) and last triggers'
  durations and the median of each phase of the middle ones (latestOffset, queryPlanning,
  addBatch, walCommit + commitOffsets). The first trigger carries the query's start; the last
  reads up to the end of the log, where the JVM connector's consumer waits its
  ``fetch.max.wait.ms`` (500 ms) for records that never come: a cost of draining a topic to
  its end, which the whole-query figure keeps, not of the steady state. A Python streaming
  source pays Spark's start of a planner process per query before the first trigger (a
  fresh interpreter that compiles pyspark from ``pyspark.zip``, about 1 s of CPU here), which
  the JVM connector does not: it is a cost of starting a query, not of reading, so it is
  reported apart rather than hidden or folded into throughput alone;
- per-micro-batch overhead: a stream over a 1-partition topic fed at a steady small rate
  (``--rate`` records/s), default trigger (back to back); the median ``triggerExecution`` of
  batches that read something, where it goes (latestOffset, queryPlanning, addBatch,
  walCommit + commitOffsets), and the CPU time per batch of all processes.

Besides records per second (wall clock), each run records the CPU time it cost, per process
(``cpu_meter``: the Spark JVM with its reaped children, the live Python workers, the broker,
the driver), as microseconds of CPU per row. On a machine shared with other work wall-clock
ratios swing with the load; CPU per row much less, and on 2 busy cores throughput follows it.
The load average is printed with each topic.

The session runs Spark's Python workers over Unix domain sockets, as the README recommends
(``spark_settings``; ``--tcp-python-sockets`` for Spark's default TCP). Figures are medians of
``--runs`` rounds; ratios are ours / JVM (for CPU: JVM / ours, so that
above 1 is better for us in both).

    .venv/bin/python integration/benchmarks/bench_spark_source.py
    .venv/bin/python integration/benchmarks/bench_spark_source.py --values 100 --codecs none
    .venv/bin/python integration/benchmarks/bench_spark_source.py --py-spy /tmp/spy  # profile
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from integration.benchmarks import floor_source, spark_settings
from integration.benchmarks.bench_fetcher import _payload_file
from integration.benchmarks.cpu_meter import CpuMeter
from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars
from integration.harness.spark import spark_session

FORMATS = ("pykafka", "kafka")
# The per-micro-batch overhead is also measured for a Python source that does no I/O at all
# (floor_source): what any Python streaming source pays, beside what pykafka pays.
FLOOR = "kafka_ds_floor"
PARTITIONS = 4
# Micro-batches per streaming read; the steady state is all but the first and the last.
TRIGGERS = 4


def _produce(cluster: KafkaCluster, topic: str, records: int, value_bytes: int,
             codec: str) -> None:
    cluster.create_topic(topic, PARTITIONS)
    cluster.run_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(records), "--payload-file", str(_payload_file(value_bytes)),
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={cluster.bootstrap()}", "acks=1",
        f"compression.type={codec}", "linger.ms=20", "batch.size=131072",
        timeout_s=900, heap_mb=512)


def _every_column(df: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return df.agg(F.sum(F.length("key")), F.sum(F.length("value")), F.sum(F.length("topic")),
                  F.sum("partition"), F.sum("offset"), F.max("timestamp"),
                  F.sum("timestampType"), F.count(F.lit(1))).collect()


def _batch(spark: Any, fmt: str, bootstrap: str, topic: str, records: int,
           meter: CpuMeter | None = None, options: dict[str, str] | None = None
           ) -> dict[str, float]:
    started = time.perf_counter()
    df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).options(**(options or {})).load())
    rows = _every_column(df)[0][-1]
    elapsed = time.perf_counter() - started
    assert rows == records, (fmt, rows, records)
    return {"rps": records / elapsed}


# Phases of a micro-batch (``durationMs`` keys), reported as medians over the triggers that
# read something; walCommit and commitOffsets (Spark's offset and commit logs) are one figure.
_PHASES = ("latestOffset", "queryPlanning", "addBatch", "logs")


def _phase_ms(progress: dict[str, Any], phase: str) -> float:
    durations = progress["durationMs"]
    if phase == "logs":
        return float(durations.get("walCommit", 0) + durations.get("commitOffsets", 0))
    return float(durations.get(phase, 0))


def _stream(spark: Any, fmt: str, bootstrap: str, topic: str, records: int,
            meter: CpuMeter | None = None, options: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """Records/s from query start to its end (``rps``) and in the steady state (``steady_rps``:
    the micro-batches between the first and the last); seconds to the first trigger; the
    first, middle (median) and last triggers' durations and the middle ones' phases (ms).
    With a ``meter``, also the CPU time per row of the middle micro-batches, from the second
    ``foreachBatch`` call to the last one (each call's snapshot is taken before its read)."""
    seen: list[int] = []
    cpu_at_call: list[dict[str, float]] = []

    def each_batch(df: Any, batch_id: int) -> None:
        if meter is not None:
            cpu_at_call.append(meter.snapshot())
        seen.append(_every_column(df)[0][-1])

    started_wall = time.time()
    started = time.perf_counter()
    query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(records // TRIGGERS + PARTITIONS))
             .options(**(options or {})).load()
             .writeStream.foreachBatch(each_batch).trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    assert query.exception() is None, query.exception()
    assert sum(seen) == records, (fmt, seen, records)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(progress) >= 3, (fmt, "a steady state needs 3 micro-batches or more", progress)
    middle = progress[1:-1]
    middle_s = sum(p["durationMs"]["triggerExecution"] for p in middle) / 1000
    first_trigger = datetime.fromisoformat(
        query.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
    figures: dict[str, Any] = {
        "rps": records / elapsed,
        "steady_rps": sum(p["numInputRows"] for p in middle) / middle_s,
        "start_s": first_trigger.timestamp() - started_wall,
        "first_trigger_ms": progress[0]["durationMs"]["triggerExecution"],
        "trigger_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in middle),
        "last_trigger_ms": progress[-1]["durationMs"]["triggerExecution"],
        "phases_ms": {phase: statistics.median(_phase_ms(p, phase) for p in middle)
                      for phase in _PHASES},
    }
    if len(cpu_at_call) == len(seen) >= 3:
        # Summed over the processes: only the total is exact when work moves between them.
        cpu_s = sum(CpuMeter.spent(cpu_at_call[1], cpu_at_call[-1]).values())
        figures["steady_cpu_us_per_row"] = 1e6 * cpu_s / sum(seen[1:-1])
    return figures


def _overhead(spark: Any, cluster: KafkaCluster, meter: CpuMeter, fmt: str, batches: int,
              rate: int) -> dict[str, float]:
    """Median per-batch durations (ms) of a stream fed ``rate`` records/s, and CPU per batch."""
    from confluent_kafka import Producer

    stop = threading.Event()
    feeder = None
    if fmt == FLOOR:  # no broker: rows counted from wall time at the same rate
        reader = spark.readStream.format(FLOOR).option("rate", str(rate))
    else:
        topic = f"bench-overhead-{fmt}-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, 1)

        def feed() -> None:
            producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 0})
            index = 0
            while not stop.is_set():
                producer.produce(topic, value=b"%099d" % index)
                index += 1
                producer.poll(0)
                stop.wait(1 / rate)
            producer.flush(10)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        reader = (spark.readStream.format(fmt)
                  .option("kafka.bootstrap.servers", cluster.bootstrap())
                  .option("subscribe", topic))
    query = reader.load().writeStream.format("noop").start()
    cpu_before: dict[str, float] = {}
    measured_from = 0
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = [p for p in query.recentProgress if p["numInputRows"]]
            if len(done) >= 3 and not cpu_before:  # warmed up: measure from here
                cpu_before, measured_from = meter.snapshot(), len(query.recentProgress)
            if len(done) >= batches + 3:
                break
            time.sleep(0.5)
        cpu = CpuMeter.spent(cpu_before, meter.snapshot()) if cpu_before else {}
        measured_batches = len(query.recentProgress) - measured_from
    finally:
        query.stop()
        stop.set()
        if feeder is not None:
            feeder.join(10)
    progress = [p for p in query.recentProgress if p["numInputRows"]][3:]

    def median(key: str) -> float:
        return statistics.median(p["durationMs"].get(key, 0) for p in progress)

    figures = {
        "batches": len(progress),
        "rows_per_batch": statistics.median(p["numInputRows"] for p in progress),
        "trigger_ms": median("triggerExecution"),
        "latest_offset_ms": median("latestOffset"),
        "planning_ms": median("queryPlanning"),
        "add_batch_ms": median("addBatch"),
        "logs_ms": statistics.median(p["durationMs"].get("walCommit", 0)
                                     + p["durationMs"].get("commitOffsets", 0)
                                     for p in progress),
    }
    if cpu and measured_batches > 0:
        figures["cpu_ms_per_batch"] = round(1000 * sum(cpu.values()) / measured_batches, 1)
        figures["cpu_ms_per_batch_by_process"] = {
            key: round(1000 * value / measured_batches, 1) for key, value in cpu.items()}
    return figures


class PySpy:
    """``py-spy record`` of the Python workers (every worker daemon and the workers it forks)
    during one run."""

    def __init__(self, out_dir: Path | None, meter: CpuMeter) -> None:
        self.out_dir = out_dir
        self.meter = meter
        self.files: list[Path] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if self.out_dir is None or not Path(exe).exists():
            return
        # Every daemon: Spark keeps one per Python executable, worker module and worker
        # environment, and a query's tasks need not run under the first (bench_spark_sink's
        # writes ran under a second one, so recording only the first caught none of them).
        for pid in self.meter.python_workers():
            out = self.out_dir / f"{name}-{pid}.txt"
            self.files.append(out)
            self._procs.append(subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--subprocesses", "--threads",
                 "--format", "raw",
                 "--rate", "250", "--nonblocking", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if self._procs:
            time.sleep(1.0)  # attached before the run starts

    def stop(self) -> None:
        for proc in self._procs:
            proc.send_signal(signal.SIGINT)
        for proc in self._procs:
            proc.wait(60)
        self._procs = []

    def summary(self, top: int = 25, since: str = "") -> list[tuple[float, str]]:
        """Share of samples per frame (self time), over the recordings whose name starts
        with ``since`` (all by default). ``manager (daemon.py:...)`` lines are PySpark's
        daemon: its ``gc.collect()`` between two tasks of a reused worker shows there."""
        frames: Counter[str] = Counter()
        for path in self.files:
            if not path.exists() or not path.name.startswith(since):
                continue
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                leaf = stack.rsplit(";", 1)[-1]
                if stack:
                    frames[leaf] += int(count)
        total = sum(frames.values()) or 1
        return [(100 * count / total, frame) for frame, count in frames.most_common(top)]


def _measure(meter: CpuMeter, read: Any, spark: Any, fmt: str, bootstrap: str, topic: str,
             records: int) -> dict[str, Any]:
    """One read, with the CPU time it cost per row."""
    before = meter.snapshot()
    figures: dict[str, Any] = read(spark, fmt, bootstrap, topic, records, meter)
    cpu = CpuMeter.spent(before, meter.snapshot())
    if cpu:
        figures["cpu_us_per_row"] = 1e6 * sum(cpu.values()) / records
        figures["cpu_s"] = {key: round(value, 2) for key, value in cpu.items()}
    return figures


def _row(mode: str, size: int, codec: str, records: int,
         runs: dict[str, list[dict[str, Any]]], key: str) -> dict[str, Any]:
    ours = statistics.median(r[key] for r in runs["pykafka"])
    jvm = statistics.median(r[key] for r in runs["kafka"])
    row: dict[str, Any] = {"mode": mode, "value_bytes": size, "codec": codec,
                           "records": records, "pykafka_rps": round(ours),
                           "kafka_rps": round(jvm), "ratio": round(ours / jvm, 2),
                           "runs": {fmt: [round(r[key]) for r in runs[fmt]] for fmt in FORMATS}}
    cpu_key = {"rps": "cpu_us_per_row", "steady_rps": "steady_cpu_us_per_row"}.get(key, "")
    if cpu_key and all(cpu_key in r for fmt in FORMATS for r in runs[fmt]):
        cpu = {fmt: statistics.median(r[cpu_key] for r in runs[fmt]) for fmt in FORMATS}
        row["cpu_us_per_row"] = {fmt: round(value, 3) for fmt, value in cpu.items()}
        row["cpu_ratio"] = round(cpu["kafka"] / cpu["pykafka"], 2)
        if key == "rps":
            row["cpu_s"] = {fmt: [r["cpu_s"] for r in runs[fmt]] for fmt in FORMATS}
    return row


def _trigger_row(size: int, codec: str, runs: dict[str, list[dict[str, Any]]]
                 ) -> dict[str, Any]:
    """Medians over the runs of each format's per-trigger figures (ms) and start (s)."""
    figures: dict[str, dict[str, float]] = {}
    for fmt in FORMATS:
        figures[fmt] = {key: round(statistics.median(r[key] for r in runs[fmt]), 3)
                        for key in ("start_s", "first_trigger_ms", "trigger_ms",
                                    "last_trigger_ms")}
        figures[fmt].update({phase: statistics.median(r["phases_ms"][phase] for r in runs[fmt])
                             for phase in _PHASES})
    return {"mode": "stream-triggers", "value_bytes": size, "codec": codec, **figures}


def _print_row(row: dict[str, Any]) -> None:
    line = (f"{row['mode']:18} {row['value_bytes']:5} B {row['codec']:5}  "
            f"pykafka {row['pykafka_rps'] / 1e6:6.3f} M/s  kafka {row['kafka_rps'] / 1e6:6.3f} "
            f"M/s  ratio {row['ratio']:5.2f}")
    if "cpu_ratio" in row:
        cpu = row["cpu_us_per_row"]
        line += (f"   cpu/row {cpu['pykafka']:.2f} vs {cpu['kafka']:.2f} us  "
                 f"cpu ratio {row['cpu_ratio']:5.2f}")
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", default="100,1000", help="value sizes in bytes")
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--records-100", type=int, default=2_000_000,
                        help="records per topic for values under 500 bytes")
    parser.add_argument("--records-1k", type=int, default=600_000,
                        help="records per topic for values of 500 bytes or more")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="batch,stream", help="batch and/or stream")
    parser.add_argument("--overhead-batches", type=int, default=20)
    parser.add_argument("--rate", type=int, default=200, help="records/s for the overhead run")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--only-overhead", action="store_true",
                        help="no throughput topics: the per-micro-batch overhead run alone")
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="record the Python workers of our runs with py-spy into this dir "
                             "(dev extra) and print the top frames")
    parser.add_argument("--tcp-python-sockets", action="store_true",
                        help="Spark's default TCP sockets to the Python workers instead of the "
                             "Unix domain sockets the README recommends")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    sizes = [] if args.only_overhead else [int(v) for v in args.values.split(",")]
    codecs = args.codecs.split(",")
    modes = args.modes.split(",")
    results: dict[str, Any] = {"throughput": [], "overhead": {}, "load_average": []}
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    with KafkaCluster(nodes=1) as cluster:
        meter = CpuMeter(cluster.pid(cluster.node_ids[0]))
        spy = PySpy(args.py_spy, meter)
        topics = {}
        for size in sizes:
            for codec in codecs:
                records = args.records_100 if size < 500 else args.records_1k
                topic = f"bench-src-{size}-{codec}-{uuid.uuid4().hex[:6]}"
                print(f"writing {records} x {size} B ({codec}) to {topic}", flush=True)
                _produce(cluster, topic, records, size, codec)
                topics[(size, codec)] = (topic, records)
        spark = spark_session(fetch_spark_kafka_jars(), app_name="bench_spark_source",
                              conf=spark_settings.session_conf(args.tcp_python_sockets))
        bootstrap = cluster.bootstrap()
        # Warm both formats up once (JVM classes and JIT, Python workers), batch and stream
        # (the overhead run warms itself up: its first batches are not counted).
        warm_topic, warm_records = next(iter(topics.values()), ("", 0))
        for fmt in FORMATS if topics else ():
            _batch(spark, fmt, bootstrap, warm_topic, warm_records)
            if "stream" in modes:
                _stream(spark, fmt, bootstrap, warm_topic, warm_records)
        for (size, codec), (topic, records) in topics.items():
            load = os.getloadavg()[0]
            results["load_average"].append(round(load, 2))
            print(f"-- {size} B {codec}: load average {load:.2f}", flush=True)
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {
                mode: {fmt: [] for fmt in FORMATS} for mode in modes}
            for round_index in range(args.runs):
                for mode in modes:
                    read = _batch if mode == "batch" else _stream
                    for fmt in FORMATS:
                        if fmt == "pykafka":
                            spy.start(f"{mode}-{size}-{codec}-{round_index}")
                        try:
                            runs[mode][fmt].append(_measure(meter, read, spark, fmt,
                                                            bootstrap, topic, records))
                        finally:
                            spy.stop()
            for mode in modes:
                keys = ["rps"] if mode == "batch" else ["rps", "steady_rps"]
                for key in keys:
                    label = mode if key == "rps" else "stream-steady"
                    row = _row(label, size, codec, records, runs[mode], key)
                    results["throughput"].append(row)
                    _print_row(row)
                if mode == "stream":
                    row = _trigger_row(size, codec, runs[mode])
                    results["throughput"].append(row)
                    for fmt in FORMATS:
                        print(f"{'stream-triggers':18} {size:5} B {codec:5}  {fmt:8} start() to "
                              "first trigger {start_s:.2f} s, first trigger {first_trigger_ms:.0f} "
                              "ms, middle {trigger_ms:.0f} ms, last {last_trigger_ms:.0f} ms; "
                              "per middle trigger: latestOffset "
                              "{latestOffset:.0f}, queryPlanning {queryPlanning:.0f}, addBatch "
                              "{addBatch:.0f}, walCommit + commitOffsets {logs:.0f} ms"
                              .format(**row[fmt]), flush=True)
        if not args.skip_overhead:
            floor_source.register(spark)
            for fmt in (*FORMATS, FLOOR):
                figures = _overhead(spark, cluster, meter, fmt, args.overhead_batches,
                                    args.rate)
                results["overhead"][fmt] = figures
                print(f"overhead {fmt:8} " + "  ".join(f"{k} {v}" for k, v in figures.items()),
                      flush=True)
        if spy.files:
            print("\npy-spy, Python workers of the pykafka runs (self time, top frames):")
            for share, frame in spy.summary():
                print(f"  {share:5.1f}%  {frame}")
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
