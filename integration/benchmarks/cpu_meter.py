"""CPU time of the processes a Spark benchmark runs on, from /proc (Linux).

On a shared 2-core machine wall-clock throughput depends on what else runs; the CPU time each
side spends per row does much less. ``CpuMeter.snapshot()`` sums user + system time of:

* ``spark-jvm``: the Spark JVM (driver and executor threads, JIT, GC) *and* the children it
  has reaped (Spark's per-query Python planner process for a Python streaming source, which
  exits when the query stops, and Python workers that ended);
* ``python-workers``: Python processes the JVM started that are still alive (the daemons and
  the workers they forked, reused across tasks: the source's ``read`` runs there; planner
  daemons for batch reads too), with their reaped children;
* ``broker``: the Kafka broker process;
* ``driver``: this Python process (PySpark's driver side: ``foreachBatch`` callbacks).

The difference of two snapshots is what a measurement cost, per category. Processes that start
and end between the snapshots are counted through their parent's reaped-children time.
"""

from __future__ import annotations

import os
from pathlib import Path

from integration.harness.procfs import (
    children_by_parent,
    cmdline,
    cpu_s,
    descendants,
    stat_fields,
)


class CpuMeter:
    """Snapshots of CPU seconds by category (see the module docstring)."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self.available = Path("/proc/self/stat").exists()
        self._jvm_pid: int | None = None

    def _find_jvm(self, children: dict[int, list[int]]) -> int | None:
        if self._jvm_pid is None or stat_fields(self._jvm_pid) is None:
            self._jvm_pid = next((pid for pid in descendants(os.getpid(), children)
                                  if "org.apache.spark.deploy.SparkSubmit" in cmdline(pid)),
                                 None)
        return self._jvm_pid

    def snapshot(self) -> dict[str, float]:
        if not self.available:
            return {}
        children = children_by_parent()
        out = {"spark-jvm": 0.0, "python-workers": 0.0, "broker": 0.0, "driver": 0.0}
        own = stat_fields(os.getpid())
        if own is not None:
            out["driver"] = cpu_s(own, with_children=False)
        jvm = self._find_jvm(children)
        if jvm is not None:
            fields = stat_fields(jvm)
            if fields is not None:
                out["spark-jvm"] = cpu_s(fields, with_children=True)
            for pid in descendants(jvm, children):
                fields = stat_fields(pid)
                if fields is not None:
                    # Live descendants; each one's reaped children are in its own cutime.
                    out["python-workers"] += cpu_s(fields, with_children=True)
        if self.broker_pid is not None:
            fields = stat_fields(self.broker_pid)
            if fields is not None:
                out["broker"] = cpu_s(fields, with_children=True)
        return out

    def python_workers(self) -> list[int]:
        """The pids of this Spark's daemons that fork the workers running tasks (``read``,
        ``write``): there may be several."""
        children = children_by_parent()
        jvm = self._find_jvm(children)
        if jvm is None:
            return []
        return [pid for pid in children.get(jvm, [])
                if cmdline(pid).strip().endswith("-m pyspark.daemon pyspark.worker")]

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {key: after[key] - before.get(key, 0.0) for key in after}
