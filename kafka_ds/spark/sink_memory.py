"""Letting the sink's Python worker reuse the memory it frees instead of faulting in fresh pages.

Layer: spark. Used by the sink's writes (option ``workerMemoryReuse``, on by default).

Every batch a task writes passes through buffers of megabytes: the Arrow batches Spark sends
(10,000 rows each: 10 MB at 1 KB a row), the records sections the encoder builds, the
compressed payloads and the Produce requests. They are freed within milliseconds, and the next
batch asks for the same sizes again. pyarrow's default allocator (mimalloc) gives freed
segments back to the kernel after ~10 ms, and glibc's ``malloc`` maps allocations above its
threshold with ``mmap`` and unmaps them on ``free``, so each new buffer is fresh memory whose
every page the kernel must fault in and zero (on hosts with transparent huge pages, 2 MiB at a
time). Measured for one task writing 1 KB rows exactly-once on a 2-core VM: 2.4-3.0 us of
kernel time per row, more than the encoding, compression and sending together (1.0-1.2 us).

``reuse_worker_memory`` makes Arrow allocate through glibc (``pa.system_memory_pool``) and
tells glibc to keep what is freed: allocations up to ``_MMAP_THRESHOLD_BYTES`` come from the
heap, and the heap is handed back to the kernel only when more than ``_TRIM_THRESHOLD_BYTES``
lie free at its top. Kernel time per row then fell to 0.4-0.8 us. The price is that a
worker's resident memory stays near the most it has used (the producer's ``buffer.memory``
plus a few of Spark's Arrow batches) until it exits. It is a setting of the whole worker
process, made once, and only with glibc (elsewhere nothing changes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import pyarrow as pa

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit systems).
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024

_done = False


def reuse_worker_memory() -> bool:
    """Make this process keep freed memory for reuse (see the module docstring), once.

    True when it changed the settings now; False when done before, or when the C library is
    not glibc (then Arrow's default allocator stays).
    """
    global _done
    if _done:
        return False
    _done = True
    try:
        libc_version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # not a GNU system
        libc_version = ""
    if not libc_version.startswith("glibc"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
            and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)):
        return False
    pa.set_memory_pool(pa.system_memory_pool())
    return True
