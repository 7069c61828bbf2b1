"""Run the sink's crash-test query (``spark_sink_app``) as separate driver programs.

A ``CrashRun`` owns an input topic filled with ``rows`` records (value ``row-<i>``), an
output topic, a checkpoint and a fault file (``kafka_ds.spark.sink_faults``). ``run()`` starts
the query as its own driver process and waits for it: a ``kill-driver`` fault makes it die
by SIGKILL (return code -9), and the next ``run()`` restarts it from the same checkpoint.
``fired()`` lists the faults that fired, as the sink logged them; ``output()`` reads the
output back with confluent-kafka.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars
from integration.harness.spark import SPARK_CONF_DIR
from integration.producer_util import ReadRecord, read_all, read_committed
from kafka_ds.client.admin import Admin
from kafka_ds.client.producer import Producer

REPO = Path(__file__).resolve().parents[1]


class CrashRun:
    APP = "integration.spark_sink_app"  # the driver program's module (``python -m``)

    def __init__(self, kafka: KafkaCluster, work: Path, name: str, *, rows: int,
                 batch_rows: int, input_partitions: int = 2, output_partitions: int = 3,
                 sink_options: dict[str, str] | None = None, replication_factor: int = 1,
                 topic_config: dict[str, str] | None = None) -> None:
        self.kafka = kafka
        self.work = work
        self.rows = rows
        self.input_topic = f"{name}-in"
        self.output_topic = f"{name}-out"
        kafka.create_topic(self.input_topic, input_partitions, replication_factor, topic_config)
        kafka.create_topic(self.output_topic, output_partitions, replication_factor, topic_config)
        with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "5"}) as producer:
            for i in range(rows):
                producer.send(self.input_topic, f"row-{i}".encode(), key=f"k{i % 101}".encode(),
                              partition=i % input_partitions)
            producer.flush()
        self.faults = work / "faults.json"
        self.faults.write_text("[]")
        self.config = {
            "bootstrap": kafka.bootstrap(), "input_topic": self.input_topic,
            "output_topic": self.output_topic, "checkpoint": str(work / "checkpoint"),
            "max_offsets_per_trigger": batch_rows, "master": "local[2]",
            "sink_options": dict(sink_options or {}),
            "spark_conf": {"spark.jars": ",".join(str(j) for j in fetch_spark_kafka_jars()),
                           "spark.sql.shuffle.partitions": "2"},
        }
        self.runs = 0

    def arm(self, *faults: dict[str, Any]) -> None:
        """Add faults (each fires once, in any later run)."""
        entries = json.loads(self.faults.read_text())
        self.faults.write_text(json.dumps(entries + list(faults)))

    def config_file(self, **overrides: Any) -> Path:
        """The app's config for the next run (``sink_options``, ``spark_conf`` are merged
        into the defaults; ``master`` None leaves it to spark-submit)."""
        config = json.loads(json.dumps(self.config))
        for key, value in overrides.items():
            if isinstance(value, dict):
                config[key] = {**config.get(key, {}), **value}
            else:
                config[key] = value
        self.runs += 1
        path = self.work / f"run-{self.runs}.json"
        path.write_text(json.dumps(config))
        return path

    def env(self) -> dict[str, str]:
        return dict(os.environ, KAFKA_DS_SINK_FAULTS=str(self.faults),
                    SPARK_CONF_DIR=str(SPARK_CONF_DIR), PYSPARK_PYTHON=sys.executable,
                    PYSPARK_DRIVER_PYTHON=sys.executable)

    def run(self, *, timeout_s: float = 600,
            **overrides: Any) -> subprocess.CompletedProcess[str]:
        """One driver program until the query ends (or is killed)."""
        path = self.config_file(**overrides)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", self.APP, str(path)],
                                cwd=REPO, env=self.env(), capture_output=True, text=True,
                                timeout=timeout_s)
        self.record(result, started)
        return result

    def record(self, result: subprocess.CompletedProcess[str], started: float) -> None:
        (self.work / f"run-{self.runs}.log").write_text(result.stdout + result.stderr)
        print(f"run {self.runs}: exit {result.returncode} after "
              f"{time.monotonic() - started:.1f} s\n{result.stdout}")

    def fired(self) -> list[dict[str, Any]]:
        log = Path(f"{self.faults}.log")
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def output(self, *, committed: bool = True, expect: int | None = None) -> list[ReadRecord]:
        """The output topic: at read_committed (until ``expect`` records, default one per
        input row, are visible: the last commit's markers may still be on their way), or all
        of it at read_uncommitted."""
        if committed:
            return read_committed(self.kafka.bootstrap(), self.output_topic,
                                  self.rows if expect is None else expect, timeout_s=60)
        return read_all(self.kafka.bootstrap(), self.output_topic, timeout_s=60)

    def counts(self, records: list[ReadRecord]) -> Counter[str]:
        return Counter(r.value.decode() for r in records if r.value is not None)

    def expected(self) -> set[str]:
        return {f"row-{i}" for i in range(self.rows)}

    def query_id(self) -> str:
        return json.loads((self.work / "checkpoint" / "metadata").read_text())["id"]

    def open_transactions(self) -> list[str]:
        prefix = f"pykafka-{self.query_id()}-"
        with Admin.from_properties({"bootstrap.servers": self.kafka.bootstrap()}) as admin:
            return sorted(t.transactional_id for t in admin.list_transactions(states=["Ongoing"])
                          if t.transactional_id.startswith(prefix))
