"""Soak: the whole pipeline at a steady rate for a long while, sampled every interval.

    python -m integration.soak --minutes 30 --rate 500 --interval-s 60 [--csv soak.csv] \
        [--plot soak.png]

(``make soak`` runs the 30-minute default.) Starts a one-node Kafka, a producer thread
writing ``rate`` rows a second to the input topic, and ``pipeline_app`` (pykafka ->
upper(value) -> exactly-once pykafka) with a processing-time trigger. Every interval it
records, for the driver JVM and the Python processes under it: resident memory (MiB), open
sockets, and the lag (input end offsets minus the offsets of the last committed batch in
the checkpoint). When the time is up the query stops, a Trigger.AvailableNow run drains the
rest, and the output is counted at read_committed: every produced row exactly once.

The figures go to stdout (and ``--csv``, plotted by ``--plot``); the verdict line compares the
last third of the run with the first sample after warm-up: memory growth, the highest lag, and
socket counts.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from integration.harness.cluster import KafkaCluster
from integration.harness.procfs import cmdline, descendants, rss_mib
from integration.pipeline_run import PipelineRun
from kafka_ds.client.producer import Producer


def _sockets(pid: int) -> int:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return 0
    count = 0
    for fd in fds:
        try:
            count += str(fd.readlink()).startswith("socket:")
        except OSError:
            continue
    return count


def _is_jvm(pid: int) -> bool:
    return "java" in cmdline(pid).split(" ", 1)[0]


def _committed_offsets(checkpoint: Path) -> int:
    """Sum of the source end offsets of the last batch in the checkpoint's commit log."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] \
        if (checkpoint / "commits").is_dir() else []
    if not commits:
        return 0
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    offsets = json.loads(lines[-1])
    return sum(int(v) for partitions in offsets.values() for v in partitions.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=500, help="rows per second")
    parser.add_argument("--interval-s", type=float, default=60)
    parser.add_argument("--trigger-s", type=int, default=5)
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--plot", type=Path, help="PNG of memory, lag and sockets over time")
    parser.add_argument("--from-csv", type=Path,
                        help="no run: plot and judge the samples of an earlier --csv within "
                             "its first --minutes")
    args = parser.parse_args(argv)
    if args.from_csv:
        with args.from_csv.open() as file:
            samples = [{key: float(value) for key, value in row.items()}
                       for row in csv.DictReader(file)]
        samples = [s for s in samples if s["minute"] <= args.minutes]
        if args.plot:
            plot(samples, args.plot)
        _verdict(samples)
        return 0
    work = Path(tempfile.mkdtemp(prefix="kafka_ds-soak-"))
    with KafkaCluster(nodes=1) as kafka:
        pipe = PipelineRun(kafka, work, "soak", rows=0, batch_rows=args.rate * args.trigger_s * 4)
        produced = 0
        stop = threading.Event()

        def produce() -> None:
            nonlocal produced
            with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "20"}) as out:
                started = time.monotonic()
                while not stop.is_set():
                    due = int((time.monotonic() - started) * args.rate)
                    for i in range(produced, due):
                        out.send(pipe.input_topic, f"row-{i}".encode(),
                                 key=f"k{i % 101}".encode(), partition=i % 2)
                    produced = max(produced, due)
                    out.flush()
                    time.sleep(0.1)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        run_seconds = args.minutes * 60
        running = pipe.start(trigger_seconds=args.trigger_s, run_seconds=run_seconds)
        driver = running[0].pid
        samples = []
        started = time.monotonic()
        # Sample only while the query is meant to run: once the time is up it stops and
        # tears down, and samples of a process exiting would read as memory freed or sockets
        # closed.
        while running[0].poll() is None:
            left_s = run_seconds - (time.monotonic() - started)
            if left_s < 1:
                break
            time.sleep(min(args.interval_s, left_s))
            if running[0].poll() is not None:
                break
            pids = [driver, *descendants(driver)]
            jvm = [p for p in pids if _is_jvm(p)]
            python = [p for p in pids if p not in jvm]
            end = sum(kafka_end_offsets(kafka, pipe.input_topic))
            sample = {"minute": round((time.monotonic() - started) / 60, 2),
                      "jvm_rss_mib": round(sum(map(rss_mib, jvm))),
                      "python_rss_mib": round(sum(map(rss_mib, python))),
                      "python_processes": len(python),
                      "sockets": sum(map(_sockets, pids)),
                      "produced": produced, "lag": end - _committed_offsets(work / "checkpoint")}
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        stop.set()
        producer.join()
        result = pipe.finish(running)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        pipe.rows = produced  # drain what the last trigger left, then count
        pipe.run_until_done()
        total = pipe.assert_exactly_once()
        print(f"exactly once: {total} rows produced and read back once each")
    if args.csv and samples:
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(samples[0]))
            writer.writeheader()
            writer.writerows(samples)
    if args.plot and samples:
        plot(samples, args.plot)
    _verdict(samples)
    return 0


def kafka_end_offsets(kafka: KafkaCluster, topic: str) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap(), "group.id": "soak-lag"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(2)]
    finally:
        consumer.close()


def plot(samples: list[dict[str, float]], path: Path) -> None:
    """Three panels sharing the time axis: resident memory, lag, open sockets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["minute"] for s in samples]
    figure, (memory, lag, sockets) = plt.subplots(3, 1, sharex=True, figsize=(7, 7))
    memory.plot(minutes, [s["jvm_rss_mib"] for s in samples], marker="o", label="driver JVM")
    memory.plot(minutes, [s["python_rss_mib"] for s in samples], marker="o",
                label="Python processes (sum)")
    memory.set_ylabel("RSS (MiB)")
    memory.set_ylim(bottom=0)
    memory.legend()
    lag.plot(minutes, [s["lag"] for s in samples], marker="o", color="tab:red")
    lag.set_ylabel("lag (rows)")
    lag.set_ylim(bottom=0)
    sockets.plot(minutes, [s["sockets"] for s in samples], marker="o", color="tab:green")
    sockets.set_ylabel("open sockets")
    sockets.set_ylim(bottom=0)
    sockets.set_xlabel("minutes")
    figure.suptitle("Soak: pykafka -> upper(value) -> exactly-once pykafka")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _verdict(samples: list[dict[str, float]]) -> None:
    if len(samples) < 3:
        print("too few samples for a verdict")
        return
    warm, tail = samples[1], samples[len(samples) * 2 // 3:]
    print(f"verdict: JVM RSS {warm['jvm_rss_mib']} -> {tail[-1]['jvm_rss_mib']} MiB, Python "
          f"RSS {warm['python_rss_mib']} -> {tail[-1]['python_rss_mib']} MiB, max lag "
          f"{max(s['lag'] for s in samples)} rows, sockets "
          f"{sorted({s['sockets'] for s in samples[1:]})}")


if __name__ == "__main__":
    sys.exit(main())
