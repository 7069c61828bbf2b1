"""The sink under crashes: driver SIGKILLs, task crashes, expired transactions.

Each test runs its streaming query (Kafka in, pykafka out, Trigger.AvailableNow) as separate
driver programs (``sink_crash.CrashRun``) on one checkpoint. Faults come from the sink's own
fault points (``kafka_ds.spark.sink_faults``); each test checks, from the fault log, that
every fault it armed fired where it should, and from the exit code that the driver died by
SIGKILL. The output is read back by confluent-kafka at read_committed and counted row by
row against the input.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.jars import fetch_spark_kafka_jars
from integration.harness.spark import SPARK_CONF_DIR
from integration.harness.standalone import StandaloneCluster
from integration.sink_crash import REPO, CrashRun

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KILLED = -9


def _fired(crash: CrashRun) -> list[tuple[str, int | None]]:
    return [(entry["point"], entry.get("batch")) for entry in crash.fired()]


def test_exactly_once_through_driver_kills_at_every_commit_point_and_a_task_crash(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    crash = CrashRun(kafka, tmp_path, f"eos-{tmp_path.name[-12:]}", rows=12_000,
                     batch_rows=2_000)
    points = [("commit:start", 0),  # tasks prepared, nothing decided
              ("commit:after-intent", 1),  # decided, nothing committed
              ("commit:after-first-end", 2),  # one of two transactions committed
              ("commit:end", 3)]  # all committed, Spark's commit log not written
    crash.arm(*({"point": point, "batch": batch, "action": "kill-driver"}
                for point, batch in points))
    # Run 1 splits each batch in 4 Spark partitions (transactional ids -0..-3); the restarts
    # use 2, so the replay of batch 0 does not reuse -2 and -3, which the first commit after
    # the restart must find and abort.
    for run in range(1, len(points) + 1):
        result = crash.run(source_options={"minPartitions": "4"} if run == 1 else {})
        assert result.returncode == KILLED, result.stderr[-3000:]
        assert _fired(crash) == points[:run]  # this run died at this point, no earlier
        if run == 1:
            left = crash.open_transactions()
            assert [name[-2:] for name in left] == ["-0", "-1", "-2", "-3"]
        if run == 2:  # died with batch 1 decided: only its own two transactions are open
            assert [name[-2:] for name in crash.open_transactions()] == ["-0", "-1"]
    after_first_end = crash.fired()[2]
    assert (after_first_end["committed"], after_first_end["transactions"]) == (1, 2)
    # The last run also loses a task after it prepared its transaction: Spark retries it.
    crash.arm({"point": "task:after-prepare", "batch": 4, "partition": 0, "attempt": 0,
               "action": "exit"})
    result = crash.run(master="local[2,2]")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _fired(crash)[-1] == ("task:after-prepare", 4)
    counts = crash.counts(crash.output())
    assert set(counts) == crash.expected()
    assert [row for row, count in counts.items() if count != 1] == []  # exactly once
    assert crash.open_transactions() == []


def test_at_least_once_loses_nothing_under_the_same_faults(kafka: KafkaCluster,
                                                           tmp_path: Path) -> None:
    crash = CrashRun(kafka, tmp_path, f"alo-{tmp_path.name[-12:]}", rows=8_000,
                     batch_rows=2_000, sink_options={"deliveryGuarantee": "at-least-once"})
    crash.arm({"point": "commit:start", "batch": 0, "action": "kill-driver"},
              {"point": "commit:end", "batch": 1, "action": "kill-driver"},
              {"point": "task:after-produce", "batch": 2, "partition": 1, "attempt": 0,
               "action": "exit"})
    assert crash.run().returncode == KILLED
    assert crash.run().returncode == KILLED
    result = crash.run(master="local[2,2]")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _fired(crash) == [("commit:start", 0), ("commit:end", 1),
                             ("task:after-produce", 2)]
    counts = crash.counts(crash.output(committed=False))
    assert set(counts) == crash.expected()  # every row at least once
    print(f"at-least-once: {sum(counts.values()) - len(counts)} duplicates after the faults")


def test_expired_transactions_fail_loudly_and_lose_nothing_silently(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    # Long enough that a batch nobody stalls commits in time on a loaded 2-core machine (6 s
    # and 15 s were not at a load of 25: batch 0's transactions expired on their own); each
    # stall outlasts it by the broker's 1 s abort-check interval plus a margin.
    timeout_s = 30
    stall_s = timeout_s + 5
    crash = CrashRun(kafka, tmp_path, f"exp-{tmp_path.name[-12:]}", rows=8_000,
                     batch_rows=2_000,
                     sink_options={"kafka.transaction.timeout.ms": str(timeout_s * 1000)})
    # Speculation is refused before anything is written.
    result = crash.run(spark_conf={"spark.speculation": "true"})
    assert result.returncode != 0
    assert "cannot run with spark.speculation=true" in result.stderr
    assert crash.output(committed=False) == []
    # Batch 1 stalls before its commit is decided: its transactions expire, the commit
    # aborts the batch and says nothing of it is visible; a restart writes it again.
    crash.arm({"point": "commit:start", "batch": 1, "action": "sleep", "seconds": stall_s})
    result = crash.run()
    assert result.returncode != 0
    assert "did not commit batch 1" in result.stderr and "nothing of it is visible" in \
        result.stderr, result.stderr[-3000:]
    # Batch 2 stalls after its commit was decided: its transactions expire, data is lost.
    crash.arm({"point": "commit:after-intent", "batch": 2, "action": "sleep",
               "seconds": stall_s})
    result = crash.run()
    assert result.returncode != 0
    assert "data loss in the pykafka sink" in result.stderr and "batch 2" in result.stderr, \
        result.stderr[-3000:]
    assert "Spark partition 0" in result.stderr and "Spark partition 1" in result.stderr
    # Transactions v2 (KIP-890) answers INVALID_TXN_STATE, v1 PRODUCER_FENCED.
    assert "INVALID_TXN_STATE" in result.stderr or "PRODUCER_FENCED" in result.stderr
    assert _fired(crash) == [("commit:start", 1), ("commit:after-intent", 2)]
    # The loss is reported again on restart, until the user accepts it.
    result = crash.run()
    assert result.returncode != 0 and "data loss in the pykafka sink" in result.stderr
    result = crash.run(sink_options={"failOnDataLoss": "false"})
    assert result.returncode == 0, result.stderr[-3000:]
    counts = crash.counts(crash.output(expect=6_000))
    assert all(count == 1 for count in counts.values())  # never twice
    missing = crash.expected() - set(counts)
    lost = {f"row-{i}" for i in range(4_000, 6_000)}  # batch 2: rows 4000..5999
    assert missing == lost
    assert crash.open_transactions() == []


def test_exactly_once_on_a_standalone_cluster_with_an_executor_killed_mid_batch(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    crash = CrashRun(kafka, tmp_path, f"std-{tmp_path.name[-12:]}", rows=8_000,
                     batch_rows=2_000)
    # The first task of batch 2 to have sent its records waits there; the test kills its
    # executor meanwhile. Spark runs the task again on the other worker's executor.
    crash.arm({"point": "task:after-produce", "batch": 2, "attempt": 0, "action": "sleep",
               "seconds": 60})
    config = crash.config_file(master=None, spark_conf={
        "spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "512m",
        "spark.executorEnv.KAFKA_DS_SINK_FAULTS": str(crash.faults)})
    with StandaloneCluster(workers=2, conf_dir=SPARK_CONF_DIR) as cluster, \
            ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        submitted = pool.submit(cluster.submit, [str(REPO / "integration" / "spark_sink_app.py"),
                                                 str(config)], env=crash.env(),
                                jars=[str(jar) for jar in fetch_spark_kafka_jars()])
        deadline = time.monotonic() + 300
        while not crash.fired() and time.monotonic() < deadline and not submitted.done():
            time.sleep(0.5)
        if submitted.done():  # ended before the fault: show why
            crash.record(submitted.result(), started)
            pytest.fail(f"the application ended before the fault fired:\n"
                        f"{submitted.result().stderr[-3000:]}")
        (fired,) = crash.fired()
        executor = cluster.executor_of(fired["pid"])
        assert executor is not None, "the stalled task's executor"
        others = set(cluster.executor_pids()) - {executor}
        assert others, "the other worker's executor, to take the task over"
        os.kill(executor, signal.SIGKILL)
        result = submitted.result(timeout=600)
        crash.record(result, started)
        assert executor not in cluster.executor_pids()
    assert result.returncode == 0, result.stderr[-3000:]
    assert (fired["point"], fired["batch"]) == ("task:after-produce", 2)
    counts = crash.counts(crash.output())
    assert set(counts) == crash.expected()
    assert [row for row, count in counts.items() if count != 1] == []  # exactly once
    assert crash.open_transactions() == []
