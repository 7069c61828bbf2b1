"""A transactional send and a read_committed read through a real broker leave pandas unloaded.

The client's network, sender and fetch loop on top of the codec paths that
``tests/protocol/test_arrow_numpy.py`` covers: ``tests/protocol/pandas_free_paths.py`` in a
fresh interpreter, given the broker and a topic, fails naming the caller if pyarrow imported
pandas anywhere on the way (see ``kafka_ds/protocol/arrow_numpy.py``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from integration.harness.cluster import KafkaCluster

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "protocol" / "pandas_free_paths.py"


def test_a_broker_round_trip_leaves_pandas_unimported(kafka: KafkaCluster,
                                                      topic_factory: Callable[..., str]) -> None:
    assert importlib.util.find_spec("pandas") is not None  # else the check could not fail
    topic = topic_factory(partitions=1)
    done = subprocess.run([sys.executable, str(SCRIPT), kafka.bootstrap(), topic],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pandas stayed unimported" in done.stdout
