"""Spark source throughput: ``format("pykafka")`` beside the JVM connector, same broker, one run.

Not a test: a script (``make bench-spark-source``) that starts a single-node Kafka, writes one
topic per (value size, codec) with the broker's ProducerPerformance tool (4 partitions,
distinct JSON-like values, no keys), starts one local[2] SparkSession with the JVM connector on
its classpath, and for each topic measures, alternating the two formats within each round:

- batch read: ``spark.read...load()`` aggregated over every column (lengths of key, value and
  topic, sums of partition, offset and timestampType, max timestamp), so every value is
  materialised; a ``count()`` would let Spark skip the columns;
- streaming read: ``Trigger.AvailableNow`` over the whole topic in 4 micro-batches
  (``maxOffsetsPerTrigger``), each aggregated the same way in ``foreachBatch``. Two figures:
  ``stream`` from ``start()`` to the end of the query (a Python source pays Spark's start-up of
  its planner process, about 2 s here, which the JVM connector does not), and
  ``stream-in-triggers`` over the sum of the micro-batches' ``triggerExecution``;
- per-micro-batch overhead: a stream over a 1-partition topic fed at a steady small rate
  (``--rate`` records/s), default trigger (back to back); the median ``triggerExecution`` of
  batches that read something, and where it goes (latestOffset, queryPlanning, addBatch,
  walCommit + commitOffsets).

Figures are medians of ``--runs`` rounds, records per second; ratios are ours / JVM.

    .venv/bin/python integration/benchmarks/bench_spark_source.py
    .venv/bin/python integration/benchmarks/bench_spark_source.py --values 100 --codecs none
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from integration.benchmarks.bench_fetcher import _payload_file
from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars
from integration.harness.spark import spark_session

FORMATS = ("pykafka", "kafka")
PARTITIONS = 4


def _produce(cluster: KafkaCluster, topic: str, records: int, value_bytes: int,
             codec: str) -> None:
    cluster.create_topic(topic, PARTITIONS)
    cluster.run_tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
        "--num-records", str(records), "--payload-file", str(_payload_file(value_bytes)),
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={cluster.bootstrap()}", "acks=1",
        f"compression.type={codec}", "linger.ms=20", "batch.size=131072",
        timeout_s=900, heap_mb=512)


def _every_column(df: Any) -> list[Any]:
    from pyspark.sql import functions as F

    return df.agg(F.sum(F.length("key")), F.sum(F.length("value")), F.sum(F.length("topic")),
                  F.sum("partition"), F.sum("offset"), F.max("timestamp"),
                  F.sum("timestampType"), F.count(F.lit(1))).collect()


def _batch(spark: Any, fmt: str, bootstrap: str, topic: str, records: int) -> float:
    started = time.perf_counter()
    df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    rows = _every_column(df)[0][-1]
    elapsed = time.perf_counter() - started
    assert rows == records, (fmt, rows, records)
    return records / elapsed


def _stream(spark: Any, fmt: str, bootstrap: str, topic: str,
            records: int) -> tuple[float, float]:
    """(records/s from query start to its end, records/s within the triggers)."""
    seen = []

    def each_batch(df: Any, _batch_id: int) -> None:
        seen.append(_every_column(df)[0][-1])

    started = time.perf_counter()
    query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(records // 4 + PARTITIONS)).load()
             .writeStream.foreachBatch(each_batch).trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    assert query.exception() is None, query.exception()
    assert sum(seen) == records, (fmt, seen, records)
    in_triggers_s = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress
                        if p["numInputRows"]) / 1000
    return records / elapsed, records / in_triggers_s


def _overhead(spark: Any, cluster: KafkaCluster, fmt: str, batches: int,
              rate: int) -> dict[str, float]:
    """Median per-batch durations (ms) of a stream fed ``rate`` records/s."""
    from confluent_kafka import Producer

    topic = f"bench-overhead-{fmt}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1)
    stop = threading.Event()

    def feed() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 0})
        index = 0
        while not stop.is_set():
            producer.produce(topic, value=b"%099d" % index)
            index += 1
            producer.poll(0)
            stop.wait(1 / rate)
        producer.flush(10)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", cluster.bootstrap())
             .option("subscribe", topic).load()
             .writeStream.format("noop").start())
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = [p for p in query.recentProgress if p["numInputRows"]]
            if len(done) >= batches + 3:
                break
            time.sleep(0.5)
    finally:
        query.stop()
        stop.set()
        feeder.join(10)
    progress = [p for p in query.recentProgress if p["numInputRows"]][3:]  # warmed up

    def median(key: str) -> float:
        return statistics.median(p["durationMs"].get(key, 0) for p in progress)

    return {
        "batches": len(progress),
        "rows_per_batch": statistics.median(p["numInputRows"] for p in progress),
        "trigger_ms": median("triggerExecution"),
        "latest_offset_ms": median("latestOffset"),
        "planning_ms": median("queryPlanning"),
        "add_batch_ms": median("addBatch"),
        "logs_ms": statistics.median(p["durationMs"].get("walCommit", 0)
                                     + p["durationMs"].get("commitOffsets", 0)
                                     for p in progress),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", default="100,1000", help="value sizes in bytes")
    parser.add_argument("--codecs", default="none,lz4")
    parser.add_argument("--records-100", type=int, default=2_000_000,
                        help="records per topic for values under 500 bytes")
    parser.add_argument("--records-1k", type=int, default=600_000,
                        help="records per topic for values of 500 bytes or more")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--overhead-batches", type=int, default=20)
    parser.add_argument("--rate", type=int, default=200, help="records/s for the overhead run")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    sizes = [int(v) for v in args.values.split(",")]
    codecs = args.codecs.split(",")
    results: dict[str, Any] = {"throughput": [], "overhead": {}}
    with KafkaCluster(nodes=1) as cluster:
        topics = {}
        for size in sizes:
            for codec in codecs:
                records = args.records_100 if size < 500 else args.records_1k
                topic = f"bench-src-{size}-{codec}-{uuid.uuid4().hex[:6]}"
                print(f"writing {records} x {size} B ({codec}) to {topic}", flush=True)
                _produce(cluster, topic, records, size, codec)
                topics[(size, codec)] = (topic, records)
        spark = spark_session(fetch_spark_kafka_jars(), app_name="bench_spark_source")
        bootstrap = cluster.bootstrap()
        # Warm both formats up once (JVM classes, Python workers) before measuring.
        warm_topic, warm_records = next(iter(topics.values()))
        for fmt in FORMATS:
            _batch(spark, fmt, bootstrap, warm_topic, warm_records)
        for (size, codec), (topic, records) in topics.items():
            modes = ("batch", "stream", "stream-in-triggers")
            runs: dict[str, dict[str, list[float]]] = {
                mode: {fmt: [] for fmt in FORMATS} for mode in modes}
            for _ in range(args.runs):
                for fmt in FORMATS:
                    runs["batch"][fmt].append(_batch(spark, fmt, bootstrap, topic, records))
                for fmt in FORMATS:
                    whole, in_triggers = _stream(spark, fmt, bootstrap, topic, records)
                    runs["stream"][fmt].append(whole)
                    runs["stream-in-triggers"][fmt].append(in_triggers)
            for mode, by_format in runs.items():
                ours = statistics.median(by_format["pykafka"])
                jvm = statistics.median(by_format["kafka"])
                row = {"mode": mode, "value_bytes": size, "codec": codec, "records": records,
                       "pykafka_rps": round(ours), "kafka_rps": round(jvm),
                       "ratio": round(ours / jvm, 2),
                       "runs": {fmt: [round(v) for v in by_format[fmt]] for fmt in FORMATS}}
                results["throughput"].append(row)
                print(f"{mode:18} {size:5} B {codec:5}  pykafka {ours / 1e6:6.3f} M/s  "
                      f"kafka {jvm / 1e6:6.3f} M/s  ratio {ours / jvm:5.2f}", flush=True)
        if not args.skip_overhead:
            for fmt in FORMATS:
                figures = _overhead(spark, cluster, fmt, args.overhead_batches, args.rate)
                results["overhead"][fmt] = figures
                print(f"overhead {fmt:8} " + "  ".join(f"{k} {v}" for k, v in figures.items()),
                      flush=True)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
