"""What the test harness and the benchmarks read about processes from ``/proc`` (Linux).

One place for the parsing, so that every reader cuts a ``stat`` line the same way (a process
name may hold spaces and parentheses) and treats a process that ended meanwhile the same way:
as absent, never as an error. Used by the CPU meters of the benchmarks, the soak run and the
standalone Spark cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# Fields of /proc/<pid>/stat after the name (the first is the state, numbered 3 in proc(5)).
_PARENT = 1  # ppid, field 4
_CPU = slice(11, 15)  # utime, stime, cutime, cstime: fields 14-17, in clock ticks


def stat_at(path: Path) -> tuple[str, list[str]] | None:
    """The name and the fields after it of a ``/proc/.../stat`` file (a process's, or a
    thread's under ``task/``); None when it is gone."""
    try:
        stat = path.read_text()
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces and parentheses, so cut at the last ")".
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def stat_fields(pid: int) -> list[str] | None:
    """The fields after the name of ``pid``'s stat line; None when the process is gone."""
    stat = stat_at(Path(f"/proc/{pid}/stat"))
    return None if stat is None else stat[1]


def cpu_s(fields: list[str], with_children: bool) -> float:
    """User + system CPU seconds from a stat line's fields; with the reaped children's too
    when ``with_children`` (a process that ended is counted in its parent's)."""
    ticks = [int(value) for value in fields[_CPU]]
    return sum(ticks if with_children else ticks[:2]) / _TICKS_PER_S


def cpu_s_of(pid: int, with_children: bool = True) -> float:
    """``cpu_s`` of a process by pid; 0 when it is gone."""
    fields = stat_fields(pid)
    return 0.0 if fields is None else cpu_s(fields, with_children)


def parent_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[_PARENT])


def pids() -> list[int]:
    """Every live process's pid."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def children_by_parent() -> dict[int, list[int]]:
    """Every live process's pid, listed under its parent's."""
    children: dict[int, list[int]] = {}
    for pid in pids():
        parent = parent_of(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    return children


def descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """The live processes below ``root`` (not ``root`` itself), from ``children`` when given
    (one scan of /proc serving several questions) or a fresh scan."""
    tree = children_by_parent() if children is None else children
    found, todo = [], list(tree.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces; "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def memory_mib(pid: int) -> tuple[float, float]:
    """Resident memory of ``pid`` in MiB, from one read of its status: all of it (``VmRSS``)
    and the process's own pages alone (``RssAnon``: heap, stacks, private mappings, without
    the pages of files it maps); (0, 0) when the process is gone. How many pages of a mapped
    library are resident depends on the page cache as much as on the process: a Python
    worker in a venv installed a moment before held 25 MB more of pyarrow's library than the
    same worker in an older venv, with the same anonymous memory (56 MB)."""
    found = {"VmRSS": 0.0, "RssAnon": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")  # "VmRSS:\t  123456 kB"
            if name in found:
                found[name] = int(value.split()[0]) / 1024
    except OSError:
        return 0.0, 0.0
    return found["VmRSS"], found["RssAnon"]


def rss_mib(pid: int) -> float:
    """``memory_mib``'s resident figure (``VmRSS``) alone."""
    return memory_mib(pid)[0]
