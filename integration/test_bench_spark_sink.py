"""``bench_spark_sink``'s measuring loop, with Spark, the broker and the clock stood in for.

The pause before each measured write (``SETTLE_S``) exists so that work the broker still does
for one writer is charged to no other: it must fall outside every rate and every CPU figure.
"""

from __future__ import annotations

from typing import Any

import pytest

from integration.benchmarks import bench_spark_sink


class _Machine:
    """A clock and a CPU counter: a pause burns much CPU (another writer's leftover work), a
    write burns 1 s of wall time and 1 s of CPU."""

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.events: list[str] = []

    # the ``time`` module, as bench_spark_sink uses it
    def sleep(self, seconds: float) -> None:
        self.events.append(f"pause {seconds}")
        self.wall_s += seconds
        self.cpu_s += 100 * seconds

    def perf_counter(self) -> float:
        return self.wall_s

    def write(self, writer: str, *args: Any) -> None:
        self.events.append(f"write {writer}")
        self.wall_s += 1.0
        self.cpu_s += 1.0

    def sample(self) -> dict[str, float]:
        self.events.append("sample")
        return {"broker": self.cpu_s}


class _Admin:
    def create_topic(self, topic: str, partitions: int) -> None:
        pass

    def delete_topics(self, topics: list[str]) -> None:
        pass


class _Frame:
    def unpersist(self) -> None:
        pass


def test_the_pause_before_each_write_is_in_no_rate_and_no_cpu_figure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    machine = _Machine()
    monkeypatch.setattr(bench_spark_sink, "time", machine)
    monkeypatch.setattr(bench_spark_sink, "_input", lambda *args: _Frame())
    monkeypatch.setattr(bench_spark_sink, "warm_input", lambda df, partitions: df)
    monkeypatch.setattr(bench_spark_sink, "_write", machine.write)
    rows = 1_000_000
    out = bench_spark_sink._scenario(None, _Admin(), machine, "broker:9092", rows, 1024, "lz4",
                                     4, 2, writers=["jvm", "eos"], settle_s=1.5)
    # Each write: 1 s and 1 s of CPU, whatever the pauses cost.
    assert out["jvm"] == out["eos"] == rows
    assert out["cpu_us_per_row"] == {"jvm": {"broker": 1.0}, "eos": {"broker": 1.0}}
    # Warm-up writes first, then a pause before every measured one.
    measured = machine.events[machine.events.index("write eos") + 1:]
    assert measured == ["pause 1.5", "sample", "write jvm", "sample",
                        "pause 1.5", "sample", "write eos", "sample"] * 2
