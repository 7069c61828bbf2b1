"""Each example in examples/ run as a user runs it: pyspark's spark-submit, the harness broker,
small data, and its output checked (printed results, topics, Parquet files), not only its
exit code. Oracles: the expected results computed here from the records produced, and
confluent-kafka / pyarrow reading what the examples wrote.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars, spark_kafka_manifest
from integration.harness.listeners import SCRAM_USERS
from integration.harness.standalone import StandaloneCluster
from integration.producer_util import read_committed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from local_run import spark_submit  # noqa: E402

# Spark runs in every test here (make test-compat, which deselects spark, need not repeat them).
pytestmark = pytest.mark.spark

_BASE_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
_CONSOLE_ROW = re.compile(r"^\|(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\|(\S+)\s*\|(\d+)\s*\|$")


def _send(kafka: KafkaCluster, topic: str, records: list[tuple[bytes | None, bytes, int | None]],
          **config: str) -> None:
    from kafka_ds.client.producer import Producer

    with Producer({"bootstrap.servers": kafka.bootstrap(), **config}) as producer:
        for key, value, timestamp_ms in records:
            producer.send(topic, value, key=key, timestamp_ms=timestamp_ms)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (f"exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}"
                                    f"\nstderr:\n{result.stderr[-6000:]}")
    return result.stdout


def _clicks(count: int) -> tuple[list[tuple[bytes | None, bytes, int | None]],
                                 Counter[tuple[str, str]]]:
    """Click events 0.7 s apart from 2026-01-01 and their views per (10-s window, page)."""
    pages = ("/home", "/search", "/cart")
    records: list[tuple[bytes | None, bytes, int | None]] = []
    views: Counter[tuple[str, str]] = Counter()
    for i in range(count):
        event_ms = _BASE_MS + i * 700
        moment = datetime.fromtimestamp(event_ms / 1000, UTC)
        page = pages[i % 3]
        value = {"user": f"u{i % 4}", "page": page,
                 "event_time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
        records.append((f"u{i % 4}".encode(), json.dumps(value).encode(), None))
        window = moment.replace(second=moment.second // 10 * 10, microsecond=0)
        views[(window.strftime("%Y-%m-%d %H:%M:%S"), page)] += 1
    records.append((None, b"not json", None))  # parsed to nulls and dropped by the example
    return records, views


def _final_views(stdout: str) -> dict[tuple[str, str], int]:
    """The last count printed for each (window, page): update mode reprints changed rows."""
    last: dict[tuple[str, str], int] = {}
    for line in stdout.splitlines():
        match = _CONSOLE_ROW.match(line.strip())
        if match:
            last[(match.group(1), match.group(2))] = int(match.group(3))
    return last


def test_quickstart_prints_views_per_window(kafka: KafkaCluster, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    records, views = _clicks(90)
    _send(kafka, topic, records)
    stdout = _ok(spark_submit("quickstart.py", ["--bootstrap", kafka.bootstrap(),
                                                "--topic", topic, "--available-now"]))
    assert "Batch: 0" in stdout
    assert _final_views(stdout) == dict(views)
    assert f"quick start: {len(records)} Kafka records read" in stdout


def test_secured_quickstart_scram_over_tls_secrets_from_environment(
        kafka: KafkaCluster, topic_factory: Any) -> None:
    """SCRAM-SHA-512 over TLS (the broker's SASL_SSL listener), configured as the example's
    header says: bootstrap, credentials and the CA's PEM truststore only in the environment,
    security protocol and mechanism left to the example's defaults (SASL_SSL, SCRAM-SHA-512)."""
    topic = topic_factory(partitions=2)
    records, views = _clicks(40)
    _send(kafka, topic, records)
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    assert kafka.tls is not None
    env = {"KAFKA_BOOTSTRAP": kafka.bootstrap("SASL_SSL"), "KAFKA_SASL_USERNAME": user,
           "KAFKA_SASL_PASSWORD": password, "KAFKA_SSL_TRUSTSTORE": str(kafka.tls.ca_pem)}
    result = spark_submit("secured_quickstart.py", ["--topic", topic, "--available-now"],
                          env=env)
    stdout = _ok(result)
    assert _final_views(stdout) == dict(views)
    assert f"quick start: {len(records)} Kafka records read" in stdout
    assert password not in stdout + result.stderr


def _orders(first: int, count: int) -> list[tuple[bytes | None, bytes, int | None]]:
    """Input of exactly_once_pipeline.py: every third order is cancelled."""
    return [(None, json.dumps({"order_id": i, "amount_cents": 100 * i + 5,
                               "status": "paid" if i % 3 else "cancelled"}).encode(), None)
            for i in range(first, first + count)]


def _paid_orders(count: int) -> set[tuple[bytes, bytes]]:
    """What exactly_once_pipeline.py writes for ``_orders(0, count)``: (key, value) pairs."""
    return {(str(i).encode(), json.dumps({"order_id": i, "amount_eur": (100 * i + 5) / 100},
                                         separators=(",", ":")).encode())
            for i in range(count) if i % 3}


def test_exactly_once_pipeline_stop_and_restart(kafka: KafkaCluster, topic_factory: Any,
                                                tmp_path: Path) -> None:
    source, sink = topic_factory(partitions=3), topic_factory(partitions=2)
    args = ["--bootstrap", kafka.bootstrap(), "--input", source, "--output", sink,
            "--checkpoint", str(tmp_path / "checkpoint"), "--max-offsets-per-trigger", "100"]
    _send(kafka, source, _orders(0, 150))
    first = _ok(spark_submit("exactly_once_pipeline.py", args))
    assert f"output topic {sink}: 100 records, 100 distinct orders" in first
    _send(kafka, source, _orders(150, 90))
    second = _ok(spark_submit("exactly_once_pipeline.py", args))  # same checkpoint
    assert f"output topic {sink}: 160 records, 160 distinct orders" in second
    # The restart read only the 90 new orders (batches of at most 100).
    assert sum(int(n) for n in re.findall(r"batch \d+: (\d+) input records", second)) == 90

    expected = _paid_orders(240)
    written = read_committed(kafka.bootstrap(), sink, expect=len(expected))
    assert len(written) == len(expected)
    assert {(r.key, r.value) for r in written} == expected


def test_exactly_once_pipeline_on_a_standalone_cluster_with_standalone_conf(
        kafka: KafkaCluster, topic_factory: Any, tmp_path: Path) -> None:
    """spark_conf/standalone.conf as its header says to use it: ``--properties-file`` with
    ``--load-spark-defaults`` on a master and a worker started by pyspark's spark-class. Its
    ``spark.master`` names port 7077; the harness cluster takes a free port, so ``--master``
    on the command line overrides it, as it would any properties file's (checked below to be
    the URL the header starts). The worker has 2 cores and 2 GiB: executors of the conf's 1
    core and 1 GiB fit twice, and the executors' launch commands show both settings."""
    conf_text = (REPO / "spark_conf" / "standalone.conf").read_text()
    assert re.search(r"^spark\.master\s+spark://127\.0\.0\.1:7077$", conf_text, re.MULTILINE)
    assert "--host 127.0.0.1 --port 7077" in conf_text
    source, sink = topic_factory(partitions=2), topic_factory(partitions=2)
    _send(kafka, source, _orders(0, 60))
    with StandaloneCluster(workers=1, cores_per_worker=2, memory_per_worker="2g",
                           conf_dir=REPO / "spark_conf") as cluster:
        result = cluster.submit(
            [str(REPO / "examples" / "exactly_once_pipeline.py"), "--bootstrap",
             kafka.bootstrap(), "--input", source, "--output", sink, "--checkpoint",
             str(tmp_path / "checkpoint")],
            options=["--properties-file", str(REPO / "spark_conf" / "standalone.conf"),
                     "--load-spark-defaults"])
        stdout = _ok(result)
        launches = [log.read_text(errors="replace")
                    for log in sorted(cluster.work_dir.glob("worker-0/app-*/*/stderr"))]
    assert f"output topic {sink}: 40 records, 40 distinct orders" in stdout
    written = read_committed(kafka.bootstrap(), sink, expect=40)
    assert {(r.key, r.value) for r in written} == _paid_orders(60)
    assert len(written) == 40
    # spark.executor.cores 1 and spark.executor.memory 1g: 1-core, 1 GiB executors, two at
    # once on the 2-core worker (without the conf: one executor taking both cores).
    assert len(launches) >= 2, launches
    for launch in launches:
        assert "-Xmx1024M" in launch and re.search(r"--cores\W+1\b", launch), launch[:3000]


def test_backfill_reads_the_time_range_into_parquet(kafka: KafkaCluster, topic_factory: Any,
                                                    tmp_path: Path) -> None:
    topic = topic_factory(partitions=2)
    # Recent timestamps: the broker's time-based retention (7 days) would delete older ones.
    base_ms = (int(time.time()) // 60 - 10) * 60_000
    records = [(f"k{i}".encode(), f"v{i}".encode(), base_ms + i * 1000) for i in range(60)]
    _send(kafka, topic, records)
    output = tmp_path / "backfill"

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")

    stdout = _ok(spark_submit("backfill_to_parquet.py", [
        "--bootstrap", kafka.bootstrap(), "--topic", topic, "--start", iso(base_ms + 10_000),
        "--end", iso(base_ms + 30_000), "--output", str(output)]))
    table = pq.read_table(output)
    assert sorted(table.column("value").to_pylist()) == sorted(f"v{i}" for i in range(10, 30))
    assert f"backfill: 20 records of {topic}" in stdout


def test_migrate_from_kafka_gives_equal_results(kafka: KafkaCluster, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    records, _ = _clicks(120)
    _send(kafka, topic, records)
    jars = ",".join(str(j) for j in fetch_spark_kafka_jars())  # offline: the cached connector
    stdout = _ok(spark_submit("migrate_from_kafka.py",
                              ["--bootstrap", kafka.bootstrap(), "--topic", topic],
                              submit_options=["--jars", jars]))
    assert 'format("kafka"): 5 rows, 121 views' in stdout  # 4 users and the malformed record
    assert 'format("pykafka"): 5 rows, 121 views' in stdout
    assert ('schemas equal: True; rows only in format("kafka"): 0; rows only in '
            'format("pykafka"): 0') in stdout


def test_jvm_connector_conf_names_the_connector_make_jars_resolves() -> None:
    conf = (REPO / "spark_conf" / "jvm-kafka-connector.conf").read_text()
    packages = re.search(r"^spark\.jars\.packages\s+(\S+)$", conf, re.MULTILINE)
    assert packages is not None
    resolved = spark_kafka_manifest()["resolved"]["spark-sql-kafka-0-10_2.13"]
    assert packages.group(1) == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{resolved}"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_make_example_runs_the_quick_start_and_stops() -> None:
    """``make example``'s program: a broker, the generator, four micro-batches, then exit."""
    result = subprocess.run([sys.executable, str(REPO / "examples" / "local_run.py")],
                            cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    stdout = _ok(result)
    assert "Batch: 3" in stdout
    match = re.search(r"quick start: (\d+) Kafka records read in (\d+) micro-batches", stdout)
    assert match is not None and int(match.group(1)) > 0 and int(match.group(2)) >= 4
    assert _final_views(stdout)  # window counts were printed
