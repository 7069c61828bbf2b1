"""Capture golden record batches from a real broker, written by an independent client.

A script, run by hand when the vectors need refreshing (the output is committed)::

    .venv/bin/python integration/capture_golden.py

It starts a single-node broker, writes with confluent-kafka (librdkafka) one topic per codec
(three records in one batch: key, value, headers, a null key, a tombstone, fixed timestamps)
and one topic holding a committed and an aborted transaction, then copies each partition's
log segment, which is the record batches exactly as the broker stored and would serve them,
to ``tests/protocol/golden/<name>.bin``. ``expected.json`` holds what was written, stated from
the writer's side (values, keys, headers, timestamps, codecs, which transaction committed), so
the test checks our decoder against facts, never against its own earlier output.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from integration.harness.cluster import KafkaCluster

OUT = Path(__file__).resolve().parents[1] / "tests" / "protocol" / "golden"
BASE_TIMESTAMP_MS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# The fixed timestamps are years old: without this, time-based retention deletes them at once.
KEEP_FOREVER = {"retention.ms": "-1"}

# (key, value, headers, timestamp offset): a record with headers (one null header value), a
# record with a null key, a tombstone (null value).
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (b"key-0", b"value-0 " * 20, [("trace", b"abc"), ("empty", None)], 0),
    (None, b"value-1 without a key", [], 5),
    (b"key-2", None, [("h", b"\x00\x01")], 9),
]


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex()


def _expected_records(first_offset: int, records: list[Any]) -> list[dict[str, Any]]:
    return [{"offset": first_offset + index, "key": _hex(key), "value": _hex(value),
             "headers": [[name, _hex(header)] for name, header in headers] or None,
             "timestamp_ms": BASE_TIMESTAMP_MS + delta}
            for index, (key, value, headers, delta) in enumerate(records)]


def _produce(producer: Producer, topic: str, records: list[Any]) -> None:
    for key, value, headers, delta in records:
        producer.produce(topic, key=key, value=value, headers=headers or None, partition=0,
                         timestamp=BASE_TIMESTAMP_MS + delta)


def _segment(cluster: KafkaCluster, topic: str) -> bytes:
    # The broker may roll a new segment mid-way (a marker's timestamp is years after the fixed
    # record timestamps, past segment.ms): segments named by base offset, in order, are the log.
    segments = sorted(cluster.partition_dir(topic).glob("*.log"))
    return b"".join(segment.read_bytes() for segment in segments)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    expected: dict[str, Any] = {}
    with KafkaCluster(nodes=1) as cluster:
        for codec in CODECS:
            topic = f"golden-{codec}"
            cluster.create_topic(topic, config=KEEP_FOREVER)
            # One batch: linger long enough to take all three, idempotence off (pid -1).
            producer = Producer({"bootstrap.servers": cluster.bootstrap(),
                                 "compression.type": codec, "linger.ms": 200,
                                 "enable.idempotence": False, "acks": "all"})
            _produce(producer, topic, RECORDS)
            assert producer.flush(30) == 0
            expected[f"{topic}.bin"] = {
                "writer": "confluent-kafka", "codec": codec,
                "batches": [{"codec": codec, "transactional": False, "control": None,
                             "records": _expected_records(0, RECORDS)}]}

        topic = "golden-txn"
        cluster.create_topic(topic, config=KEEP_FOREVER)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 50,
                             "transactional.id": "golden-writer", "compression.type": "lz4"})
        producer.init_transactions()
        producer.begin_transaction()
        _produce(producer, topic, RECORDS[:2])
        producer.commit_transaction()
        producer.begin_transaction()
        _produce(producer, topic, RECORDS[2:])
        assert producer.flush(30) == 0  # abort_transaction() would drop unsent records
        producer.abort_transaction()
        # Offsets: 0-1 committed data, 2 COMMIT marker, 3 aborted data, 4 ABORT marker.
        expected[f"{topic}.bin"] = {
            "writer": "confluent-kafka", "codec": "lz4",
            "batches": [
                {"codec": "lz4", "transactional": True, "control": None,
                 "records": _expected_records(0, RECORDS[:2])},
                {"codec": "none", "transactional": True, "control": "COMMIT", "offset": 2},
                # librdkafka leaves a batch uncompressed when lz4 would not shrink it.
                {"codec": "none", "transactional": True, "control": None,
                 "records": _expected_records(3, RECORDS[2:])},
                {"codec": "none", "transactional": True, "control": "ABORT", "offset": 4},
            ]}
        deadline = time.monotonic() + 30
        names = [f"golden-{codec}" for codec in CODECS] + ["golden-txn"]
        while not _markers_present(cluster):
            # Markers are written by the coordinator asynchronously: wait for both.
            if time.monotonic() > deadline:
                raise SystemExit("the transaction markers never reached the log")
            time.sleep(0.2)
        for name in names:
            (OUT / f"{name}.bin").write_bytes(_segment(cluster, name))
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {len(expected)} golden segments to {OUT}")
    return 0


def _markers_present(cluster: KafkaCluster) -> bool:
    # Attributes bit 5 marks control batches; count batches by walking the segment's framing.
    data = _segment(cluster, "golden-txn")
    position, controls = 0, 0
    while position + 61 <= len(data):
        length = int.from_bytes(data[position + 8:position + 12], "big")
        attributes = int.from_bytes(data[position + 21:position + 23], "big")
        controls += bool(attributes & 0x20)
        position += 12 + length
    return controls == 2


if __name__ == "__main__":
    raise SystemExit(main())
