"""What a producer's batches cost the broker: CPU per record and G1 garbage collections.

A script, not a test::

    python -m integration.benchmarks.bench_broker_cost [--records 300000] [--rounds 3]
        [--codec none] [--configs ours:524288:4194304 ours:131072:1048576 java:16384]
        [--no-txn]

It starts a one-node harness broker (heap 512 MB, G1: 1 MiB regions, so any object of 512 KiB
or more is "humongous"), turns on the broker's GC log (``jcmd VM.log``), and writes
``--records`` values of 1 KiB on average (``bench_values``) to a fresh topic of 4 partitions
per run, with each configuration in turn (alternating order, after one warm-up round):

- ``ours:<batch.size>:<max.request.size>``: ``Producer.send_arrow`` in 10,000-record calls, as
  the Spark sink sends (transactional unless ``--no-txn``, one transaction per run);
- ``java:<batch.size>``: the broker's ``ProducerPerformance`` tool (linger.ms 5, acks all),
  the Java producer Spark's JVM sink uses.

Per configuration it prints the medians of: the broker's CPU per record (its /proc times over
the run and one second after, less its idle rate measured just before), our process's CPU per
record (``ours``: every thread, the sender's included), records per batch and batches per
request, and the GC pauses in the run, with how many of them a humongous allocation started.
The broker reads each Produce request into one buffer of the request's size: requests of half
a region or more are humongous, and each starts a concurrent mark cycle once the heap is past
its occupancy threshold.

2026-11-24 (2-core VM, shared; medians of 3 rounds, 300 k records, none, transactional): the
sink's 512 KiB batches in requests of ~1.9 MB start 9-18 humongous-allocation pauses per run
where 128 KiB batches (requests under 512 KiB) start none, yet the broker's CPU per record
moved within its run-to-run spread (512 KiB: 2.3-5.9 us, 128 KiB: 2.3-3.4 us, Java's 16 KiB
batches: 6.1-6.9 us), while ours rose by 0.4-0.6 us per record at 128 KiB (more batches to
encode and track). The sink's defaults stay: see sink_options.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from integration.benchmarks.bench_fetcher import _payload_file
from integration.benchmarks.bench_producer import bench_values
from integration.harness.cluster import KafkaCluster, java_executable
from integration.harness.procfs import cpu_s_of

PARTITIONS = 4
SEND_RECORDS = 10_000  # rows per send_arrow call: Spark's Arrow batch size
_TAIL_S = 1.0  # the broker's own work after the last acknowledgement (flushes, markers)


def _ours(bootstrap: str, topic: str, values: Any, codec: str, batch_bytes: int,
          request_bytes: int, txn: bool) -> dict[str, float]:
    from kafka_ds.client.producer import Producer

    props = {"bootstrap.servers": bootstrap, "compression.type": codec, "acks": "all",
             "batch.size": str(batch_bytes), "max.request.size": str(request_bytes),
             "buffer.memory": str(64 << 20)}
    if txn:
        props["transactional.id"] = f"bench-cost-{uuid.uuid4().hex}"
    producer = Producer(props)
    try:
        if txn:
            producer.init_transactions()
            producer.begin_transaction()
        producer.send(topic, b"warm-up").result(30)  # metadata and connection outside the run
        metrics = producer._sender.metrics
        records, batches, requests = (metrics.records_sent, metrics.batches_sent,
                                      metrics.requests)
        started = time.process_time()
        for offset in range(0, len(values), SEND_RECORDS):
            producer.send_arrow(topic, values.slice(offset, SEND_RECORDS),
                                timestamps_ms=time.time_ns() // 1_000_000)
        if txn:
            producer.commit_transaction()
        else:
            producer.flush()
        cpu_s = time.process_time() - started
        sent_batches = max(metrics.batches_sent - batches, 1)
        return {"client_us": cpu_s / len(values) * 1e6,
                "records/batch": (metrics.records_sent - records) / sent_batches,
                "batches/request": sent_batches / max(metrics.requests - requests, 1)}
    finally:
        producer.close()


def _java(cluster: KafkaCluster, topic: str, records: int, codec: str, batch_bytes: int,
          txn: bool) -> dict[str, float]:
    props = [f"bootstrap.servers={cluster.bootstrap()}", "acks=all", "linger.ms=5",
             f"compression.type={codec}", f"batch.size={batch_bytes}"]
    extra = []
    if txn:
        props.append(f"transactional.id=bench-cost-{uuid.uuid4().hex}")
        extra = ["--transaction-duration-ms", "1000000"]  # one transaction, as ours
    cluster.run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                     "--num-records", str(records), "--payload-file",
                     str(_payload_file(1024)), "--throughput", "-1", *extra,
                     "--producer-props", *props, timeout_s=900, heap_mb=512)
    return {}


def _gc_counts(log: Path, since: int) -> dict[str, float]:
    text = log.read_bytes()[since:].decode(errors="replace") if log.exists() else ""
    pauses = [line for line in text.splitlines() if " Pause " in line]
    return {"gc_pauses": len(pauses),
            "humongous_pauses": sum("Humongous Allocation" in line for line in pauses)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--codec", default="none")
    parser.add_argument("--configs", nargs="+",
                        default=["ours:524288:4194304", "ours:131072:1048576", "java:16384"])
    parser.add_argument("--no-txn", action="store_true")
    args = parser.parse_args()
    txn = not args.no_txn

    import pyarrow as pa

    values = pa.array(bench_values(1024, args.records), pa.binary())
    with KafkaCluster(nodes=1) as cluster:
        pid = cluster.pid(cluster.node_ids[0])
        assert cluster.work_dir is not None
        gc_log = cluster.work_dir / "broker-gc.log"
        jcmd = str(Path(java_executable()).parent / "jcmd")
        subprocess.run([jcmd, str(pid), "VM.log", f"output={gc_log}", "what=gc=info",
                        "decorators=uptime"], check=True, capture_output=True, timeout=60)
        results: dict[str, list[dict[str, float]]] = {config: [] for config in args.configs}
        for round_ in range(-1, args.rounds):  # round -1 warms the broker's JIT up
            order = args.configs if round_ % 2 else args.configs[::-1]
            for config in order:
                kind, *sizes = config.split(":")
                topic = f"bench-cost-{uuid.uuid4().hex[:8]}"
                cluster.create_topic(topic, PARTITIONS)
                idle_start = cpu_s_of(pid)
                time.sleep(2.0)
                idle_cpu_per_s = (cpu_s_of(pid) - idle_start) / 2.0
                log_bytes = gc_log.stat().st_size if gc_log.exists() else 0
                cpu_start, wall_start = cpu_s_of(pid), time.perf_counter()
                if kind == "java":
                    stats = _java(cluster, topic, args.records, args.codec, int(sizes[0]), txn)
                else:
                    stats = _ours(cluster.bootstrap(), topic, values, args.codec,
                                  int(sizes[0]), int(sizes[1]), txn)
                wall_s = time.perf_counter() - wall_start
                time.sleep(_TAIL_S)
                broker_s = (cpu_s_of(pid) - cpu_start
                            - idle_cpu_per_s * (wall_s + _TAIL_S))
                stats = {"broker_us": broker_s / args.records * 1e6, **stats,
                         **_gc_counts(gc_log, log_bytes)}
                print(f"round {round_:>2} {config:<22} " + " ".join(
                    f"{key} {value:.2f}" for key, value in stats.items()), flush=True)
                if round_ >= 0:
                    results[config].append(stats)
        print(f"\nmedians over {args.rounds} rounds, {args.records} records of 1 KiB, "
              f"{args.codec}, {'transactional' if txn else 'idempotent'}:")
        for config, runs in results.items():
            print(f"  {config:<22} " + " ".join(
                f"{key} {statistics.median(run[key] for run in runs):.2f}" for key in runs[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
