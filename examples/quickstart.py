"""Quick start: a local Kafka, sample data written and read back by kafka_ds.

Run from the repository root with ``make example`` (or ``.venv/bin/python
examples/quickstart.py``). It:

1. starts a single-node Apache Kafka (KRaft) from the jars in ``~/.cache/kafka_ds``;
2. creates a topic and writes sample click events with kafka_ds's idempotent producer, then
   one committed and one aborted transaction;
3. reads the topic back with kafka_ds's fetcher, under read_committed, as Arrow record batches
   in Spark's Kafka schema, and shows them.

The Spark source and sink (``spark.readStream.format("pykafka")``) are the next milestone;
when they land, this example runs a spark-submit streaming job over the same topic.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for the integration harness

from integration.harness.cluster import KafkaCluster
from kafka_ds.client.admin import Admin
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets, partitions_of
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.types import IsolationLevel

TOPIC = "clicks"
EVENTS = 200_000


def main() -> int:
    started = time.monotonic()
    print("Starting a local Apache Kafka broker (KRaft)...", flush=True)
    with KafkaCluster(nodes=1) as kafka:
        props = {"bootstrap.servers": kafka.bootstrap()}
        print(f"Kafka {kafka.version} is up at {props['bootstrap.servers']} "
              f"({time.monotonic() - started:.1f}s)")

        with Admin.from_properties(props) as admin:
            admin.create_topic(TOPIC, partitions=3)

        write_started = time.monotonic()
        with Producer(props | {"compression.type": "lz4", "linger.ms": "5"}) as producer:
            for index in range(EVENTS):
                event = {"user": f"user-{index % 1000}", "page": f"/p/{index % 37}", "n": index}
                producer.send(TOPIC, json.dumps(event).encode(), key=event["user"].encode())
            producer.flush()
        write_s = time.monotonic() - write_started
        print(f"Wrote {EVENTS:,} events in {write_s:.2f}s ({EVENTS / write_s:,.0f} records/s), "
              "idempotent, lz4")

        txn_props = props | {"transactional.id": "quickstart-txn"}
        with Producer(txn_props) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(TOPIC, b'{"note": "committed"}', key=b"txn", partition=0)
            producer.commit_transaction()
            producer.begin_transaction()
            producer.send(TOPIC, b'{"note": "aborted: nobody sees this"}', key=b"txn", partition=0)
            producer.abort_transaction()
        print("Wrote one committed and one aborted transaction to partition 0")

        read_props = props | {"isolation.level": "read_committed"}
        with Fetcher.from_properties(read_props) as fetcher:
            cluster = fetcher.cluster
            ends = latest_offsets(cluster, partitions_of(cluster, [TOPIC]),
                                  isolation_level=IsolationLevel.READ_COMMITTED)
            ranges = [(tp.topic, tp.partition, 0, end) for tp, end in sorted(ends.items())]
            read_started = time.monotonic()
            table = pa.Table.from_batches(list(fetcher.read_arrow(ranges)))
            read_s = time.monotonic() - read_started
        print(f"Read {table.num_rows:,} records back as Arrow in {read_s:.2f}s "
              f"({table.num_rows / read_s:,.0f} records/s), read_committed")
        print(f"Schema (Spark's Kafka source schema):\n{table.schema}\n")
        print(table.slice(0, 5).select(["key", "value", "partition", "offset", "timestamp"])
              .to_pandas().to_string())
        values = table.column("value").cast(pa.string())
        committed = pc.sum(pc.match_substring(values, "committed")).as_py()
        aborted = pc.sum(pc.match_substring(values, "aborted")).as_py()
        print(f"\nTransactional records visible: committed={committed}, aborted={aborted}")
        assert table.num_rows == EVENTS + 1 and committed == 1 and aborted == 0
    print("\nThe Spark source and sink, spark.readStream.format(\"pykafka\"), are the next "
          "milestone:\nthis example stops here, after showing the core on a real broker.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
