"""``make bench``'s report: a tiny real run (decode, produce) written as a table and PNG plots.

The figures are measured here, against the harness broker, with sizes small enough for a
few seconds; the test checks that the report lays out what was measured (medians, min-max,
ratios of medians) and that the plots are real PNG images, not that any client is fast.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import struct
from pathlib import Path

import pytest

from integration.benchmarks import report, report_cases
from integration.benchmarks.report_writer import Measurement, ratios
from integration.harness.cluster import KafkaCluster

TINY = dataclasses.replace(
    report_cases.QUICK, runs=2, sizes=[100], codecs=["none"], decode_buffer_bytes=64 << 10,
    produce_records=3_000, kafka_python_produce_records=500)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _table_row(text: str, heading: str, scenario: str) -> list[str]:
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| scenario"))
    row = next(line for line in section.splitlines() if line.startswith(f"| {scenario} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    names = [cell.strip() for cell in header.strip("|").split("|")]
    return [f"{name}={cell}" for name, cell in zip(names, cells, strict=True)]


def test_report_tables_and_plots_from_a_real_run(kafka: KafkaCluster, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []  # the batch size of each buffer the decode case built
    build = report_cases.bench_records.build_fetch_buffer

    def recorded(value_bytes: int, codec: object, buffer_bytes: int,
                 batch_bytes: int) -> object:
        built.append(batch_bytes)
        return build(value_bytes, codec, buffer_bytes, batch_bytes)  # type: ignore[arg-type]

    monkeypatch.setattr(report_cases.bench_records, "build_fetch_buffer", recorded)
    found = report.run(kafka, TINY, ["decode", "produce"], tmp_path, "test")

    produce = [m for m in found.measurements if m.case == "client produce"]
    assert {m.connector for m in produce} == {"kafka_ds send()", "kafka_ds send_many()",
                                               "confluent-kafka", "kafka-python"}
    assert all(len(m.samples) == TINY.runs and min(m.samples) > 0 for m in produce)
    decode = [m for m in found.measurements if m.case.startswith("decode")]
    # Each codec on bench_records' 64 KiB batches, and again on the Java producer's 16 KiB.
    assert {m.scenario for m in decode} == {
        "100 B none", "100 B lz4", "100 B zstd", "100 B none, 16 KiB batches",
        "100 B lz4, 16 KiB batches", "100 B zstd, 16 KiB batches"}
    assert built == [64 << 10] * 3 + [16 << 10] * 3

    text = (tmp_path / "report.md").read_text()
    for heading in ("Machine", "Versions", "client produce", "decode (one core, CPU time)"):
        assert f"## {heading}\n" in text
    # The machine's Python speed, to compare runs by: the decode case's 100 B figure.
    ours_100 = next(m for m in decode if m.scenario == "100 B none" and m.ours)
    machine = text.split("## Machine\n", 1)[1].split("\n## ", 1)[0]
    assert (f"- Python speed (one core decoding 100 B records, the decode case): "
            f"{_fmt(statistics.median(ours_100.samples))};") in machine
    # The broker the harness runs (4.x, or 3.9 under make test-compat), not a fixed version.
    assert f"- Kafka broker and perf tools: {kafka.version}\n" in text
    assert "- confluent-kafka / librdkafka: " in text

    # The produce row shows each connector's median and spread and the ratios of medians.
    row = _table_row(text, "client produce", "idempotent 100 B none")
    by_name = {m.connector: m for m in produce}
    confluent = by_name["confluent-kafka"]
    assert (f"confluent-kafka (records/s)={_fmt(confluent.median)} ({_fmt(min(confluent.samples))}"
            f"-{_fmt(max(confluent.samples))})") in row
    # Computed here from the samples, not by the writer's own helper.
    expected = (statistics.median(by_name["kafka_ds send_many()"].samples)
                / statistics.median(confluent.samples))
    assert f"kafka_ds send_many() / confluent-kafka={expected:.2f}x" in row
    assert len([cell for cell in row if cell.endswith("x")]) == 4  # 2 ours x 2 peers

    # The target for per-record produce, checked against the same samples.
    per_record = (statistics.median(by_name["kafka_ds send()"].samples)
                  / statistics.median(confluent.samples))
    assert (f"| client produce | idempotent 100 B none | kafka_ds send() / confluent-kafka | "
            f">= 1.00x | {per_record:.2f}x | {'yes' if per_record >= 1 else 'NO'} |") in text

    # CPU per record beside the rates, for every client: the calling thread's share of a run
    # is part of the whole process's, so per run it reads at least as many records per
    # CPU-second; and each table shows the medians of its own samples.
    cpu = {(m.case, m.connector): m for m in found.measurements
           if m.case in report_cases.PRODUCE_CPU_CASES.values()}
    assert len(cpu) == 2 * len(by_name)
    for name in by_name:
        whole = cpu[(report_cases.PRODUCE_CPU_CASES["all"], name)]
        caller = cpu[(report_cases.PRODUCE_CPU_CASES["caller"], name)]
        assert len(whole.samples) == len(caller.samples) == TINY.runs
        assert all(0 < a <= c for a, c in zip(whole.samples, caller.samples, strict=True)), name
        cpu_row = _table_row(text, whole.case, "idempotent 100 B none")
        assert f"{name} (records per CPU-second)={_fmt(whole.median)}" in " ".join(cpu_row)

    for png in ("client-produce.png", "decode--one-core--CPU-time-.png"):
        assert f"]({png})" in text
        width, height = _png_size(tmp_path / png)
        assert width > 300 and height > 200

    dumped = json.loads((tmp_path / "results.json").read_text())
    assert dumped["ratios"]["client produce: idempotent 100 B none"][
        "kafka_ds send_many()/confluent-kafka"] == round(expected, 2)


def _fmt(value: float) -> str:
    from integration.benchmarks.report_writer import _rate

    return _rate(value, "records/s")


def test_ratios_are_ours_over_each_peer_within_a_scenario() -> None:
    rows = [Measurement("c", "s", "ours", True, [2.0, 4.0, 9.0]),
            Measurement("c", "s", "peer", False, [1.0, 2.0, 3.0])]
    assert ratios(rows) == {("ours", "peer"): 2.0}


def test_a_target_compares_the_best_of_our_settings_with_the_best_of_the_peers() -> None:
    from integration.benchmarks.report_writer import Target, _target_lines

    rows = [Measurement("c", "s", "ours", True, [3.0]),
            Measurement("c", "s", "ours tuned", True, [5.0]),
            Measurement("c", "s", "peer", False, [2.0]),
            Measurement("c", "s", "peer tuned", False, [4.0])]
    lines = _target_lines([Target("c", "", ("ours", "ours tuned"), ("peer", "peer tuned"), 1.2)],
                          rows)
    assert lines[2] == ("| c | s | ours, ours tuned / peer, peer tuned | >= 1.20x | 1.25x | yes "
                        "| - |")
    # Without the tuned figure the same target is missed: 3 / 4.
    lines = _target_lines([Target("c", "", ("ours",), ("peer", "peer tuned"), 1.2)], rows)
    assert lines[2].endswith("| 0.75x | NO | - |")


def test_a_target_shows_the_no_work_connector_over_the_best_peer_as_its_ceiling() -> None:
    from integration.benchmarks.report_writer import Target, _target_lines

    rows = [Measurement("c", "s", "ours", True, [3.0]),
            Measurement("c", "s", "peer", False, [2.0]),
            Measurement("c", "s", "peer tuned", False, [4.0]),
            Measurement("c", "s", "no work", False, [1.0, 5.0, 6.0])]
    target = Target("c", "", ("ours",), ("peer", "peer tuned"), 1.5, ceiling="no work")
    # The ceiling counts for neither side: ours 3 / best peer 4, ceiling 5 / 4.
    assert _target_lines([target], rows)[2] == (
        "| c | s | ours / peer, peer tuned | >= 1.50x | 0.75x | NO | 1.25x |")


def test_the_latency_case_alternates_the_connectors_and_pools_their_halves(
        kafka: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # The queries are replaced (their lags are made up here); the feeder and the topic are
    # the case's own, against the harness broker.
    import numpy as np

    calls: list[tuple[str, float]] = []
    made: dict[str, list[np.ndarray]] = {"pykafka": [], "kafka": []}

    def fake_lags(spark: object, bootstrap: str, topic: str, fmt: str,
                  seconds: float) -> np.ndarray:
        assert bootstrap == kafka.bootstrap() and topic.startswith("bench-latency-")
        calls.append((fmt, seconds))
        lags = np.random.default_rng(len(calls)).exponential(100 * len(calls), 500)
        made[fmt].append(lags)
        return lags

    monkeypatch.setattr(report_cases, "_latency_lags", fake_lags)
    config = dataclasses.replace(TINY, latency_seconds=8)
    found = report_cases.latency(None, kafka, config, lambda line: None)

    half = config.latency_seconds / 2
    # One warm-up query each, then A B B A; the warm-ups' lags are left out.
    assert calls == [("pykafka", half), ("kafka", half),
                     ("pykafka", half), ("kafka", half), ("kafka", half), ("pykafka", half)]
    assert [lat.connector for lat in found] == ["pykafka", report_cases.JVM]
    for lat, fmt in zip(found, ("pykafka", "kafka"), strict=True):
        pooled = np.concatenate(made[fmt][1:])
        assert lat.records == 1_000
        assert lat.p50_ms == pytest.approx(np.median(pooled))
        assert lat.p99_ms == pytest.approx(np.percentile(pooled, 99))
        assert lat.max_ms == pooled.max()


def test_the_micro_batch_case_reads_each_topic_at_each_limit_in_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Spark and the broker stood in: the case's own part is which reads it asks for, with
    # which maxOffsetsPerTrigger, and what it reports of them.
    produced: list[tuple[str, int, int, str]] = []
    reads: list[tuple[str, str, int, dict[str, str]]] = []

    def fake_produce(cluster: object, topic: str, records: int, size: int, codec: str) -> None:
        produced.append((topic, records, size, codec))

    def fake_stream(spark: object, fmt: str, bootstrap: str, topic: str, records: int,
                    meter: object, options: dict[str, str]) -> dict[str, float]:
        reads.append((fmt, topic, records, options))
        return {"steady_rps": float(len(reads))}

    class Cluster:
        def bootstrap(self) -> str:
            return "host:1"

    monkeypatch.setattr(report_cases.bench_spark_source, "_produce", fake_produce)
    monkeypatch.setattr(report_cases.bench_spark_source, "_stream", fake_stream)
    monkeypatch.setattr(report_cases.floor_source, "register", lambda spark: None)
    config = dataclasses.replace(TINY, sizes=[100, 1000], micro_batch_bytes=10_000_003,
                                 micro_batch_counts=(8, 2), micro_batch_sizes=None,
                                 micro_batch_runs=2)
    found = report_cases.spark_micro_batches(None, Cluster(), config,  # type: ignore[arg-type]
                                             lambda line: None)

    # A warm-up topic of the first size (at most MICRO_BATCH_WARM_BYTES), then one per size.
    warm_records = report_cases.MICRO_BATCH_WARM_BYTES // 100  # below 10_000_003 // 100
    assert [(records, size, codec) for _, records, size, codec in produced] == [
        (warm_records, 100, "none"), (100_000, 100, "none"), (10_000, 1000, "none")]
    floor = report_cases.FLOOR
    # First, unmeasured, every format streams the warm-up topic in four micro-batches.
    warm_topic = produced[0][0]
    warm_limit = {"maxOffsetsPerTrigger": str(warm_records // 4 + 4)}
    expected = [("pykafka", warm_topic, warm_records, warm_limit),
                ("kafka", warm_topic, warm_records, warm_limit),
                (floor, warm_topic, warm_records,
                 {"rows": str(warm_records), "valueBytes": "100", "partitions": "4",
                  **warm_limit})]
    # Per size and limit: every format once per round, the connectors on the topic made for
    # that size, the no-I/O source on a made-up topic of the same rows (whole partitions).
    for (topic, records, size, _), count in [(produced[1], 8), (produced[1], 2),
                                             (produced[2], 8), (produced[2], 2)]:
        limit = {"maxOffsetsPerTrigger": str(records // count + 4)}
        floor_options = {"rows": str(records - records % 4), "valueBytes": str(size),
                         "partitions": "4", **limit}
        expected += 2 * [("pykafka", topic, records, limit), ("kafka", topic, records, limit),
                         (floor, topic, records - records % 4, floor_options)]
    assert reads == expected
    assert [m.scenario for m in found[::3]] == [
        "100 B none, 1 MB (12500 rows) per micro-batch",
        "100 B none, 5 MB (50000 rows) per micro-batch",
        "1000 B none, 1 MB (1250 rows) per micro-batch",
        "1000 B none, 5 MB (5000 rows) per micro-batch"]
    first = {m.connector: m.samples for m in found[:3]}
    # Each connector's samples are its own reads' rates, in round order (the warm-up's not
    # among them: the fake's rates count the reads, and the warm-up made the first three).
    assert first == {"pykafka": [4.0, 7.0], report_cases.JVM: [5.0, 8.0],
                     report_cases.FLOOR_NAME: [6.0, 9.0]}
    assert [m.ours for m in found[:3]] == [True, False, False]


@pytest.mark.parametrize(("spark_read_runs", "rounds"), [(2, 2), (None, 3)])
def test_the_spark_read_case_warms_every_format_then_alternates_them_each_round(
        monkeypatch: pytest.MonkeyPatch, spark_read_runs: int | None, rounds: int) -> None:
    # Spark and the broker stood in, as above: which reads the case asks for, in which order,
    # how many rounds (``spark_read_runs``, else ``runs``), and whose samples are whose.
    produced: list[tuple[str, int, int, str]] = []
    reads: list[tuple[str, str, str, int]] = []

    def fake_produce(cluster: object, topic: str, records: int, size: int, codec: str) -> None:
        produced.append((topic, records, size, codec))

    def fake_batch(spark: object, fmt: str, bootstrap: str, topic: str, records: int,
                   meter: object, options: dict[str, str]) -> dict[str, float]:
        reads.append(("batch", fmt, topic, records))
        return {"rps": float(len(reads))}

    def fake_stream(spark: object, fmt: str, bootstrap: str, topic: str, records: int,
                    meter: object, options: dict[str, str]) -> dict[str, float]:
        reads.append(("stream", fmt, topic, records))
        return {"rps": float(len(reads)), "steady_rps": -float(len(reads))}

    class Cluster:
        def bootstrap(self) -> str:
            return "host:1"

    monkeypatch.setattr(report_cases.bench_spark_source, "_produce", fake_produce)
    monkeypatch.setattr(report_cases.bench_spark_source, "_batch", fake_batch)
    monkeypatch.setattr(report_cases.bench_spark_source, "_stream", fake_stream)
    monkeypatch.setattr(report_cases.floor_source, "register", lambda spark: None)
    config = dataclasses.replace(TINY, runs=3, sizes=[100, 1000], codecs=["none", "zstd"],
                                 spark_read_bytes=1_000_002, spark_read_runs=spark_read_runs)
    found = report_cases.spark_read(None, Cluster(), config,  # type: ignore[arg-type]
                                    lambda line: None)

    assert [(records, size, codec) for _, records, size, codec in produced] == [
        (10_000, 100, "none"), (10_000, 100, "zstd"), (1_000, 1000, "none"),
        (1_000, 1000, "zstd")]
    floor = report_cases.FLOOR
    formats = ["pykafka", "kafka", floor]

    def rows(topic_records: int) -> dict[str, int]:
        # The no-I/O source reads whole partitions of bench_spark_source's four.
        return {"pykafka": topic_records, "kafka": topic_records,
                floor: topic_records - topic_records % 4}

    # Unmeasured first: every format reads the first topic by batch, then by stream.
    first_topic, first_records = produced[0][0], produced[0][1]
    expected = [(mode, fmt, first_topic, rows(first_records)[fmt])
                for fmt in formats for mode in ("batch", "stream")]
    # Then per topic, each round: every format by batch, then every format by stream.
    for topic, records, _, _ in produced:
        for _ in range(rounds):
            expected += [("batch", fmt, topic, rows(records)[fmt]) for fmt in formats]
            expected += [("stream", fmt, topic, rows(records)[fmt]) for fmt in formats]
    assert reads == expected

    # Three modes per topic, each with three connectors; the rates are the fakes' read counts.
    assert [m.scenario for m in found[:9:3]] == [
        "batch 100 B none", "availableNow 100 B none",
        "availableNow, middle micro-batches 100 B none"]
    per_round = 2 * len(formats)
    batch_pykafka = [float(7 + r * per_round) for r in range(rounds)]
    stream_jvm = [float(7 + 4 + r * per_round) for r in range(rounds)]
    assert found[0].connector == "pykafka" and found[0].samples == batch_pykafka
    assert found[4].connector == report_cases.JVM and found[4].samples == stream_jvm
    assert found[7].connector == report_cases.JVM
    assert found[7].samples == [-rate for rate in stream_jvm]
    assert [m.ours for m in found[:3]] == [True, False, False]
