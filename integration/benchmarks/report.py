"""``make bench``: every benchmark in one run, written up as a Markdown report with PNG plots.

Starts a one-node harness broker and (for the Spark cases) one local[2] SparkSession with the
JVM connector on its classpath, runs each case with kafka_ds beside its peers on the same
broker, interleaving them within each repetition, prints a progress line per scenario, and
writes ``bench-results/<UTC date>/report.md`` with ``<case>.png`` plots (bars: medians;
whiskers: min and max of the repetitions) and ``results.json``. The report opens with the
machine, every version, and a Targets table (issue 11's goals, met or not, from this run).

Cases (``--only`` picks some):

- ``decode``: record batches into Spark's Arrow schema vs kafka-python's decoder, one core,
  CPU time (bench_records.py), on 64 KiB batches and on the Java producer's default 16 KiB;
- ``produce`` / ``consume``: the client vs confluent-kafka, kafka-python and Kafka's Java
  perf tool (bench_producer.py, bench_fetcher.py);
- ``spark-read``: ``format("pykafka")`` vs ``format("kafka")``, batch and availableNow (whole
  query, and its middle micro-batches: the steady state), every column aggregated
  (bench_spark_source.py);
- ``spark-micro-batches``: the same steady state with micro-batches of a sixteenth, an eighth
  and a quarter of a 400 MB topic (``maxOffsetsPerTrigger``), uncompressed;
- ``spark-write``: pykafka exactly-once and at-least-once vs the JVM sink (bench_spark_sink.py);
- ``memory``: the Python worker's RSS while one task reads a topic >= 10x its fetch bounds;
- ``latency``: produce-to-foreachBatch p50/p99 at a steady 10 k records/s, both connectors,
  each warmed up by a query not measured, then run twice for half the time in the order
  A B B A, its records pooled.

The Spark session runs its Python workers over Unix domain sockets, as the README recommends
for ``format("pykafka")`` (``spark_settings``; the report lists it under Versions);
``--tcp-python-sockets`` keeps Spark's default TCP.

``--quick`` (``make bench-quick``) shrinks every case to finish in under 5 minutes on a
2-core machine; the full mode is what the README quotes.

    .venv/bin/python -m integration.benchmarks.report --quick
    .venv/bin/python -m integration.benchmarks.report --only spark-read spark-write
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from integration.benchmarks import bench_records, report_cases, spark_settings
from integration.benchmarks.report_writer import Report, summary, write_report
from integration.harness.cluster import KafkaCluster, java_executable

ROOT = Path(__file__).resolve().parents[2]
CLIENT_CASES = ["decode", "produce", "consume"]
# The memory case runs before any Spark write: Spark reuses its Python workers, and a worker
# that has written holds pandas, which pyspark 4.3 loads to return a write task's commit message
# (kafka_ds.protocol.arrow_numpy); the memory case measures a worker that only read.
SPARK_CASES = ["spark-read", "spark-micro-batches", "memory", "spark-write", "latency"]
CASES = CLIENT_CASES + SPARK_CASES


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    total_kb = next((int(line.split()[1]) for line in meminfo.splitlines()
                     if line.startswith("MemTotal:")), 0)
    load = os.getloadavg()
    return {"cores": str(os.cpu_count()), "CPU": model, "memory": f"{total_kb / 2**20:.1f} GiB",
            "OS": platform.platform(),
            "load average at start (1, 5, 15 min)": ", ".join(f"{x:.1f}" for x in load)}


def versions(cluster: KafkaCluster, spark_jars: list[Path] | None) -> dict[str, str]:
    import confluent_kafka
    import kafka as kafka_python
    import pyarrow

    import kafka_ds

    java = subprocess.run([java_executable(), "-version"], capture_output=True, text=True)
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    found = {"kafka_ds": f"{kafka_ds.__version__} ({commit or 'no git'})",
             "Kafka broker and perf tools": cluster.version,
             "Python": platform.python_version(),
             "Java": (java.stderr.splitlines() or ["?"])[0],
             "confluent-kafka / librdkafka":
                 f"{confluent_kafka.__version__} / {confluent_kafka.libversion()[0]}",
             "kafka-python": kafka_python.__version__, "pyarrow": pyarrow.__version__}
    if spark_jars is not None:
        import pyspark

        found["Spark (pyspark)"] = pyspark.__version__
        found["JVM connector"] = ", ".join(sorted(p.name for p in spark_jars
                                                  if "kafka" in p.name))
    return found


class Progress:
    """One line per finished scenario: its place, the elapsed time, what it measured."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.count = 0

    def __call__(self, line: str) -> None:
        self.count += 1
        elapsed = time.perf_counter() - self.started
        print(f"[{self.count:>2} | {int(elapsed) // 60}m{int(elapsed) % 60:02d}s] {line}",
              flush=True)


