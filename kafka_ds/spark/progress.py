"""Lag metrics for ``format("pykafka")`` queries, from Spark's progress reports.

Spark's JVM source reports ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``avgOffsetsBehindLatest`` in ``progress.sources[i].metrics``. A Python streaming source has no
way to fill that map in Spark 4.3 (the engine's Python stream does not implement
``ReportsSourceMetrics``), so it stays empty. What does reach the progress is the source's
``endOffset`` (what the batch read up to) and ``latestOffset`` (what was available when the batch
was planned, from ``reportLatestOffset``). ``offsets_behind_latest`` computes Spark's three
metrics from those, with the same definitions::

    for q in ...: metrics = offsets_behind_latest(q.lastProgress["sources"][0])

Per partition, behind = latest - consumed (a partition missing from the end offsets counts as
consumed up to 0); the values are strings as the progress shows them: Spark's progress JSON
rounds ``avgOffsetsBehindLatest`` to one decimal, half up (so 65.75 shows as "65.8").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from kafka_ds.spark.offsets_json import offsets_from_json


def _offsets(value: Any) -> dict[Any, int]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = json.loads(value) if value.strip() not in ("", "null") else None
    return offsets_from_json(value)


def offsets_behind_latest(source_progress: Any) -> dict[str, str]:
    """Spark's Kafka lag metrics from one ``progress["sources"][i]`` entry (a dict, or a
    ``SourceProgress`` object); empty when the entry has no offsets to compare."""
    if isinstance(source_progress, Mapping):
        end, latest = source_progress.get("endOffset"), source_progress.get("latestOffset")
    else:
        end, latest = source_progress.endOffset, source_progress.latestOffset
    consumed, available = _offsets(end), _offsets(latest)
    if not consumed or not available:
        return {}
    behind = [offset - consumed.get(tp, 0) for tp, offset in available.items()]
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(Decimal(repr(sum(behind) / len(behind))).quantize(
            Decimal("0.1"), rounding=ROUND_HALF_UP)),
    }
