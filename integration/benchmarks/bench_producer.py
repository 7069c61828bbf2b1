"""Producer throughput: kafka_ds beside confluent-kafka and kafka-python, same broker, same run.

A script, not a test::

    python -m integration.benchmarks.bench_producer [--bootstrap HOST:PORT] [--runs 3]
        [--records 200000] [--sizes 100 1024] [--codecs none lz4 zstd] [--only ours,confluent]
        [--keyed 10000] [--partitions 6]

Without ``--bootstrap`` it starts a one-node harness broker. Each scenario (value size x codec
x mode) runs every client ``--runs`` times, alternating clients, and reports the median
records/s from the first ``send`` to the end of ``flush`` (transactional: to the end of
``commit``). ``--stats`` adds, per client, the records and wire bytes per batch, the
compression ratio and the Produce requests per second (librdkafka's statistics callback,
our sender's counters). Modes: ``idempotent`` (acks=all, idempotence on) and ``transactional`` (one
transaction per 50,000 records). Every client gets linger.ms=5 and batch.size=256 KiB, one
partition, unkeyed values of 100 B or 1 KiB on average (JSON-like text of varying length,
``bench_values``). ``--keyed N`` gives the records keys
(``user-<i % N>``: N distinct keys, each client partitions them with Java's murmur2, librdkafka
as ``partitioner=murmur2_random``), ``--partitions`` spreads them over more partitions.
``ours-bulk`` is ``Producer.send_many`` (one
call per 10,000 records, the path the Spark sink uses); ``ours`` is plain per-record
``send()``. Next to the rates it prints the CPU time of the benchmark process per record
(``time.process_time``, every thread: ours includes its sender thread, confluent-kafka its
librdkafka threads), which the load of a shared machine disturbs less than wall time, and the
CPU time of the calling thread alone from its first send to the end of its flush
(``time.thread_time``: ours is ``send()``, commits and flush without the sender thread,
confluent-kafka's ``produce()``, commits and flush, which serve its delivery reports, without
librdkafka's threads; the per-record cost the GIL serialises, and the figure to compare). After
each run the topic's end offset is checked: every record (and each commit marker) is there.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from integration.benchmarks import bench_fetcher

TXN_CHUNK = 50_000
COMMON = {"linger.ms": "5", "batch.size": str(256 * 1024)}
# CPU microseconds per record of the last _timed run (the client functions return only the
# rate: report_cases calls them too).
last_cpu_us_per_record = 0.0
# CPU microseconds per record of the calling thread (sends, commits, flush) in the last run.
last_caller_cpu_us_per_record = 0.0
# What the last run sent, per batch and per request (--stats): records/batch, wire
# bytes/batch, compression ratio, requests/s. None where the client does not tell.
last_stats: dict[str, float] = {}
STATS = False  # --stats: librdkafka's statistics callback costs it a little CPU


SendChunk = Callable[[list[bytes], list[bytes] | None], None]


def _timed(values: list[bytes], keys: list[bytes] | None, txn: bool, send_chunk: SendChunk,
           begin: Callable[[], None], commit: Callable[[], None],
           flush: Callable[[], None]) -> float:
    """records/s from the first send to the end of flush (of commit, when transactional)."""
    global last_cpu_us_per_record, last_caller_cpu_us_per_record
    chunk_size = TXN_CHUNK if txn else len(values)
    start = time.perf_counter()
    start_cpu = time.process_time()
    # The calling thread's whole share, commits and flush included: librdkafka hands its
    # delivery reports to the thread that polls, flushes or commits, so counting only the
    # send calls left a transactional confluent-kafka's out (its commits serve them).
    start_caller_cpu = time.thread_time()
    for chunk_start in range(0, len(values), chunk_size):
        if txn:
            begin()
        chunk_values = values[chunk_start:chunk_start + chunk_size]
        chunk_keys = None if keys is None else keys[chunk_start:chunk_start + chunk_size]
        send_chunk(chunk_values, chunk_keys)
        if txn:
            commit()
    flush()
    last_cpu_us_per_record = (time.process_time() - start_cpu) * 1e6 / len(values)
    last_caller_cpu_us_per_record = (time.thread_time() - start_caller_cpu) * 1e6 / len(values)
    return len(values) / (time.perf_counter() - start)


def bench_values(size: int, count: int) -> list[bytes]:
    """``count`` values of ``size`` bytes on average: bench_fetcher's JSON-like payload lines,
    in turn. Their lengths vary from half to one and a half times ``size`` and their text
    compresses as text does: values of one length would measure the encoder's shortcut for
    equal lengths, and one repeated letter would measure compressing nothing."""
    lines = bench_fetcher.payload_lines(size)
    return [lines[index % len(lines)] for index in range(count)]


def _verify(bootstrap: str, topic: str, keys: list[bytes] | None, records: int, txn: bool,
            partitions: int) -> None:
    """The topic ends where it must: the warm-up, every record and (transactional) one commit
    marker per partition of each transaction, the warm-up's included."""
    from confluent_kafka import Consumer, TopicPartition

    from kafka_ds.protocol.partitioner import partition_for_key

    markers = 0
    if txn:
        markers = 1  # the warm-up's transaction
        for start in range(0, records, TXN_CHUNK):
            markers += 1 if keys is None else len(
                {partition_for_key(key, partitions) for key in keys[start:start + TXN_CHUNK]})
    expected = 1 + records + markers
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-verify",
                         "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + 30  # the coordinator writes commit markers after EndTxn
    try:
        while True:
            end = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                      for p in range(partitions))
            if end >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        consumer.close()
    if end != expected:
        raise AssertionError(f"{topic} ends at offset {end}, expected {expected}: records lost "
                             "or written twice")