def run(cluster: KafkaCluster, config: report_cases.Config, cases: list[str], out_dir: Path,
        mode: str, spark_conf: dict[str, str] | None = None) -> Report:
    """Run ``cases`` against ``cluster`` and write the report into ``out_dir``; the Spark
    cases with ``spark_conf`` (default: ``spark_settings.UNIX_SOCKETS``)."""
    progress = Progress()
    spark = jars = None
    spark_conf = dict(spark_settings.UNIX_SOCKETS) if spark_conf is None else spark_conf
    if any(case in SPARK_CASES for case in cases):
        from integration.harness.jars import fetch_spark_kafka_jars
        from integration.harness.spark import spark_session

        jars = fetch_spark_kafka_jars()
        spark = spark_session(jars, app_name="kafka_ds-bench", conf=spark_conf)
        spark.sparkContext.setLogLevel("ERROR")
    report = Report(mode=mode, machine=machine(), versions=versions(cluster, jars),
                    targets=report_cases.TARGETS)
    if jars is not None:
        report.versions["Spark settings"] = spark_settings.describe(spark_conf)
    if mode == "quick":
        report.notes.append(
            f"Quick mode: topics of a few MB, {config.runs} repetitions "
            f"({config.spark_read_rounds} of the Spark reads). Fixed costs (query "
            "start, the Python planner, the perf tools' JVM) weigh more than in the full run: a "
            "smoke test of the whole chain, not the figures to quote.")
    if "decode" in cases and config.decode_small_batch_bytes:
        report.notes.append(
            f"decode: bench_records' fetch buffers of {config.decode_buffer_bytes >> 10} KiB "
            f"holding batches of {bench_records.Options.batch_bytes >> 10} KiB; the scenarios "
            "marked \", "
            f"{config.decode_small_batch_bytes >> 10} KiB batches\" hold batches of the Java "
            "producer's default batch.size, where our cost per batch shows. The topics of the "
            "other cases are written in batches of up to 128 KiB.")
    if "spark-read" in cases:
        report.notes.append(
            f"Spark read: \"{report_cases.FLOOR_NAME}\" is floor_source's Python data source "
            "that hands Spark rows of the same schema and sizes with no I/O and next to no "
            "work of its own: the fastest any Python source can be read in that scenario, set "
            "by Spark's own costs. It is no peer and no target counts it; its ratio to the "
            "JVM connector bounds what a Python source can reach there (the Targets table's "
            "ceiling).")
    if "spark-micro-batches" in cases:
        report.notes.append(
            f"{report_cases.MICRO_BATCH_CASE}: the steady state (middle micro-batches) of "
            "availableNow reads of one uncompressed topic per value size, with "
            "maxOffsetsPerTrigger at 1/n of it for each n of "
            f"{', '.join(map(str, config.micro_batch_counts))}; every column aggregated in "
            "foreachBatch, as in Spark read. Information for choosing maxOffsetsPerTrigger: no "
            "target counts it.")
    if "spark-write" in cases:
        report.notes.append(
            f"Spark write: \"{report_cases.NO_IO_SINK}\" is bench_spark_sink's Python data "
            "source whose writer only iterates the Arrow batches Spark hands it: what Spark "
            "costs before a Python sink does any work (the JVM side turning rows into Arrow, "
            "the transfer, the worker reading them). It is no peer and no target counts it; "
            "its ratio to the JVM sink bounds what a Python sink can reach there (the Targets "
            "table's ceiling).")
    client_runs: dict[str, Callable[[], Any]] = {
        "decode": lambda: report_cases.decode(config, progress),
        "produce": lambda: report_cases.client_produce(cluster, config, progress),
        "consume": lambda: report_cases.client_consume(cluster, config, progress),
        "spark-read": lambda: report_cases.spark_read(spark, cluster, config, progress),
        "spark-micro-batches":
            lambda: report_cases.spark_micro_batches(spark, cluster, config, progress),
        "spark-write": lambda: report_cases.spark_write(spark, cluster, config, progress),
    }
    for case in cases:
        # A case that fails (e.g. Spark's "Python worker failed to connect back" on an
        # overloaded machine) is named in the report; the others still run and are written.
        try:
            if case in client_runs:
                report.measurements += client_runs[case]()
            elif case == "memory":
                report.memory = report_cases.memory(spark, cluster, config, progress)
            elif case == "latency":
                report.latencies = report_cases.latency(spark, cluster, config, progress)
        except Exception as error:  # reported below, and the run exits non-zero
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            report.failed.append(case)
            report.notes.append(f"The {case} case failed: {type(error).__name__}: "
                                f"{first_line[:300]}")
            progress(f"{case} FAILED: {type(error).__name__}: {first_line[:300]}")
    report.wall_s = time.perf_counter() - progress.started
    report.machine["load average at end (1, 5, 15 min)"] = ", ".join(
        f"{x:.1f}" for x in os.getloadavg())
    write_report(report, out_dir)
    (out_dir / "results.json").write_text(json.dumps(
        {"report": asdict(report), "ratios": summary(report)}, indent=1, default=float))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about 5 minutes")
    parser.add_argument("--only", nargs="+", choices=CASES, default=CASES)
    parser.add_argument("--sizes", type=int, nargs="+", help="value sizes (bytes) instead of "
                        "the mode's")
    parser.add_argument("--codecs", nargs="+", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="codecs instead of the mode's")
    parser.add_argument("--runs", type=int, help="repetitions instead of the mode's")
    parser.add_argument("--tcp-python-sockets", action="store_true",
                        help="Spark's default TCP sockets to the Python workers instead of the "
                             "Unix domain sockets the README recommends")
    parser.add_argument("--out", type=Path,
                        help="output directory (default: bench-results/<UTC date>[-quick])")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    config = report_cases.QUICK if args.quick else report_cases.FULL
    config = dataclasses.replace(config, sizes=args.sizes or config.sizes,
                                 codecs=args.codecs or config.codecs,
                                 runs=args.runs or config.runs,
                                 spark_read_runs=args.runs or config.spark_read_runs,
                                 micro_batch_runs=args.runs or config.micro_batch_runs,
                                 micro_batch_sizes=None if args.sizes
                                 else config.micro_batch_sizes)
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    out_dir = args.out or ROOT / "bench-results" / (day + ("-quick" if args.quick else ""))
    cases = [case for case in CASES if case in args.only]
    with KafkaCluster(nodes=1, heap_mb=1024) as cluster:
        report = run(cluster, config, cases, out_dir, mode,
                     spark_settings.session_conf(args.tcp_python_sockets))
    print(f"\n{mode} run: {report.wall_s / 60:.1f} min; report: {out_dir / 'report.md'}")
    if report.failed:
        print(f"failed cases: {', '.join(report.failed)}", file=sys.stderr)
    for scenario, found in summary(report).items():
        print(f"  {scenario}: " + ", ".join(f"{k} {v:.2f}x" for k, v in found.items()))
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
