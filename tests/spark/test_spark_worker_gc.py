"""The Python worker's heap is frozen out of the cyclic collector once (``workerGcFreeze``),
in reused workers (``SPARK_REUSE_WORKER``, which Spark sets for them) only, after a read or a
write.

Each check runs in a fresh interpreter: freezing is process-wide, and the test process must
keep its own collector as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from kafka_ds.spark.sink_options import parse_sink_options
from kafka_ds.spark.source_options import parse_source_options

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}
SINK = {"kafka.bootstrap.servers": "localhost:9092", "topic": "t"}


def _run(code: str, *, reused: bool = True) -> str:
    env = {key: value for key, value in os.environ.items() if key != "SPARK_REUSE_WORKER"}
    if reused:
        env["SPARK_REUSE_WORKER"] = "1"
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_first_read_freezes_the_heap_once_and_collections_then_skip_it() -> None:
    out = _run("""
        import gc, time
        from kafka_ds.spark import source, worker_gc
        before = gc.get_freeze_count()
        started = time.process_time()
        gc.collect()
        unfrozen_s = time.process_time() - started
        first = worker_gc.freeze_worker_heap()
        frozen = gc.get_freeze_count()
        second = worker_gc.freeze_worker_heap()
        started = time.process_time()
        gc.collect()
        frozen_s = time.process_time() - started
        print(before, first, second, frozen > 10_000, frozen_s < unfrozen_s)
    """)
    # Nothing frozen before; frozen once (the second call is a no-op); a collection after
    # it no longer walks the modules' objects, so it takes less time than one before it.
    assert out == "0 True False True True"


def test_a_worker_that_is_not_reused_is_left_alone() -> None:
    out = _run("""
        import gc
        from kafka_ds.spark import worker_gc
        print(worker_gc.freeze_worker_heap(), gc.get_freeze_count())
    """, reused=False)
    assert out == "False 0"


def test_read_partition_freezes_after_its_read_only_when_asked() -> None:
    # A task without ranges reads nothing (no broker needed); the heap is frozen once the
    # worker's read has finished.
    out = _run("""
        import gc
        from kafka_ds.spark.source import KafkaInputPartition, read_partition
        task = KafkaInputPartition([])
        props = {"bootstrap.servers": "127.0.0.1:1"}
        list(read_partition(props, False, 1, 1000, task, freeze_gc=False))
        off = gc.get_freeze_count()
        list(read_partition(props, False, 1, 1000, task, freeze_gc=True))
        print(off, gc.get_freeze_count() > 0)
    """)
    assert out == "0 True"


def test_a_sink_task_freezes_after_its_write_only_when_asked() -> None:
    # The task's write itself (TaskContext, producer) is replaced: what is checked is that the
    # writer freezes the heap once the task's write has returned, and only with the option on.
    out = _run(f"""
        import gc
        from kafka_ds.spark import sink
        from kafka_ds.spark.sink_options import parse_sink_options
        sink.write_task = lambda *args: "message"
        options = {SINK!r}
        off = sink.PyKafkaBatchWriter(
            parse_sink_options({{**options, "workerGcFreeze": "false"}}), None, "id", 1000)
        print(off._write(iter(())), gc.get_freeze_count())
        on = sink.PyKafkaStreamWriter(parse_sink_options(options), None, None, 1000)
        print(on._write(iter(())), gc.get_freeze_count() > 10_000)
    """)
    assert out.splitlines() == ["message 0", "message True"]


def test_the_option_defaults_to_on_and_can_be_turned_off() -> None:
    assert parse_source_options(BASE, "stream").worker_gc_freeze
    assert not parse_source_options({**BASE, "workerGcFreeze": "false"},
                                    "stream").worker_gc_freeze
    assert parse_sink_options(SINK).worker_gc_freeze
    assert not parse_sink_options({**SINK, "workerGcFreeze": "FALSE"}).worker_gc_freeze
