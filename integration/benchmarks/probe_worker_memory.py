"""What a reading Python worker keeps between tasks, and where (a diagnostic, not a benchmark).

The report's memory case shows that a worker's memory stays flat while it reads; this script
says what the memory it keeps afterwards is. It writes one topic (the broker's
ProducerPerformance, ``--codec``), then reads it with
``format("pykafka")`` in a local Spark session: a batch read, then an availableNow stream of
``--micro-batches`` micro-batches. After each read it finds the Python worker under Spark's JVM
with the most anonymous memory (the one that read: one partition, one task) and prints:

* from ``/proc/<pid>/smaps``: the glibc heap, the anonymous mappings (with every one of 2 MiB
  resident or more, as reserved:resident MiB) and the pages of mapped files;
* from inside the worker, dumped on SIGUSR1 while it waits for its next task: glibc's
  ``mallinfo2`` (heap in use and free), the bytes pyarrow's memory pool has allocated now,
  the decode areas and pooled fetchers ``kafka_ds`` keeps, and every ``bytes``, ``bytearray``
  or numpy array over 1 MiB the collector can reach; then it asks pyarrow's pool to give back
  what it holds unused (``release_unused``) and reports its anonymous memory after that.

The handler comes from a ``sitecustomize`` module this script writes to a temporary directory
put on the workers' ``PYTHONPATH`` (Spark passes the driver's on): every Python process Spark
starts imports it. ``--arrow-pool system`` sets ``ARROW_DEFAULT_MEMORY_POOL`` for the workers
(pyarrow's default is mimalloc).

    .venv/bin/python -m integration.benchmarks.probe_worker_memory
    .venv/bin/python -m integration.benchmarks.probe_worker_memory --arrow-pool system
    .venv/bin/python -m integration.benchmarks.probe_worker_memory --codec zstd
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from integration.benchmarks import bench_fetcher, spark_settings
from integration.benchmarks.bench_spark_source import _every_column
from integration.harness.cluster import KafkaCluster
from integration.harness.procfs import descendants, memory_mib
from integration.harness.spark import spark_session

# The workers' side: on SIGUSR1, write what this process holds to DUMP_DIR/<pid>.json.
_SITECUSTOMIZE = '''
import os, signal

def _kafka_ds_memory_dump(signum, frame):
    import ctypes, gc, json, sys
    out = {"pid": os.getpid()}
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    out["glibc_heap_mib"] = info.arena / 2**20
    out["glibc_in_use_mib"] = info.uordblks / 2**20
    out["glibc_mmapped_mib"] = info.hblkhd / 2**20
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        out["arrow_allocated_mib"] = pa.total_allocated_bytes() / 2**20
        out["arrow_pool"] = pa.default_memory_pool().backend_name
    chunks = sys.modules.get("kafka_ds.client.chunk_decode")
    if chunks is not None:
        out["decode_areas_mib"] = [len(area.buf) / 2**20 for area in chunks._free_areas]
    pool = sys.modules.get("kafka_ds.spark.fetcher_pool")
    if pool is not None and pool._POOL is not None:
        out["pooled_fetchers"] = sum(len(idle) for idle in pool._POOL._idle.values())
    np = sys.modules.get("numpy")
    big = []
    for obj in gc.get_objects():
        if isinstance(obj, (bytes, bytearray)) and len(obj) > 1 << 20:
            big.append([type(obj).__name__, len(obj) / 2**20])
        elif np is not None and isinstance(obj, np.ndarray) and obj.base is None \\
                and obj.nbytes > 1 << 20:
            big.append(["ndarray", obj.nbytes / 2**20])
    out["buffers_over_1_mib"] = big
    out["pandas_loaded"] = "pandas" in sys.modules
    if pa is not None:  # how much of it the pool gives back when asked
        pa.default_memory_pool().release_unused()
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                out["anon_mib_after_release_unused"] = int(line.split()[1]) / 1024
    with open(os.path.join(DUMP_DIR, f"{os.getpid()}.json"), "w") as f:
        json.dump(out, f)

signal.signal(signal.SIGUSR1, _kafka_ds_memory_dump)
'''


def smaps_breakdown(pid: int) -> dict[str, Any]:
    """Resident MiB of ``pid`` by kind of mapping: the glibc heap, anonymous mappings (and the
    large ones, reserved:resident; stacks and the kernel's pages count here too), mapped
    files."""
    heap_kib = anon_kib = file_kib = 0
    large: list[str] = []
    region = name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not fields[0].endswith(":"):  # "start-end perms offset dev inode [name]"
            region, name = fields[0], (fields[5] if len(fields) > 5 else "")
        elif fields[0] == "Rss:":
            kib = int(fields[1])
            if name == "[heap]":
                heap_kib += kib
            elif name.startswith("/"):
                file_kib += kib
            else:  # unnamed, [anon:...], [stack]...
                anon_kib += kib
                if kib >= 2048:
                    low, high = (int(bound, 16) for bound in region.split("-"))
                    large.append(f"{(high - low) >> 20}:{kib >> 10}")
    return {"heap_mib": heap_kib >> 10, "anon_maps_mib": anon_kib >> 10,
            "large_anon_maps": large, "files_mib": file_kib >> 10}


def dump_of(pid: int, dump_dir: Path) -> dict[str, Any]:
    """Signal ``pid`` and wait for its dump (it writes when its main thread next runs)."""
    path = dump_dir / f"{pid}.json"
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists():
            try:
                return dict(json.loads(path.read_text()))
            except ValueError:  # caught mid-write
                pass
        time.sleep(0.05)
    return {"error": "no dump within 10 s"}


def report(label: str, jvm_pid: int, dump_dir: Path) -> None:
    workers = {pid: memory_mib(pid) for pid in descendants(jvm_pid)}
    pid, (rss, anon) = max(workers.items(), key=lambda item: item[1][1])
    print(f"== {label}: worker {pid}, RSS {rss:.0f} MiB, anonymous {anon:.0f} MiB")
    print(f"   smaps: {smaps_breakdown(pid)}")
    print(f"   inside: {dump_of(pid, dump_dir)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--codec", default="none",
                        choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--arrow-pool", choices=["mimalloc", "jemalloc", "system"])
    args = parser.parse_args()
    dump_dir = Path(tempfile.mkdtemp(prefix="kafka_ds-worker-memory-"))
    (dump_dir / "sitecustomize.py").write_text(
        f"DUMP_DIR = {str(dump_dir)!r}\n" + _SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(dump_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    if args.arrow_pool:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = args.arrow_pool
    with KafkaCluster(nodes=1) as cluster:
        topic = f"probe-memory-{uuid.uuid4().hex[:6]}"
        bench_fetcher._produce(cluster, topic, args.records, args.value_bytes, args.codec)
        spark = spark_session(app_name="probe_worker_memory",
                              conf=spark_settings.session_conf(False))
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        options = {"kafka.bootstrap.servers": cluster.bootstrap(), "subscribe": topic}
        rows = _every_column(spark.read.format("pykafka").options(**options).load())[0][-1]
        assert rows == args.records, rows
        report(f"after a batch read of {args.records} records of {args.value_bytes} B "
               f"({args.codec})",
               jvm_pid, dump_dir)
        query = (spark.readStream.format("pykafka").options(**options)
                 .option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger",
                         str(-(-args.records // args.micro_batches)))
                 .load().writeStream
                 .foreachBatch(lambda frame, _batch_id: _every_column(frame))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        report(f"after streaming them again in {args.micro_batches} micro-batches",
               jvm_pid, dump_dir)
    sys.exit(0)


if __name__ == "__main__":
    main()
