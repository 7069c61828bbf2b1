"""A whole pipeline for the reliability tests: ``pykafka`` in, a transform, ``pykafka`` out.

Run as its own driver program, so that a test can SIGKILL it (the sink's fault points in
``kafka_ds.spark.sink_faults`` do) and start it again on the same checkpoint::

    python -m integration.pipeline_app CONFIG.json

CONFIG holds what ``integration.spark_sink_app`` reads (``bootstrap``, ``input_topic``,
``output_topic``, ``checkpoint``, ``sink_options``, ``source_options``,
``max_offsets_per_trigger``, ``master``, ``spark_conf``) and optionally
``source_bootstrap`` / ``sink_bootstrap`` (default ``bootstrap``: the tests put a fault
proxy on either side), ``explain_file`` (the query's ``explain(extended=True)`` text, for the
secret grep), ``progress_file`` (every progress JSON of the run), ``log_level`` (Spark's and the
driver's Python logging, default WARN) and ``trigger_seconds``
(a processing-time trigger that runs until ``run_seconds`` are up, for the soak; default:
Trigger.AvailableNow, which writes what the input held at start and stops).

The transform upper-cases the value (``row-7`` becomes ``ROW-7``), so the tests count rows
that went through Spark, not copies of the input.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from pathlib import Path


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kafka_ds.spark import PyKafkaDataSource

    builder = SparkSession.builder.appName("kafka_ds-pipeline")
    if config.get("master"):
        builder = builder.master(config["master"])
    for key, value in config.get("spark_conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(config.get("log_level", "WARN"))
    if config.get("log_level"):  # the driver's kafka_ds loggers too (the secret grep reads them)
        logging.basicConfig(level=config["log_level"], stream=sys.stderr)
    spark.dataSource.register(PyKafkaDataSource)
    source = (spark.readStream.format("pykafka")
              .option("kafka.bootstrap.servers",
                      config.get("source_bootstrap", config["bootstrap"]))
              .option("subscribe", config["input_topic"])
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(config["max_offsets_per_trigger"])))
    for key, value in config.get("source_options", {}).items():
        source = source.option(key, value)
    transformed = source.load().selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    writer = (transformed.writeStream.format("pykafka")
              .option("kafka.bootstrap.servers", config.get("sink_bootstrap", config["bootstrap"]))
              .option("topic", config["output_topic"])
              .option("checkpointLocation", config["checkpoint"]))
    for key, value in config.get("sink_options", {}).items():
        writer = writer.option(key, value)
    if config.get("trigger_seconds"):
        writer = writer.trigger(processingTime=f"{config['trigger_seconds']} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print(f"query id {query.id} run {query.runId}", flush=True)
    if config.get("trigger_seconds"):
        query.awaitTermination(float(config["run_seconds"]))
        query.stop()
    else:
        query.awaitTermination()
    if config.get("explain_file"):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            query.explain(extended=True)
        Path(config["explain_file"]).write_text(shown.getvalue())
    if config.get("progress_file"):
        Path(config["progress_file"]).write_text(
            "\n".join(progress.json for progress in query.recentProgress))
    for progress in query.recentProgress:
        print(f"batch {progress.batchId}: {progress.numInputRows} rows, "
              f"{json.dumps(progress.durationMs)}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
