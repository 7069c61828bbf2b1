"""Fetcher throughput against a real broker, beside other clients on the same topic, same run.

Not a test: a script that starts a single-node Kafka (the harness), writes one topic per
(value size, codec) with the broker's Java ProducerPerformance tool, then reads each topic
whole with:

- kafka_ds: ``Fetcher.read_arrow`` into Spark-schema Arrow batches (records/s into Arrow), with
  the fetcher's defaults (``decode.threads`` included) unless ``--option`` sets one (e.g.
  ``--option receive.ahead=true``); each line prints our CPU time per record (all threads) and
  the ``decode.threads`` and ``receive.ahead`` in effect;
- confluent-kafka: a Python ``consume(num_messages=...)`` loop touching key, value, offset
  and timestamp of every message (librdkafka decodes in C; Python pays per message), with
  its fetch settings tuned (``CONFLUENT_TUNED``) and with its defaults: the ratio is taken
  against the faster of the two on each topic;
- kafka-python: its iterator loop, touching the same fields (capped: it is slow);
- the broker's Java ``ConsumerPerformance`` tool: the ceiling (its ``fetch.nMsg.sec``, which
  leaves out JVM start and the group join), with 4 MiB partition fetches and 10 k-record polls.

Each figure is the median of ``--runs`` reads, the clients taking turns within each round.
Then a memory check: peak RSS while reading a topic ten times larger than what the fetch bounds
let the fetcher buffer, sampled per batch, early in the read against the whole read (flat
means bounded).

    .venv/bin/python integration/benchmarks/bench_fetcher.py
    .venv/bin/python integration/benchmarks/bench_fetcher.py --values 100 --codecs none --runs 3
    .venv/bin/python integration/benchmarks/bench_fetcher.py --profile   # cProfile one read
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from functools import cache, partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from integration.harness.cluster import KafkaCluster
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.protocol.types import TopicPartition


def _rss_bytes() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process from /proc."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) * 1024
    return values["VmRSS"], values["VmHWM"]


def _payload_file(value_bytes: int, distinct: int = 20_000) -> Path:
    """``distinct`` JSON-like values of ``value_bytes`` on average, one per line, for the
    producer tool.

    Without a payload file ProducerPerformance sends one identical value in every record,
    which lz4/zstd shrink a hundredfold and which no real topic looks like: compressed
    topics would then measure decompression of nothing. The lengths vary (uniformly, from half
    to one and a half times ``value_bytes``), as real records' do: the decoder takes shortcuts
    when every record of a batch has the same size (one record walk per batch shape, values
    copied as fixed-width rows), and equal-length values would measure those shortcuts rather
    than what a real topic gets.
    """
    path = Path(tempfile.gettempdir()) / f"kafka_ds-bench-payload-{value_bytes}-varied.txt"
    if path.exists():
        return path
    rng = random.Random(value_bytes)
    words = ["user", "order", "click", "view", "cart", "pay", "ok", "eu-west", "us-east"]
    lines = []
    for index in range(distinct):
        length = rng.randint(value_bytes // 2, value_bytes * 3 // 2)
        head = (f'{{"id":{index},"event":"{words[index % 7]}","region":"{words[7 + index % 2]}",'
                f'"session":"{rng.getrandbits(64):016x}","data":"')
        filler = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=max(0, length)))
        lines.append((head + filler)[:max(length - 2, 0)] + '"}')
    path.write_text("\n".join(lines))
    return path


@cache
def payload_lines(value_bytes: int) -> list[bytes]:
    """The payload file's lines as values, read once per size (every client and run asks
    again). The file ends without a newline, so no line is empty."""
    return _payload_file(value_bytes).read_bytes().split(b"\n")


def _produce(cluster: KafkaCluster, topic: str, records: int, value_bytes: int,
             codec: str) -> None:
    cluster.create_topic(topic, 1)
    cluster.run_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(records), "--payload-file", str(_payload_file(value_bytes)),
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={cluster.bootstrap()}", "acks=1",
        f"compression.type={codec}", "linger.ms=20", "batch.size=131072",
        timeout_s=900, heap_mb=512)


_LAST_SPLIT: dict[str, float] = {}
_PEERS = ("confluent", "confluent_defaults", "kafka_python", "java")


def _ours(cluster: KafkaCluster, topic: str, records: int, options: dict[str, str]) -> float:
    props = {"bootstrap.servers": cluster.bootstrap(), **options}
    with Fetcher.from_properties(props) as fetcher:
        cpu_before = time.process_time()  # every thread, as bench_producer
        started = time.perf_counter()
        rows = 0
        for batch in fetcher.read_arrow([(topic, 0, 0, records)]):
            rows += batch.num_rows
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
    assert rows == records, (rows, records)
    metrics = fetcher.metrics
    # Where the time went: blocked on the network vs decoding (the rest: the fetch loop).
    _LAST_SPLIT.update(wait=metrics.fetch_wait_ns / 1e9 / elapsed,
                       decode=metrics.decode_ns / 1e9 / elapsed,
                       requests=metrics.fetch_requests,
                       cpu_ns_per_record=cpu / records * 1e9,
                       decode_threads=fetcher.config.decode_threads,
                       receive_ahead=fetcher.config.receive_ahead)
    return records / elapsed


# librdkafka's defaults read 100-byte records from a local broker at ~0.15 M rec/s here (1 MiB
# per partition fetch, small prefetch queue); these settings triple that. Once its prefetch
# queue is full (64 MiB: 200 MB of 1 KB records fill it), librdkafka postpones the partition's
# next fetch by fetch.queue.backoff.ms, 1 s by default: a 1 s stall in about half the runs at
# 1 KB, which the caller then waits out. Tuned, it fetches again after 10 ms. For 1 KB records
# its defaults can be the faster: both are measured.
CONFLUENT_TUNED = {"fetch.message.max.bytes": 4 * 1024 * 1024, "queued.min.messages": 1_000_000,
                   "fetch.queue.backoff.ms": 10}


def _confluent(cluster: KafkaCluster, topic: str, records: int, tuned: bool = True) -> float:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTp

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, **(CONFLUENT_TUNED if tuned else {})})
    consumer.assign([CTp(topic, 0, 0)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        # Never ask for more than is left: consume() waits its whole timeout for a batch it
        # cannot fill, so asking past the end of the topic would time its last second of
        # waiting as reading (a 1 s stall in about half the runs at 200k records).
        for message in consumer.consume(num_messages=min(10_000, records - seen), timeout=1.0):
            if message.error():
                continue
            _touch = (message.key(), message.value(), message.offset(), message.timestamp())
            seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen / elapsed


def _kafka_python(cluster: KafkaCluster, topic: str, records: int) -> float:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTp

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=10_000)
    consumer.assign([KTp(topic, 0)])
    consumer.seek(KTp(topic, 0), 0)
    seen = 0
    started = time.perf_counter()
    for message in consumer:
        _touch = (message.key, message.value, message.offset, message.timestamp)
        seen += 1
        if seen >= records:
            break
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen / elapsed


def _java(cluster: KafkaCluster, topic: str, records: int) -> float:
    # Tuned like our defaults (4 MiB per partition fetch) and with large polls: the ceiling.
    out = cluster.run_tool(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", cluster.bootstrap(),
        "--topic", topic, "--num-records", str(records), "--timeout", "30000",
        "--fetch-size", str(4 * 1024 * 1024),
        "--command-property", "auto.offset.reset=earliest",
        "--command-property", "max.poll.records=10000", timeout_s=600, heap_mb=1024).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    return float(dict(zip(header, values, strict=True))["fetch.nMsg.sec"])


def _memory_check(cluster: KafkaCluster, args: argparse.Namespace) -> dict[str, Any]:
    """Read a topic >= 10x what the fetch bounds allow to buffer; RSS early vs overall.

    The read runs in a fresh process, so the RSS is the fetcher's and nothing else's.
    """
    # Buffered at most: one response being decoded + one in flight (2 x fetch.max.bytes) and
    # one Arrow batch of up to 8192 x ~1 KB being handed out.
    buffered_bound = 2 * _MEMORY_FETCH_BYTES + 8192 * 1100
    records = max(args.memory_records, 10 * buffered_bound // 1000 + 1)
    topic = f"bench-memory-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, records, 1000, "none")
    child = subprocess.run(
        [sys.executable, __file__, "--memory-child", cluster.bootstrap(), topic, str(records)],
        check=True, stdout=subprocess.PIPE, text=True)
    result = json.loads(child.stdout.strip().splitlines()[-1])
    return {"topic_bytes": records * 1000, "buffered_bound_bytes": buffered_bound, **result}


_MEMORY_FETCH_BYTES = 4 * 1024 * 1024


def _memory_child(bootstrap: str, topic: str, records: int) -> None:
    options = {"fetch.max.bytes": str(_MEMORY_FETCH_BYTES),
               "max.partition.fetch.bytes": str(_MEMORY_FETCH_BYTES), "arrow.batch.rows": "8192"}
    samples: list[int] = []
    rows = 0
    with Fetcher.from_properties({"bootstrap.servers": bootstrap, **options}) as fetcher:
        list(fetcher.read_arrow([(topic, 0, 0, min(records, 1000))]))  # imports, connections
        gc.collect()
        rss_before = _rss_bytes()[0]
        for batch in fetcher.read_arrow([(topic, 0, 0, records)]):
            rows += batch.num_rows
            samples.append(_rss_bytes()[0])
            del batch
    assert rows == records
    tenth = max(1, len(samples) // 10)
    print(json.dumps({"records": records, "rss_before_read_mb": rss_before / 2**20,
                      "rss_peak_first_10pct_mb": max(samples[:tenth]) / 2**20,
                      "rss_peak_whole_read_mb": max(samples) / 2**20,
                      "rss_last_mb": samples[-1] / 2**20, "vm_hwm_mb": _rss_bytes()[1] / 2**20}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--codecs", nargs="+", default=["none", "lz4", "zstd"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=300_000_000,
                        help="approximate topic size per (value size, codec)")
    parser.add_argument("--kafka-python-records", type=int, default=200_000)
    parser.add_argument("--memory-records", type=int, default=300_000)
    parser.add_argument("--max-partition-fetch-bytes", default=None,
                        help="override our max.partition.fetch.bytes (default: the fetcher's)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a fetcher property for kafka_ds, e.g. decode.threads=1")
    parser.add_argument("--skip-others", action="store_true", help="only kafka_ds")
    parser.add_argument("--peers", nargs="+", default=list(_PEERS), choices=list(_PEERS),
                        help="which other readers to run (default: all)")
    parser.add_argument("--skip-memory", action="store_true", help="no memory check")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default=".bench-results/fetcher.json")
    parser.add_argument("--memory-child", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "RECORDS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        bootstrap, topic, records = args.memory_child
        _memory_child(bootstrap, topic, int(records))
        return
    options = dict(item.split("=", 1) for item in args.option)
    if args.max_partition_fetch_bytes:
        options["max.partition.fetch.bytes"] = args.max_partition_fetch_bytes
    results: list[dict[str, Any]] = []
    with KafkaCluster(nodes=1, heap_mb=1024) as cluster:
        for value_bytes in args.values:
            records = args.bytes // value_bytes
            for codec in args.codecs:
                topic = f"bench-{value_bytes}-{codec}-{uuid.uuid4().hex[:6]}"
                _produce(cluster, topic, records, value_bytes, codec)
                tp = TopicPartition(topic, 0)
                with Fetcher.from_properties({"bootstrap.servers": cluster.bootstrap()}) as f:
                    assert latest_offsets(f.cluster, [tp])[tp] == records
                if args.profile:
                    profile = cProfile.Profile()
                    profile.runcall(_ours, cluster, topic, records, options)
                    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
                row: dict[str, Any] = {"value_bytes": value_bytes, "codec": codec,
                                       "records": records}
                _ours(cluster, topic, min(records, 200_000), options)  # warm up
                capped = min(records, args.kafka_python_records)
                readers = {"kafka_ds": partial(_ours, cluster, topic, records, options)}
                if not args.skip_others:
                    peers = {
                        "confluent": partial(_confluent, cluster, topic, records),
                        "confluent_defaults": partial(_confluent, cluster, topic, records, False),
                        "kafka_python": partial(_kafka_python, cluster, topic, capped),
                        "java": partial(_java, cluster, topic, records),
                    }
                    readers.update({name: peers[name] for name in args.peers})
                # Rounds interleave the clients, so that a burst of load elsewhere on the
                # machine hits them alike rather than one of them.
                rates: dict[str, list[float]] = {name: [] for name in readers}
                splits = []
                for _ in range(args.runs):
                    for name, read in readers.items():
                        rates[name].append(read())
                        if name == "kafka_ds":
                            splits.append(dict(_LAST_SPLIT))
                for name, values in rates.items():
                    row[name] = statistics.median(values)
                row["kafka_ds_split"] = splits[rates["kafka_ds"].index(
                    sorted(rates["kafka_ds"])[len(splits) // 2])]
                if "confluent" in row or "confluent_defaults" in row:
                    # Against whichever confluent setting was faster on this topic.
                    row["x_confluent"] = row["kafka_ds"] / max(row.get("confluent", 0),
                                                                 row.get("confluent_defaults", 0))
                if "kafka_python" in row:
                    row["x_kafka_python"] = row["kafka_ds"] / row["kafka_python"]
                if "java" in row:
                    row["x_java"] = row["kafka_ds"] / row["java"]
                results.append(row)
                print(_format(row), flush=True)
        memory = {} if args.skip_memory else _memory_check(cluster, args)
    print("memory:", json.dumps(memory, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"throughput": results, "memory": memory}, indent=1))


def _format(row: dict[str, Any]) -> str:
    split = row["kafka_ds_split"]
    text = (f"{row['value_bytes']:>5} B {row['codec']:<5} kafka_ds {row['kafka_ds'] / 1e6:6.2f} "
            f"M rec/s ({row['kafka_ds'] * row['value_bytes'] / 1e6:7.1f} MB/s;"
            f" wait {split['wait']:.0%} decode {split['decode']:.0%};"
            f" {split['cpu_ns_per_record']:.0f} ns CPU/rec;"
            f" decode.threads={split['decode_threads']}"
            f" receive.ahead={str(split.get('receive_ahead', False)).lower()})")
    if "x_confluent" in row:
        text += (f" | confluent {row.get('confluent', 0) / 1e6:5.2f} tuned /"
                 f" {row.get('confluent_defaults', 0) / 1e6:4.2f} defaults M/s"
                 f" ({row['x_confluent']:.2f}x the better)")
    if "x_kafka_python" in row:
        text += (f" | kafka-python {row['kafka_python'] / 1e6:5.3f} M/s "
                 f"({row['x_kafka_python']:.1f}x)")
    if "x_java" in row:
        text += f" | java {row['java'] / 1e6:5.2f} M/s ({row['x_java']:.2f}x)"
    return text

if __name__ == "__main__":
    main()
