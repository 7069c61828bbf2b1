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

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (``VmRSS``), 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def stat_at(path: Path) -> tuple[str, list[str]] | None:
    """The name and the fields after it of a ``/proc/.../stat`` file (a process's, or a
    thread's under ``task/``); None when it is gone."""
    try:
        stat = path.read_text()
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces and parentheses, so cut at the last ")".
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def _stat_fields(pid: int) -> list[str] | None:
    stat = stat_at(Path(f"/proc/{pid}/stat"))
    return None if stat is None else stat[1]


def _cpu_s(fields: list[str], with_children: bool) -> float:
    # utime, stime, cutime, cstime are fields 14-17 of /proc/pid/stat (11-14 after comm).
    ticks = int(fields[11]) + int(fields[12])
    if with_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS_PER_S


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class CpuMeter:
    """Snapshots of CPU seconds by category (see the module docstring)."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self.available = Path("/proc/self/stat").exists()
        self._jvm_pid: int | None = None

    def _find_jvm(self, children: dict[int, list[int]]) -> int | None:
        if self._jvm_pid is None or _stat_fields(self._jvm_pid) is None:
            self._jvm_pid = next((pid for pid in _descendants(os.getpid(), children)
                                  if "org.apache.spark.deploy.SparkSubmit" in _cmdline(pid)),
                                 None)
        return self._jvm_pid

    def snapshot(self) -> dict[str, float]:
        if not self.available:
            return {}
        children = _children()
        out = {"spark-jvm": 0.0, "python-workers": 0.0, "broker": 0.0, "driver": 0.0}
        own = _stat_fields(os.getpid())
        if own is not None:
            out["driver"] = _cpu_s(own, with_children=False)
        jvm = self._find_jvm(children)
        if jvm is not None:
            fields = _stat_fields(jvm)
            if fields is not None:
                out["spark-jvm"] = _cpu_s(fields, with_children=True)
            for pid in _descendants(jvm, children):
                fields = _stat_fields(pid)
                if fields is not None:
                    # Live descendants; each one's reaped children are in its own cutime.
                    out["python-workers"] += _cpu_s(fields, with_children=True)
        if self.broker_pid is not None:
            fields = _stat_fields(self.broker_pid)
            if fields is not None:
                out["broker"] = _cpu_s(fields, with_children=True)
        return out

    def python_workers(self) -> list[int]:
        """The pids of this Spark's daemons that fork the workers running ``read``."""
        children = _children()
        jvm = self._find_jvm(children)
        if jvm is None:
            return []
        return [pid for pid in children.get(jvm, [])
                if _cmdline(pid).strip().endswith("-m pyspark.daemon pyspark.worker")]

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {key: after[key] - before.get(key, 0.0) for key in after}
