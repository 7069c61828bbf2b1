"""Fetch responses damaged in flight (the fault proxy), read by the plain client ``Fetcher``.

The same seeded mutation classes as the Spark fuzz test (``integration.fetch_fuzz``), many
seeds each: every case reads a two-partition topic through the proxy, which damages one Fetch
response that carries records. The read must either fail with our error for that class (a
``CorruptRecordError`` naming the topic-partition and the batch's offset, a ``DecodeError``
naming the partitions asked for) or, for damage to a field the read does not depend on,
return exactly what confluent-kafka reads from the broker directly. Never a hang: the
fetcher's timeouts are short and the read runs under a deadline; never other rows.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from integration.fetch_fuzz import (
    ANY_ERROR,
    CORRUPT,
    DECODE,
    MUTATIONS,
    PARTITIONS,
    PER_PARTITION,
    SAME,
    seeded,
    write_fuzz_topic,
)
from integration.fetch_helpers import arrow_rows, confluent_rows
from integration.harness.proxy import FETCH, ProxiedKafkaCluster
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError, KafkaDsError

# Seeds 0..N-1 per class; more for a long run (``KAFKA_DS_FETCH_FUZZ_SEEDS=500``).
SEEDS_PER_CLASS = int(os.environ.get("KAFKA_DS_FETCH_FUZZ_SEEDS", "8"))
READ_DEADLINE_S = 120  # far above a read's few seconds: reaching it means a hang


@pytest.fixture(scope="module")
def fuzz_topic(proxied_kafka: ProxiedKafkaCluster) -> Iterator[tuple[str, list[Any]]]:
    """A topic of many small batches per partition, and what librdkafka reads of it."""
    topic = f"fetch-fuzz-{time.time_ns() % 10**8}"
    write_fuzz_topic(proxied_kafka, topic)
    expected = [row for p in range(PARTITIONS)
                for row in confluent_rows(proxied_kafka, topic, p, 0, PER_PARTITION)]
    yield topic, expected


def read_through_proxy(cluster: ProxiedKafkaCluster, topic: str) -> list[dict[str, Any]]:
    props = {"bootstrap.servers": cluster.proxy_bootstrap(), "include.headers": "true",
             "max.partition.fetch.bytes": "2048", "request.timeout.ms": "5000",
             "fetch.max.wait.ms": "100", "fetch.timeout.ms": "30000"}
    with Fetcher.from_properties(props) as fetcher:
        rows = arrow_rows(list(fetcher.read_arrow(
            [(topic, p, 0, PER_PARTITION) for p in range(PARTITIONS)])))
    return sorted(rows, key=lambda row: (row["partition"], row["offset"]))


def _in_thread(action: Any, timeout_s: float) -> Any:
    """Run ``action`` with a deadline (a hang fails the test instead of stalling the run)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as exc:  # handed to the test below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"the read hung for {timeout_s} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def damaged_batch(description: str) -> tuple[int, int]:
    """(partition, offset) of the batch a mutation's description names."""
    match = re.search(r"at offset (\d+) of partition (\d+)", description)
    assert match, description
    return int(match.group(2)), int(match.group(1))


def check_error(expect: str, error: BaseException, topic: str, description: str) -> None:
    """The error the class calls for, naming what we know."""
    text = str(error)
    if expect == CORRUPT:
        assert isinstance(error, CorruptRecordError), (description, repr(error))
        partition, offset = damaged_batch(description)
        assert f"record batch at offset {offset} of {topic}-{partition}" in text, \
            (description, text)
    elif expect == DECODE:
        assert isinstance(error, DecodeError), (description, repr(error))
        # The decoder knows byte positions; the read adds the partitions and offsets asked for.
        assert "cannot decode the Fetch response of node" in text, (description, text)
        assert re.search(rf"{re.escape(topic)}-\d at offset \d+", text), (description, text)
    else:
        assert expect == ANY_ERROR and isinstance(error, KafkaDsError), \
            (description, repr(error))


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_damaged_fetch_responses_fail_with_our_error_or_change_nothing(
        proxied_kafka: ProxiedKafkaCluster, fuzz_topic: tuple[str, list[Any]],
        name: str) -> None:
    topic, expected = fuzz_topic
    expect, mutator = MUTATIONS[name]
    proxy = proxied_kafka.proxy
    outcomes: dict[str, int] = {}
    for seed in range(SEEDS_PER_CLASS):
        first = len(proxy.mutations)
        before = proxy.snapshot()
        proxy.mutate_responses(seeded(mutator, seed), 1, {FETCH})
        started = time.monotonic()
        try:
            rows = _in_thread(lambda: read_through_proxy(proxied_kafka, topic), READ_DEADLINE_S)
            error = None
        except KafkaDsError as exc:
            rows, error = None, exc
        finally:
            proxy.reset()
        took_s = time.monotonic() - started
        assert proxy.since(before)["mutated_responses"] == 1, f"seed {seed}: no damage done"
        description = proxy.mutations[first]
        print(f"{name} seed {seed}: {description}: "
              f"{'rows' if error is None else type(error).__name__} in {took_s:.1f} s")
        if error is None:
            assert expect in (SAME, ANY_ERROR), f"seed {seed}: {description}: no error"
            assert rows == expected, f"seed {seed}: {description}: other rows"
            outcomes["same rows"] = outcomes.get("same rows", 0) + 1
        else:
            assert expect != SAME, f"seed {seed}: {description}: {error!r}"
            check_error(expect, error, topic, f"seed {seed}: {description}")
            outcomes[type(error).__name__] = outcomes.get(type(error).__name__, 0) + 1
    print(f"{name}: {outcomes}")