def _each(send: Callable[..., Any], topic: str) -> SendChunk:
    """A chunk sender calling ``send(topic, value[, key])`` per record (the per-record API)."""
    def send_chunk(chunk: list[bytes], keys: list[bytes] | None) -> None:
        if keys is None:
            for value in chunk:
                send(topic, value)
        else:
            for value, key in zip(chunk, keys, strict=True):
                send(topic, value, key)

    return send_chunk


def _our_producer(bootstrap: str, topic: str, codec: str, txn: bool) -> Any:
    from kafka_ds.client.producer import Producer

    props = {"bootstrap.servers": bootstrap, "compression.type": codec, "acks": "all", **COMMON}
    if txn:
        props["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    producer = Producer(props)
    if txn:
        producer.init_transactions()
        producer.begin_transaction()
    producer.send(topic, b"warm-up").result(30)
    if txn:
        producer.commit_transaction()
    return producer


def _our_stats(producer: Any, before: Any, seconds: float) -> dict[str, float]:
    """Per-batch figures of the timed part (the warm-up's batch subtracted)."""
    m = producer._sender.metrics
    batches = max(m.batches_sent - before[1], 1)
    return {"records/batch": (m.records_sent - before[0]) / batches,
            "bytes/batch": (m.batch_bytes - before[2]) / batches,
            "ratio": (m.compressed_bytes - before[3]) / max(m.uncompressed_bytes - before[4], 1),
            "requests/s": (m.requests - before[5]) / seconds}


def _our_counters(producer: Any) -> tuple[int, ...]:
    m = producer._sender.metrics
    return (m.records_sent, m.batches_sent, m.batch_bytes, m.compressed_bytes,
            m.uncompressed_bytes, m.requests)


def _ours(bootstrap: str, topic: str, values: list[bytes], keys: list[bytes] | None, codec: str,
          txn: bool) -> float:
    global last_stats
    producer = _our_producer(bootstrap, topic, codec, txn)
    before = _our_counters(producer)
    rate = _timed(values, keys, txn, _each(producer.send, topic), producer.begin_transaction,
                  producer.commit_transaction, producer.flush)
    last_stats = _our_stats(producer, before, len(values) / rate)
    producer.close()
    return rate


def _ours_bulk(bootstrap: str, topic: str, values: list[bytes], keys: list[bytes] | None,
               codec: str, txn: bool) -> float:
    global last_stats
    producer = _our_producer(bootstrap, topic, codec, txn)
    before = _our_counters(producer)
    step = 10_000  # one call per 10 k records, as the Spark sink hands over Arrow batches

    def send_chunk(chunk: list[bytes], keys: list[bytes] | None) -> None:
        for offset in range(0, len(chunk), step):
            producer.send_many(topic, chunk[offset:offset + step],
                               None if keys is None else keys[offset:offset + step])

    rate = _timed(values, keys, txn, send_chunk, producer.begin_transaction,
                  producer.commit_transaction, producer.flush)
    last_stats = _our_stats(producer, before, len(values) / rate)
    producer.close()
    return rate


class _RdkafkaStats:
    """Sums librdkafka's statistics windows (``stats_cb``) for the topic under test."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.batch_records = [0, 0]  # sum, count of batchcnt samples
        self.batch_bytes = [0, 0]
        self.produce_requests: list[int] = []  # cumulative Produce requests, per window
        self.counting = False

    def __call__(self, stats_json: str) -> None:
        import json

        stats = json.loads(stats_json)
        if not self.counting:
            return
        self.produce_requests.append(sum(broker.get("req", {}).get("Produce", 0)
                                         for broker in stats.get("brokers", {}).values()))
        topic = stats.get("topics", {}).get(self.topic)
        if topic is not None:
            for field, into in (("batchcnt", self.batch_records), ("batchsize", self.batch_bytes)):
                into[0] += topic[field]["sum"]
                into[1] += topic[field]["cnt"]

    def result(self, seconds: float) -> dict[str, float]:
        requests = self.produce_requests[-1] - self.produce_requests[0] \
            if self.produce_requests else 0
        return {"records/batch": self.batch_records[0] / max(self.batch_records[1], 1),
                "bytes/batch": self.batch_bytes[0] / max(self.batch_bytes[1], 1),
                "ratio": float("nan"), "requests/s": requests / seconds}


def _confluent(bootstrap: str, topic: str, values: list[bytes], keys: list[bytes] | None,
               codec: str, txn: bool) -> float:
    from confluent_kafka import Producer

    global last_stats
    props: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "compression.type": codec, "acks": "all",
        "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000, **COMMON}
    if keys is not None:
        props["partitioner"] = "murmur2_random"  # Java's, as ours
    if txn:
        props["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    stats = _RdkafkaStats(topic)
    if STATS:
        props["statistics.interval.ms"] = 50
        props["stats_cb"] = stats
    producer = Producer(props)
    if txn:
        producer.init_transactions(30)
        producer.begin_transaction()
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    if txn:
        producer.commit_transaction(30)
    produce, poll = producer.produce, producer.poll

    def send_chunk(chunk: list[bytes], keys: list[bytes] | None) -> None:
        for value, key in zip(chunk, keys or itertools.repeat(None), strict=False):
            try:
                produce(topic, value, key)
            except BufferError:  # librdkafka's queue is full: let it drain
                poll(0.005)
                produce(topic, value, key)

    if STATS:
        stats.counting = True
        producer.poll(0.06)  # a window that starts the request count
    def flush() -> None:
        producer.flush(120)  # returns how many records are left: none, once delivered

    rate = _timed(values, keys, txn, send_chunk, producer.begin_transaction,
                  lambda: producer.commit_transaction(60), flush)
    if STATS:
        time.sleep(0.12)  # one more statistics window, then hand it over
        producer.poll(0)
        last_stats = stats.result(len(values) / rate)
    return rate


def _kafka_python(bootstrap: str, topic: str, values: list[bytes], keys: list[bytes] | None,
                  codec: str, txn: bool) -> float:
    from kafka import KafkaProducer

    kwargs = {"bootstrap_servers": bootstrap, "acks": "all", "enable_idempotence": True,
              "compression_type": None if codec == "none" else codec, "linger_ms": 5,
              "batch_size": 256 * 1024}
    if txn:
        kwargs["transactional_id"] = f"bench-{uuid.uuid4().hex}"
    producer = KafkaProducer(**kwargs)
    if txn:
        producer.init_transactions()
        producer.begin_transaction()
    producer.send(topic, b"warm-up").get(30)
    if txn:
        producer.commit_transaction()
    rate = _timed(values, keys, txn, _each(producer.send, topic), producer.begin_transaction,
                  producer.commit_transaction, producer.flush)
    producer.close()
    return rate


CLIENTS: dict[str, Callable[..., float]] = {
    "ours": _ours, "ours-bulk": _ours_bulk, "confluent": _confluent, "kafka-python": _kafka_python,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--kafka-python-records", type=int, default=30_000,
                        help="kafka-python is slow: fewer records (the rate is per second)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--codecs", nargs="+", default=["none", "lz4", "zstd"])
    parser.add_argument("--modes", nargs="+", default=["idempotent", "transactional"])
    parser.add_argument("--only", default=",".join(CLIENTS))
    parser.add_argument("--keyed", type=int, default=0, metavar="N",
                        help="records carry keys, N distinct ones (user-<i %% N>)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of each topic (more than 1 only with --keyed)")
    parser.add_argument("--stats", action="store_true",
                        help="also print what each client sent per batch and per request")
    args = parser.parse_args(argv)
    global STATS
    STATS = args.stats
    clients = [name for name in args.only.split(",") if name]
    if args.partitions > 1 and not args.keyed:
        parser.error("--partitions above 1 needs --keyed (the end offsets of unkeyed records "
                     "spread by the sticky partitioner cannot be checked per transaction)")
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from integration.harness.cluster import KafkaCluster

        cluster = KafkaCluster(nodes=1).start()
        bootstrap = cluster.bootstrap()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        header = f"{'scenario':34}" + "".join(f"{name:>14}" for name in clients)
        header += "   ours/confluent  ours/kafka-python  bulk/confluent"
        header += "".join(f"  {name + ' cpu us/rec':>22}" for name in clients)
        header += "".join(f"  {name + ' caller us/rec':>25}" for name in clients)
        print(header)
        for mode in args.modes:
            for size in args.sizes:
                for codec in args.codecs:
                    rates: dict[str, list[float]] = {name: [] for name in clients}
                    cpu: dict[str, list[float]] = {name: [] for name in clients}
                    caller_cpu: dict[str, list[float]] = {name: [] for name in clients}
                    stats: dict[str, list[dict[str, float]]] = {name: [] for name in clients}
                    for _ in range(args.runs):
                        for name in clients:
                            topic = f"bench-{uuid.uuid4().hex[:10]}"
                            admin.create_topics([NewTopic(topic, args.partitions, 1)]
                                                )[topic].result(30)
                            count = args.kafka_python_records if name == "kafka-python" \
                                else args.records
                            values = bench_values(size, count)
                            keys = [b"user-%d" % (i % args.keyed) for i in range(count)] \
                                if args.keyed else None
                            rates[name].append(CLIENTS[name](bootstrap, topic, values, keys,
                                                             codec, mode == "transactional"))
                            cpu[name].append(last_cpu_us_per_record)
                            caller_cpu[name].append(last_caller_cpu_us_per_record)
                            stats[name].append(dict(last_stats))
                            last_stats.clear()
                            _verify(bootstrap, topic, keys, count, mode == "transactional",
                                    args.partitions)
                    medians = {name: statistics.median(r) for name, r in rates.items()}
                    keyed = f" keyed/{args.keyed}" if args.keyed else ""
                    line = f"{mode + ' ' + str(size) + 'B ' + codec + keyed:34}"
                    line += "".join(f"{medians[name]:>14,.0f}" for name in clients)
                    ours = medians.get("ours")
                    for other, base in (("confluent", "ours"), ("kafka-python", "ours"),
                                        ("confluent", "ours-bulk")):
                        if medians.get(base) and medians.get(other):
                            line += f"{medians[base] / medians[other]:>17.2f}"
                        else:
                            line += f"{'-':>17}"
                    del ours
                    line += "".join(f"{statistics.median(cpu[name]):>24.2f}" for name in clients)
                    line += "".join(f"{statistics.median(caller_cpu[name]):>27.2f}"
                                    for name in clients)
                    print(line, flush=True)
                    if args.stats:
                        for name in clients:
                            runs = [run for run in stats[name] if run]
                            if runs:
                                print(f"    {name:14}" + "  ".join(
                                    f"{field} {statistics.median(run[field] for run in runs):,.3g}"
                                    for field in runs[0]), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
