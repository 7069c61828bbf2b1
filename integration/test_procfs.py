"""The harness's /proc readers, against processes this test starts (no broker needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration.harness import procfs

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only")

# A child that starts a grandchild burning ~0.4 s of CPU, reaps it, prints both pids and its
# marker, then sleeps until killed: its CPU is then all in its reaped-children time.
_CHILD = """
import subprocess, sys, time
burn = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"
grandchild = subprocess.Popen([sys.executable, "-c", burn])
grandchild.wait()
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(grandchild.pid, sleeper.pid, flush=True)
time.sleep(60)
"""


def test_a_name_with_spaces_and_parentheses_is_cut_at_the_last_parenthesis(
        tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("4242 (a (b) c) S 17 4242 4242 0 -1 4194560 10 0 0 0 250 75 30 5 20 0\n")
    got = procfs.stat_at(stat)
    assert got is not None
    name, fields = got
    assert name == "a (b) c"
    assert fields[0] == "S" and int(fields[1]) == 17
    ticks = os.sysconf("SC_CLK_TCK")
    assert procfs.cpu_s(fields, with_children=False) == pytest.approx((250 + 75) / ticks)
    assert procfs.cpu_s(fields, with_children=True) == pytest.approx((250 + 75 + 30 + 5) / ticks)


def test_a_process_tree_its_cpu_and_a_gone_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, "procfs-marker"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        reaped, sleeper = map(int, child.stdout.readline().split())
        try:
            _check_tree(child.pid, reaped, sleeper)
        finally:
            os.kill(sleeper, 9)
    finally:
        child.kill()
        child.wait()
    time.sleep(0.05)
    assert procfs.stat_fields(child.pid) is None
    assert procfs.cpu_s_of(child.pid) == 0.0
    assert procfs.parent_of(child.pid) is None
    assert procfs.cmdline(child.pid) == ""
    assert procfs.rss_mib(child.pid) == 0.0
    assert procfs.memory_mib(child.pid) == (0.0, 0.0)


def _check_tree(child: int, reaped: int, sleeper: int) -> None:
    below_us = procfs.descendants(os.getpid())
    assert child in below_us and sleeper in below_us
    assert reaped not in below_us  # it ended
    assert procfs.parent_of(sleeper) == child
    assert sleeper in procfs.children_by_parent()[child]
    assert "procfs-marker" in procfs.cmdline(child)
    # The grandchild's 0.4 s of CPU is the child's reaped-children time, not its own.
    assert procfs.cpu_s_of(child, with_children=True) >= 0.3
    assert procfs.cpu_s_of(child, with_children=False) < 0.3
    assert procfs.rss_mib(child) > 1


# A child that maps a file and reads every page of it (resident, but file-backed), then
# allocates and touches 48 MiB of its own (anonymous), printing a line after each step.
_MAPPER = """
import mmap, sys
with open(sys.argv[1], "rb") as file:
    mapped = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
    total = sum(mapped[at] for at in range(0, len(mapped), 4096))
    print("mapped", total, flush=True)
    sys.stdin.readline()
    own = bytearray(48 << 20)
    for at in range(0, len(own), 4096):
        own[at] = 1
    print("allocated", flush=True)
    sys.stdin.readline()
"""


def test_anonymous_rss_leaves_out_the_pages_of_mapped_files(tmp_path: Path) -> None:
    data = tmp_path / "mapped.bin"
    data.write_bytes(os.urandom(64 << 20))
    child = subprocess.Popen([sys.executable, "-c", _MAPPER, str(data)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().startswith("mapped")
        total, anonymous = procfs.memory_mib(child.pid)
        assert total - anonymous >= 60  # the 64 MiB file is resident, and not anonymous
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().startswith("allocated")
        total_after, anonymous_after = procfs.memory_mib(child.pid)
        assert anonymous_after - anonymous >= 46
        assert total_after - total >= 46
    finally:
        child.kill()
        child.wait()
