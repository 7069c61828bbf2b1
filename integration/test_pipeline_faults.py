"""The whole pipeline under faults: pykafka source -> upper(value) -> exactly-once pykafka sink.

Each test runs the streaming query (``pipeline_app``, Trigger.AvailableNow) as separate driver
programs on one checkpoint, breaks something while it runs, restarts the query from its
checkpoint where the fault ended it, and then reads the output with confluent-kafka at
read_committed: every input row must be there, transformed, exactly once, and no
transaction of the query may be left open. Each test proves that its fault happened: the
sink's fault log (``kafka_ds.spark.sink_faults``) for injected faults, the broker process's
state for kills, the proxy's counters (snapshotted for the test) for network faults.

The random task failures and a short, scripted run of the proxy's network faults are fast
enough for CI (``make test``); the rest are marked ``long`` (``make test-long``), among them
the proxy's random faults over a longer run.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.proxy import FETCH, METADATA, PRODUCE, ProxiedKafkaCluster, swallowed
from integration.pipeline_run import PipelineRun

pytestmark = [pytest.mark.spark]

KILLED = -9


def _name(tmp_path: Path, kind: str) -> str:
    return f"pipe-{kind}-{tmp_path.name[-12:]}"


def test_task_failures_at_random_points_are_retried_by_spark_exactly_once(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    print(f"fault seed {seed}")
    pipe = PipelineRun(kafka, tmp_path, _name(tmp_path, "task"), rows=6_000, batch_rows=2_000)
    # One failure per batch, each at a random task phase and with a random way of dying; the
    # first attempt fails, Spark's retry (local[2,4]: 4 attempts per task) must succeed.
    points = ["task:after-produce", "task:after-prepare"]
    faults = [{"point": rng.choice(points), "batch": batch, "partition": rng.randrange(2),
               "attempt": 0, "action": rng.choice(["exit", "raise"])} for batch in range(3)]
    pipe.arm(*faults)
    result = pipe.run(master="local[2,4]")
    assert result.returncode == 0, result.stderr[-3000:]
    fired = [(f["point"], f["batch"], f["partition"]) for f in pipe.fired()]
    assert sorted(fired) == sorted((f["point"], f["batch"], f["partition"]) for f in faults)
    assert pipe.assert_exactly_once() == 6_000


@pytest.mark.long
@pytest.mark.timeout(3600)  # eleven driver starts
def test_ten_driver_kills_over_200k_rows_lose_nothing_and_write_nothing_twice(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    rows, batches = 200_000, 10
    pipe = PipelineRun(kafka, tmp_path, _name(tmp_path, "kills"), rows=rows,
                       batch_rows=rows // batches)
    points = ["commit:start", "commit:after-intent", "commit:after-first-end", "commit:end",
              "task:after-produce", "task:after-prepare"]
    kills = [{"point": points[batch % len(points)], "batch": batch, "action": "kill-driver"}
             for batch in range(batches)]
    pipe.arm(*kills)
    for kill in range(1, batches + 1):
        result = pipe.run()
        assert result.returncode == KILLED, result.stderr[-3000:]
        assert [(f["point"], f["batch"]) for f in pipe.fired()] == \
            [(k["point"], k["batch"]) for k in kills[:kill]]
    result = pipe.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert pipe.assert_exactly_once() == rows


def _break_while_a_task_waits(pipe: PipelineRun, breaker, *, batch: int = 1,
                              sleep_s: float = 20) -> list:
    """Run the pipeline; when a task of ``batch`` has produced its records (its transaction
    is open on the broker), call ``breaker()`` while the task waits; then restart the query
    until it completes. Returns every run's result."""
    pipe.arm({"point": "task:after-produce", "batch": batch, "partition": 0, "attempt": 0,
              "action": "sleep", "seconds": sleep_s})
    running = pipe.start()
    pipe.wait_fired(1, running)
    breaker()
    results = [pipe.finish(running)]
    if results[-1].returncode != 0:
        results += pipe.run_until_done()
    return results


@pytest.mark.long
def test_broker_sigkilled_mid_write_and_restarted(kafka: KafkaCluster, tmp_path: Path) -> None:
    pipe = PipelineRun(kafka, tmp_path, _name(tmp_path, "sigkill"), rows=12_000,
                       batch_rows=2_000)

    def kill_and_restart() -> None:
        kafka.kill(1)
        assert not kafka.is_running(1)
        time.sleep(3)
        kafka.restart_node(1)

    try:
        results = _break_while_a_task_waits(pipe, kill_and_restart)
    finally:
        if not kafka.is_running(1):
            kafka.restart_node(1)
    print(f"runs: {[r.returncode for r in results]}")
    assert pipe.assert_exactly_once() == 12_000


