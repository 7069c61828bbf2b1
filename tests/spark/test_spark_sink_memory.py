"""The sink's Python worker keeps the memory it frees for its next batches
(``workerMemoryReuse``): Arrow allocates through glibc, which keeps freed buffers of up to
32 MiB in its heap instead of unmapping them (then the next batch faults in fresh pages).

The oracle is glibc's own accounting (``mallinfo2``): how many bytes it has mapped with mmap
(``hblkhd``) and how many it holds free in its heap for reuse (``fordblks``). Each check runs in
a fresh interpreter: the settings are process-wide, and the test process keeps its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kafka_ds.spark.sink_options import parse_sink_options

SINK = {"kafka.bootstrap.servers": "localhost:9092", "topic": "t"}

pytestmark = pytest.mark.skipif(
    not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    if hasattr(os, "confstr") else True,
    reason="the setting exists for glibc only (elsewhere it is a no-op)")

_MALLINFO = """
    import ctypes
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    MIB = 1 << 20
"""


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(_MALLINFO)
                             + textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_freed_arrow_and_python_buffers_stay_in_the_heap_for_reuse() -> None:
    out = _run("""
        import pyarrow as pa
        from kafka_ds.spark.sink_memory import reuse_worker_memory
        first, second = reuse_worker_memory(), reuse_worker_memory()
        print(first, second, pa.default_memory_pool().backend_name)
        for make in (lambda: pa.allocate_buffer(24 * MIB), lambda: bytearray(24 * MIB)):
            before = libc.mallinfo2().hblkhd
            buffer = make()
            mapped = libc.mallinfo2().hblkhd - before
            del buffer
            kept = libc.mallinfo2().fordblks
            print(mapped < MIB, kept >= 24 * MIB)
    """)
    # Set once (the second call is a no-op); a 24 MiB buffer, Arrow's or Python's, comes from
    # glibc's heap rather than its own mmap, and once freed stays there for the next one.
    assert out.splitlines() == ["True False system", "True True", "True True"]


def test_without_it_large_buffers_are_mapped_and_unmapped_each_time() -> None:
    # The behaviour the setting changes, by the same measure: glibc maps a 24 MiB buffer on
    # its own and returns it to the kernel when it is freed.
    out = _run("""
        before = libc.mallinfo2().hblkhd
        buffer = bytearray(24 * MIB)
        mapped = libc.mallinfo2().hblkhd - before
        del buffer
        print(mapped >= 24 * MIB, libc.mallinfo2().fordblks < 24 * MIB)
    """)
    assert out == "True True"


def test_the_writer_sets_it_before_its_first_batch_only_when_asked() -> None:
    # The task's write itself (TaskContext, producer) is replaced: what is checked is that
    # the writer changes the worker's allocator before the write, and only with the option.
    out = _run(f"""
        import pyarrow as pa
        from kafka_ds.spark import sink
        from kafka_ds.spark.sink_options import parse_sink_options
        seen = []
        sink.write_task = lambda *args: seen.append(pa.default_memory_pool().backend_name)
        options = {{**{SINK!r}, "workerGcFreeze": "false"}}
        sink.PyKafkaBatchWriter(parse_sink_options({{**options, "workerMemoryReuse": "false"}}),
                                None, "id", 1000)._write(iter(()))
        sink.PyKafkaStreamWriter(parse_sink_options(options), None, None, 1000)._write(
            iter(()))
        print(*seen)
    """)
    assert out.split() == [os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "mimalloc"), "system"]


def test_the_option_defaults_to_on_and_can_be_turned_off() -> None:
    assert parse_sink_options(SINK).worker_memory_reuse
    assert not parse_sink_options({**SINK, "workerMemoryReuse": "False"}).worker_memory_reuse
