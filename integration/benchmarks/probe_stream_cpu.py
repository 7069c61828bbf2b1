"""Where a streaming read's time and CPU go, by process and by JVM thread (a diagnostic).

For ``bench_spark_source``'s question "why does the Spark JVM spend several times more CPU on
a stream than on a batch read of the same rows", this script writes one topic (4 partitions)
and reads it as a batch job and as a ``Trigger.AvailableNow`` stream of 4 micro-batches, with
``bench_spark_source``'s own read functions, for each of ``--formats`` in turn (interleaved,
``--runs`` rounds), while a thread polls /proc every 20 ms. Per read it prints the figures
``bench_spark_source`` gives (rows/s, steady state, start, trigger phases) and:

* the JVM's own CPU (without reaped children) split by thread name (``/proc/<jvm>/task``:
  executor task threads, the stream execution thread, JIT compilers, GC...);
* every Python process the JVM started or ran during the read (the per-query streaming
  source runner, planner daemons, the task workers' daemon), by command line, with its CPU
  last seen: a process that exits is counted up to its last sample (up to 20 ms short). In
  ``bench_spark_source`` the runner's CPU lands in ``spark-jvm`` (a reaped child).

Formats: ``pykafka``, ``kafka`` (the JVM connector) and ``kafka_ds_floor_kafka``
(``floor_source``: the same rows from a Python source that does no I/O, i.e. what any Python
source pays Spark); ``pykafka:mergeRangesBelowOffsets=80000`` adds reader options.
``--event-log DIR`` keeps Spark's event log (every task's launch, finish and metrics, per
job); ``--py-spy DIR`` records our Python workers; ``--python-exec`` runs Spark's Python
processes with another interpreter (e.g. a wrapper script that changes PYTHONPATH).

    flock /tmp/kafka_ds_bench.lock .venv/bin/python -m integration.benchmarks.probe_stream_cpu
    ... -m integration.benchmarks.probe_stream_cpu --records 2000000 --value-bytes 100
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from integration.benchmarks import floor_source, spark_settings
from integration.benchmarks.bench_spark_source import (
    PARTITIONS,
    PySpy,
    _batch,
    _produce,
    _stream,
)
from integration.benchmarks.cpu_meter import CpuMeter
from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars
from integration.harness.procfs import cmdline, cpu_s, descendants, stat_at
from integration.harness.spark import spark_session

_POLL_S = 0.02


def _ticks(path: Path) -> tuple[str, float] | None:
    """A process's or thread's name and CPU seconds (without reaped children)."""
    stat = stat_at(path)
    return None if stat is None else (stat[0], cpu_s(stat[1], with_children=False))


def _thread_group(name: str) -> str:
    # JVM thread names are cut to 15 characters; drop numbers so pools add up.
    return re.sub(r"[-\s#]*\d+$", "", name).strip() or name


class Poller:
    """Last seen CPU seconds of the JVM's threads and of its descendant processes."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.threads: dict[int, tuple[str, float]] = {}
        self.procs: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        for entry in os.listdir(f"/proc/{self.jvm_pid}/task"):
            got = _ticks(Path(f"/proc/{self.jvm_pid}/task/{entry}/stat"))
            if got is not None:
                self.threads[int(entry)] = got
        for pid in descendants(self.jvm_pid):
            got = _ticks(Path(f"/proc/{pid}/stat"))
            if got is None:
                continue
            if pid not in self.procs:
                cmd = cmdline(pid).strip()
                self.procs[pid] = (cmd[-60:], got[1])
            else:
                self.procs[pid] = (self.procs[pid][0], got[1])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(_POLL_S)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _diff(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
          group: Any) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for key, (name, cpu) in after.items():
        spent = cpu - before.get(key, (name, 0.0))[1]
        if spent > 0:
            out[group(key, name)] += spent
    return dict(out)


def _measure(jvm_pid: int, read: Any, options: dict[str, str], *args: Any) -> dict[str, Any]:
    poller = Poller(jvm_pid)
    poller.start()
    threads0, procs0 = dict(poller.threads), dict(poller.procs)
    figures = read(*args, options=options)
    poller.stop()
    threads = _diff(threads0, poller.threads, lambda _, name: _thread_group(name))
    # "new": a process started during the read (the streaming source runner, for one).
    procs = _diff(procs0, poller.procs,
                  lambda pid, cmd: f"{cmd} [{'old' if pid in procs0 else 'new'}]")
    return {"figures": figures, "threads": threads, "procs": procs}