@pytest.mark.long
def test_partition_leader_killed_in_a_three_broker_cluster(kafka_cluster3: KafkaCluster,
                                                            tmp_path: Path) -> None:
    cluster = kafka_cluster3
    pipe = PipelineRun(cluster, tmp_path, _name(tmp_path, "leader"), rows=12_000,
                       batch_rows=2_000, replication_factor=3,
                       topic_config={"min.insync.replicas": "2"})
    killed: list[int] = []

    def kill_leader() -> None:
        leader = next(p.leader for p in cluster.partitions(pipe.output_topic)
                      if p.partition == 0)
        cluster.kill(leader)
        killed.append(leader)

    try:
        results = _break_while_a_task_waits(pipe, kill_leader)
        assert killed and not cluster.is_running(killed[0])
        new_leader = next(p.leader for p in cluster.partitions(pipe.output_topic)
                          if p.partition == 0)
        assert new_leader not in killed  # the partition moved; the pipeline went on
    finally:
        for node in killed:
            cluster.restart_node(node)
    print(f"killed node {killed}; runs: {[r.returncode for r in results]}")
    assert pipe.assert_exactly_once() == 12_000


# The CI run's faults, one at a time in this order, each armed once the one before fired:
# (what to arm, the proxy counter that proves it fired). Reader (Fetch) and writer (Produce)
# alternate; every one waits for traffic of its API, so it hits the running pipeline.
_SCRIPTED_FAULTS: list[tuple[str, int, str]] = [
    ("drop_responses", FETCH, "dropped_responses"),
    ("cut_after_responses", PRODUCE, "cut_responses"),
    ("cut_mid_response", FETCH, "cut_mid_responses"),
    ("cut_mid_request", PRODUCE, "cut_requests"),
    ("drop_responses", PRODUCE, "dropped_responses"),
    ("cut_mid_request", FETCH, "cut_requests"),
]


