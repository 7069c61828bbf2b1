"""Keeping Spark's ``gc.collect()`` between two tasks of a reused Python worker cheap.

Layer: spark. Used by the source's reads and the sink's writes (option ``workerGcFreeze``).

Spark's daemon-forked workers, when reused (``spark.python.worker.reuse``, on by default; Spark
then sets ``SPARK_REUSE_WORKER``), call ``gc.collect()`` after every task. A full collection
walks every object in the process (pyspark, pyarrow, numpy, pandas and kafka_ds modules: about
100 000 objects) and measured 30-60 ms of CPU per task on a 2-core machine, on the path of the
worker's next task: for micro-batches of a few tasks it cost more than reading their rows, and
it was 12 % of the worker's CPU in an exactly-once write of 1 KB rows.
"""

from __future__ import annotations

import gc
import os

_heap_frozen = False


def freeze_worker_heap() -> bool:
    """Move what the Python worker holds now to the collector's permanent generation, once per
    process (``gc.freeze``); True when it did.

    Called when the worker's first read or write has finished, every module a task needs is
    loaded; what is alive then (modules, classes, the connection and producer pools) lives as
    long as the worker. One collection first, so that no garbage is frozen; afterwards the
    daemon's collections only walk what later tasks create. Frozen objects are still freed by
    reference counting; only a reference cycle among them would never be reclaimed. A worker
    that is not reused is never collected between tasks, and is left alone.
    """
    global _heap_frozen
    if _heap_frozen or not os.environ.get("SPARK_REUSE_WORKER"):
        return False
    gc.collect()
    gc.freeze()
    _heap_frozen = True
    return True
