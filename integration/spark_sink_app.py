"""A streaming query for the sink's crash tests: Kafka in (JVM source), ``pykafka`` out.

Run as its own driver program, so that a test can SIGKILL it (the fault points in
``kafka_ds.spark.sink_faults`` do) and start it again on the same checkpoint::

    python -m integration.spark_sink_app CONFIG.json

or through ``spark-submit --master spark://...`` (the standalone-cluster test). CONFIG holds
``bootstrap``, ``input_topic``, ``output_topic``, ``checkpoint``, ``sink_options`` and
``source_options`` (extra options), ``max_offsets_per_trigger``, and optionally ``master``
and ``spark_conf``. The query runs with Trigger.AvailableNow: it writes everything the input
holds, in batches of at most ``max_offsets_per_trigger`` records, then stops; the program
then exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from kafka_ds.spark import PyKafkaDataSource

    builder = SparkSession.builder.appName("kafka_ds-sink-faults")
    if config.get("master"):  # under spark-submit, --master decides
        builder = builder.master(config["master"])
    for key, value in config.get("spark_conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(PyKafkaDataSource)
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", config["bootstrap"])
              .option("subscribe", config["input_topic"])
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(config["max_offsets_per_trigger"])))
    for key, value in config.get("source_options", {}).items():
        source = source.option(key, value)
    source = source.load()
    writer = (source.selectExpr("key", "value")
              .writeStream.format("pykafka")
              .option("kafka.bootstrap.servers", config["bootstrap"])
              .option("topic", config["output_topic"])
              .option("checkpointLocation", config["checkpoint"]))
    for key, value in config.get("sink_options", {}).items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    print(f"query id {query.id} run {query.runId}", flush=True)
    query.awaitTermination()
    for progress in query.recentProgress:  # for the test logs: where the time went
        print(f"batch {progress['batchId']}: {progress['numInputRows']} rows, "
              f"{json.dumps(progress['durationMs'])}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
