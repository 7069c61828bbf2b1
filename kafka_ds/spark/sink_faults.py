"""Fault points of the sink, for the tests that prove exactly-once under crashes.

Layer: spark. Inert unless the environment variable ``KAFKA_DS_SINK_FAULTS`` names a JSON
file; the sink then calls ``fault_point(name, ...)`` at each named point of its protocol and
acts on the first matching, not yet fired, entry of the file::

    [{"point": "commit:after-intent", "batch": 1, "action": "kill-driver"},
     {"point": "task:after-prepare", "partition": 0, "attempt": 0, "action": "exit"}]

Actions: ``kill-driver`` (SIGKILL the Spark driver JVM and the Python program that started
it, as a crash would), ``exit`` (the Python worker dies at once), ``raise``, ``sleep``
(``seconds``). Every entry fires once: the firing is appended, as a JSON line with the point,
batch, partition and pid, to ``<file>.log`` before the action, which is how a test proves
that its fault happened (and when). Points: ``task:after-produce``, ``task:after-prepare``,
``commit:start``, ``commit:after-intent``, ``commit:after-first-end``, ``commit:end``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

ENV = "KAFKA_DS_SINK_FAULTS"


def armed(point: str) -> bool:
    """Whether some unfired entry waits at ``point`` (lets the sink take a slower path that
    makes the point reachable, e.g. ending transactions one at a time)."""
    path = os.environ.get(ENV)
    if not path:
        return False
    return any(entry.get("point") == point for _, entry in _unfired(Path(path)))


def fault_point(point: str, *, batch_id: int | None = None, partition: int | None = None,
                attempt: int | None = None, **details: Any) -> None:
    """Run the fault waiting at ``point`` for this batch/partition/attempt, if any."""
    path = os.environ.get(ENV)
    if not path:
        return
    for index, entry in _unfired(Path(path)):
        if entry.get("point") != point:
            continue
        wanted = {"batch": batch_id, "partition": partition, "attempt": attempt}
        if any(key in entry and entry[key] != value for key, value in wanted.items()):
            continue
        _fire(Path(path), index, entry, point, wanted, details)
        return


def _unfired(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [(index, entry) for index, entry in enumerate(entries)
            if not Path(f"{path}.fired.{index}").exists()]


def _fire(path: Path, index: int, entry: dict[str, Any], point: str,
          where: dict[str, Any], details: dict[str, Any]) -> None:
    try:  # exclusive create: of two racing tasks, one fires
        Path(f"{path}.fired.{index}").open("x").close()
    except FileExistsError:
        return
    record = {"point": point, "action": entry.get("action"), "pid": os.getpid(),
              "time": time.time(), **{k: v for k, v in where.items() if v is not None},
              **details}
    with open(f"{path}.log", "a") as log:
        log.write(json.dumps(record) + "\n")
        log.flush()
        os.fsync(log.fileno())
    action = entry.get("action")
    if action == "kill-driver":
        _kill_driver()
    elif action == "exit":
        os._exit(int(entry.get("code", 137)))
    elif action == "raise":
        raise RuntimeError(f"injected fault at {point}")
    elif action == "sleep":
        time.sleep(float(entry.get("seconds", 1)))


def _kill_driver() -> None:
    """SIGKILL the driver JVM (an ancestor running SparkSubmit) and its parent program."""
    pid = os.getpid()
    while pid > 1:
        parent = _parent(pid)
        if parent is None:
            break
        pid = parent
        if "org.apache.spark.deploy.SparkSubmit" in _cmdline(pid):
            program = _parent(pid)
            os.kill(pid, signal.SIGKILL)
            if program is not None and program > 1 and "python" in _cmdline(program):
                os.kill(program, signal.SIGKILL)
            time.sleep(30)  # die with the driver, do not go on
            return
    raise RuntimeError("kill-driver fault: no Spark driver JVM among this process's ancestors")


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
