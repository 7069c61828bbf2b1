"""The worker-memory probe's /proc/<pid>/smaps breakdown adds up to what the kernel reports.

Its oracle is ``/proc/<pid>/status`` (``VmRSS``), which the kernel keeps apart from the
per-mapping figures the breakdown sums. (``RssAnon`` is not the heap plus the anonymous
mappings: the copied-on-write pages of the libraries' own mappings count there too.)
"""

from __future__ import annotations

import os
import sys

import pytest

from integration.benchmarks.probe_worker_memory import smaps_breakdown
from integration.harness.procfs import memory_mib

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def test_the_breakdown_adds_up_to_the_resident_memory() -> None:
    held = bytearray(64 << 20)  # a large anonymous mapping, resident once written
    held[::4096] = b"\x01" * len(held[::4096])
    parts = smaps_breakdown(os.getpid())
    rss_mib, _ = memory_mib(os.getpid())
    total = parts["heap_mib"] + parts["anon_maps_mib"] + parts["files_mib"]
    # Each part is rounded down to whole MiB; the process moves a little between the reads.
    assert abs(total - rss_mib) <= 4
    assert parts["files_mib"] >= 5  # the interpreter and its libraries, mapped from files
    # The 64 MiB written is one large mapping, resident (the kernel may have merged it with
    # a neighbouring one): "reserved:resident" MiB.
    sizes = [tuple(map(int, large.split(":"))) for large in parts["large_anon_maps"]]
    assert any(64 <= resident <= reserved <= resident + 16 for reserved, resident in sizes)
