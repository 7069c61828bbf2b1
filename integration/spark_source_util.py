"""Helpers for the Spark source tests: run the same read with ``format("pykafka")`` and Spark's
JVM connector ``format("kafka")``, and compare with chispa.

The JVM connector is the oracle: every DataFrame comparison is ours against it, ordered by
(topic, partition, offset) so that the comparison is row for row, schemas included.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from chispa import assert_df_equality

from integration.harness.cluster import KafkaCluster

FORMATS = ("pykafka", "kafka")


def reader_options(cluster: KafkaCluster, **options: Any) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cluster.bootstrap(),
            **{key: str(value) for key, value in options.items()}}


def read_batch(spark: Any, fmt: str, options: dict[str, str]) -> Any:
    return spark.read.format(fmt).options(**options).load()


def sorted_rows(df: Any) -> Any:
    return df.orderBy("topic", "partition", "offset")


def assert_same(ours: Any, jvm: Any) -> None:
    """Row-for-row and schema equality of our DataFrame and the JVM connector's."""
    assert_df_equality(sorted_rows(ours), sorted_rows(jvm))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def run_available_now(spark: Any, fmt: str, options: dict[str, str],
                      checkpoint: str | None = None, *, once: bool = False,
                      timeout_s: float = 300) -> tuple[Any, list[dict[str, Any]]]:
    """A stream with Trigger.AvailableNow (or Once) into a memory sink: (rows, progress)."""
    name = unique_name(f"mem_{fmt}")
    writer = (spark.readStream.format(fmt).options(**options).load()
              .writeStream.format("memory").queryName(name))
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    query = writer.trigger(**({"once": True} if once else {"availableNow": True})).start()
    try:
        finished = query.awaitTermination(timeout_s)
        assert finished, f"{fmt} query did not finish in {timeout_s} s"
        error = query.exception()
        assert error is None, f"{fmt} query failed: {error}"
        progress = [p for p in query.recentProgress]
    finally:
        query.stop()
    return spark.table(name), progress


def batch_sizes(progress: Iterable[dict[str, Any]]) -> list[int]:
    """Rows per micro-batch that read something (empty batches left out)."""
    return [p["numInputRows"] for p in progress if p["numInputRows"]]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def wait_for_rows(spark: Any, query: Any, table: str, count: int, timeout_s: float = 180) -> None:
    """Wait until the memory sink ``table`` holds ``count`` rows; fail at once if the query
    failed."""
    def done() -> bool:
        error = query.exception()
        if error is not None:
            raise AssertionError(f"the query failed while waiting for {count} rows: {error}")
        return bool(spark.table(table).count() >= count)

    wait_until(done, timeout_s, f"{count} rows in {table}")


def mixed_records(partitions: int, count: int, tag: str = "") -> list[dict[str, Any]]:
    """Records with and without keys, values and headers (duplicate and empty header values),
    spread over partitions, with explicit timestamps."""
    base_ms = int(time.time() * 1000) - 3_600_000
    records = []
    for i in range(count):
        record: dict[str, Any] = {
            "partition": i % partitions, "timestamp": base_ms + i * 3,
            "key": None if i % 5 == 0 else b"key-%d" % i,
            "value": None if i % 13 == 0 else (b"%s-v%d-" % (tag.encode(), i)) * (1 + i % 30),
        }
        if i % 3 == 0:
            record["headers"] = [("h1", b"a%d" % i), ("dup", None), ("dup", b""), ("é", b"\x00")]
        elif i % 3 == 1:
            record["headers"] = [("only", b"x" * (i % 7))]
        records.append(record)
    return records