def _print(label: str, result: dict[str, Any]) -> None:
    threads, procs = result["threads"], result["procs"]
    print(f"== {label}: jvm threads {sum(threads.values()):.2f} s, python processes "
          f"{sum(procs.values()):.2f} s", flush=True)
    figures = result["figures"]
    print("   " + ", ".join(f"{k}={v}" for k, v in figures.items() if k != "phases_ms")
          + (f" phases={figures['phases_ms']}" if "phases_ms" in figures else ""))
    for name, cpu in sorted(threads.items(), key=lambda kv: -kv[1])[:14]:
        print(f"   thread {cpu:6.2f}  {name}")
    for name, cpu in sorted(procs.items(), key=lambda kv: -kv[1]):
        if cpu >= 0.01:
            print(f"   proc   {cpu:6.2f}  {name}")


def _format(label: str, records: int, value_bytes: int) -> tuple[str, int, dict[str, str]]:
    """``pykafka:mergeRangesBelowOffsets=80000,...``: a format with extra reader options; the
    rows a read of it holds (the no-I/O source makes up a topic of the same shape)."""
    fmt, _, given = label.partition(":")
    options = dict(item.split("=", 1) for item in given.split(",") if item)
    if fmt == floor_source.KAFKA_FORMAT:
        records, shape = floor_source.kafka_shape(records, value_bytes, PARTITIONS)
        options = {**shape, **options}
    return fmt, records, options


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--formats", default="pykafka,kafka_ds_floor_kafka,kafka",
                        help="kafka_ds_floor_kafka: floor_source's no-I/O stand-in for the "
                             "same topic")
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="record our Python workers' streams with py-spy into this dir")
    parser.add_argument("--event-log", type=Path, default=None,
                        help="also write Spark's event log (task and job timelines) here")
    parser.add_argument("--python-exec", default=None,
                        help="the Python that Spark starts for workers and planners "
                             "(PYSPARK_PYTHON; default: this interpreter)")
    args = parser.parse_args()
    conf = spark_settings.session_conf(False)
    if args.event_log is not None:
        args.event_log.mkdir(parents=True, exist_ok=True)
        conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(args.event_log)})
    with KafkaCluster(nodes=1) as cluster:
        topic = f"probe-{args.value_bytes}-{uuid.uuid4().hex[:6]}"
        _produce(cluster, topic, args.records, args.value_bytes, "none")
        if args.python_exec:  # the harness sets PYSPARK_PYTHON from sys.executable
            sys.executable = args.python_exec
        spark = spark_session(fetch_spark_kafka_jars(), app_name="probe_stream_cpu",
                              conf=conf)
        floor_source.register(spark)
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        bootstrap = cluster.bootstrap()
        formats = args.formats.split(",")
        spy = PySpy(args.py_spy, CpuMeter(None))
        if args.py_spy is not None:
            args.py_spy.mkdir(parents=True, exist_ok=True)
        for label in formats:  # warm up
            fmt, records, options = _format(label, args.records, args.value_bytes)
            _batch(spark, fmt, bootstrap, topic, records, options=options)
            _stream(spark, fmt, bootstrap, topic, records, options=options)
        for round_index in range(args.runs):
            for label in formats:
                fmt, records, options = _format(label, args.records, args.value_bytes)
                for mode, read in (("batch", _batch), ("stream", _stream)):
                    print(f"-- {label} {mode} round {round_index} starts at {time.time():.3f}",
                          flush=True)
                    if fmt == "pykafka":
                        spy.start(f"{mode}-{round_index}")
                    try:
                        result = _measure(jvm_pid, read, options, spark, fmt, bootstrap,
                                          topic, records)
                    finally:
                        spy.stop()
                    _print(f"{label} {mode} round {round_index} ({PARTITIONS} partitions, "
                           f"load {os.getloadavg()[0]:.2f})", result)
    for since in ("batch", "stream"):
        if spy.files:
            print(f"py-spy, Python workers, {since} (self time, top frames):")
            for share, frame in spy.summary(top=30, since=since):
                print(f"  {share:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
