"""README's Troubleshooting quotes two of Spark's own messages: Spark, not our code, raises them,
so they are checked against the errors a real SparkSession gives (tests/test_readme.py checks
the ones our code raises)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException

pytestmark = pytest.mark.spark

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _quoted(prefix: str) -> str:
    """The message README's Troubleshooting quotes that starts with ``prefix``."""
    section = README.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    quotes = [q for q in re.findall(r"`([^`]+)`", " ".join(section.split()))
              if q.startswith(prefix)]
    assert len(quotes) == 1, quotes
    return quotes[0]


def test_a_batch_write_without_a_mode_fails_as_quoted(spark: Any) -> None:
    quote = _quoted("The data source ")
    frame = spark.range(1).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(AnalysisException) as refused:
        (frame.write.format("pykafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("topic", "t").save())
    assert quote in str(refused.value)


def test_a_data_source_spark_cannot_find_fails_as_quoted(spark: Any) -> None:
    """Quoted for ``pykafka`` not installed in Spark's Python; shown here with a name that is
    installed nowhere (the message is the same but for the name)."""
    quote = _quoted("Failed to find the data source: ")
    assert quote == "Failed to find the data source: pykafka."
    with pytest.raises(Exception) as refused:  # py4j's error, carrying Spark's
        spark.read.format("pykafka_not_installed").load()
    assert quote.replace("pykafka.", "pykafka_not_installed.") in str(refused.value)