@pytest.mark.timeout(900)  # about a minute or two; up to three driver starts
def test_scripted_network_faults_on_reader_and_writer_through_the_proxy(
        proxied_kafka: ProxiedKafkaCluster, tmp_path: Path) -> None:
    """The fast subset of the proxy scenario below: every response delayed, then each fault
    of ``_SCRIPTED_FAULTS`` once, on the pipeline's reader and writer connections."""
    rows = 8_000
    pipe = PipelineRun(proxied_kafka, tmp_path, _name(tmp_path, "proxyci"), rows=rows,
                       batch_rows=1_000)
    proxy = proxied_kafka.proxy
    proxy.reset()
    before = proxy.snapshot()
    timeouts = {"kafka.request.timeout.ms": "5000"}
    overrides = {"source_bootstrap": proxied_kafka.proxy_bootstrap(),
                 "sink_bootstrap": proxied_kafka.proxy_bootstrap(),
                 "source_options": timeouts, "sink_options": timeouts}
    stop = threading.Event()
    fired: list[str] = []

    def script() -> None:
        for method, api_key, counter in _SCRIPTED_FAULTS:
            armed_at = proxy.snapshot()[counter]
            getattr(proxy, method)(1, {api_key})
            while proxy.snapshot()[counter] == armed_at:
                if stop.wait(0.05):
                    return
            fired.append(f"{method}:{api_key}")
            if stop.wait(0.5):  # let the pipeline take a few steps before the next one
                return

    proxy.delay(5)
    thread = threading.Thread(target=script, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        results = pipe.run_until_done(attempts=3, **overrides)
    finally:
        stop.set()
        thread.join()
        proxy.reset()
    caused = {k: v for k, v in proxy.since(before).items() if v}
    print(f"runs: {[r.returncode for r in results]} in {time.monotonic() - started:.0f} s; "
          f"faults fired: {fired}; proxy counters: {caused}")
    assert fired == [f"{m}:{k}" for m, k, _ in _SCRIPTED_FAULTS], caused
    for counter in {c for _, _, c in _SCRIPTED_FAULTS}:
        assert caused.get(counter) == sum(c == counter for _, _, c in _SCRIPTED_FAULTS), caused
    assert caused[swallowed(FETCH)] >= 1 and caused[swallowed(PRODUCE)] >= 2, caused
    assert pipe.assert_exactly_once() == rows


@pytest.mark.long
@pytest.mark.timeout(1800)  # up to four driver starts
def test_network_faults_on_reader_and_writer_through_the_proxy(
        proxied_kafka: ProxiedKafkaCluster, tmp_path: Path) -> None:
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    print(f"fault seed {seed}")
    pipe = PipelineRun(proxied_kafka, tmp_path, _name(tmp_path, "proxy"), rows=20_000,
                       batch_rows=2_000)
    proxy = proxied_kafka.proxy
    proxy.reset()
    before = proxy.snapshot()
    timeouts = {"kafka.request.timeout.ms": "5000"}
    overrides = {"source_bootstrap": proxied_kafka.proxy_bootstrap(),
                 "sink_bootstrap": proxied_kafka.proxy_bootstrap(),
                 "source_options": timeouts, "sink_options": timeouts}
    cut_all = proxy.cut_all
    # Faults on the data path (Fetch, Produce, Metadata): a connection cut during its
    # ApiVersions handshake is not retried by metadata lookups yet (see the report of issue 12).
    data = {FETCH, PRODUCE, METADATA}
    faults = [lambda: proxy.drop_responses(1, {FETCH}),
              lambda: proxy.cut_after_responses(1, {PRODUCE}),
              lambda: proxy.cut_mid_response(1, data),
              lambda: proxy.cut_mid_request(1, data),
              cut_all,
              lambda: proxy.delay(rng.choice([0, 20, 100]))]
    stop = threading.Event()
    armed: list[int] = []
    rule_kinds = ("cut_responses", "cut_requests", "cut_mid_responses", "dropped_responses")
    armed_rules = 4  # faults[0:4] wait for traffic; the others act at once

    def fired_rules() -> int:
        return sum(proxy.since(before).get(kind, 0) for kind in rule_kinds)

    def chaos() -> None:
        while not stop.wait(rng.uniform(0.5, 2.0)):
            choice = rng.randrange(len(faults))
            pending = sum(1 for c in armed if c < armed_rules) - fired_rules()
            if choice < armed_rules and pending > 0:
                continue  # one waiting fault at a time: none pile up while Spark starts
            faults[choice]()
            armed.append(choice)

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    try:
        results = pipe.run_until_done(attempts=4, **overrides)
    finally:
        stop.set()
        thread.join()
        proxy.reset()
    caused = {k: v for k, v in proxy.since(before).items() if v}
    cuts = armed.count(faults.index(cut_all))
    print(f"runs: {[r.returncode for r in results]}; proxy counters: {caused}; "
          f"cut_all: {cuts}")
    fired = sum(caused.get(kind, 0) for kind in rule_kinds)
    assert fired + cuts >= 5, caused  # the faults did hit the pipeline's traffic
    assert pipe.assert_exactly_once() == 20_000


@pytest.mark.long
def test_broker_unreachable_beyond_the_timeouts_fails_clearly_then_resumes(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    pipe = PipelineRun(kafka, tmp_path, _name(tmp_path, "down"), rows=8_000, batch_rows=2_000)
    timeouts = {"kafka.request.timeout.ms": "5000", "kafka.delivery.timeout.ms": "15000",
                "kafka.socket.connection.setup.timeout.ms": "3000",
                "kafka.socket.connection.setup.timeout.max.ms": "5000"}
    pipe.arm({"point": "task:after-produce", "batch": 1, "partition": 0, "attempt": 0,
              "action": "sleep", "seconds": 5})
    try:
        running = pipe.start(source_options=timeouts, sink_options=timeouts)
        pipe.wait_fired(1, running)
        kafka.kill(1)  # and it stays down until the query has given up
        started = time.monotonic()
        result = pipe.finish(running, timeout_s=600)
        gave_up_s = time.monotonic() - started
    finally:
        if not kafka.is_running(1):
            kafka.restart_node(1)
    print(f"the query failed after {gave_up_s:.0f} s without a broker")
    assert result.returncode not in (0, KILLED)
    assert f"127.0.0.1:{kafka.port(1)}" in result.stderr, result.stderr[-3000:]
    pipe.run_until_done(source_options=timeouts, sink_options=timeouts)
    assert pipe.assert_exactly_once() == 8_000
