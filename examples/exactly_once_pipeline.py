"""Exactly-once pipeline: topic -> transform -> topic, with a checkpoint, stopped and restarted.

What it shows: a streaming query that reads JSON orders with ``format("pykafka")``, keeps the
paid ones, converts cents to euros and writes them to another topic with the ``pykafka``
sink, whose default ``deliveryGuarantee`` is exactly-once. It runs with
``Trigger.AvailableNow``: it processes what the input holds, then stops. Run it again on the
same checkpoint and it carries on where it stopped; a crash at any point, even between the
sink's commits, neither loses nor duplicates a row. At the end it reads the output topic back
as a read_committed consumer does and prints how many records it holds and how many distinct
orders, which are equal when every order was written once.

    spark-submit examples/exactly_once_pipeline.py --bootstrap localhost:9092 \\
        --input orders --output paid-orders --checkpoint /tmp/checkpoints/paid-orders

Input values look like ``{"order_id": 17, "amount_cents": 1250, "status": "paid"}``.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

ORDER = StructType([
    StructField("order_id", LongType()),
    StructField("amount_cents", LongType()),
    StructField("status", StringType()),
])


def main() -> None:
    parser = argparse.ArgumentParser(description="Exactly-once topic-to-topic pipeline.")
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--input", default="orders")
    parser.add_argument("--output", default="paid-orders")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets-per-trigger", default="1000")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("kafka_ds exactly-once pipeline").getOrCreate()
    orders = (spark.readStream.format("pykafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")    # first start only; then the checkpoint
              .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
              .load()
              .select(F.from_json(F.col("value").cast("string"), ORDER).alias("order"))
              .select("order.*"))
    paid = (orders
            .where(F.col("status") == "paid")
            .select(F.col("order_id").cast("string").alias("key"),
                    F.to_json(F.struct("order_id",
                                       (F.col("amount_cents") / 100).alias("amount_eur")))
                    .alias("value")))
    query = (paid.writeStream.format("pykafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("topic", args.output)
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}: {progress['numInputRows']} input records",
              flush=True)

    written = (spark.read.format("pykafka")
               .option("kafka.bootstrap.servers", args.bootstrap)
               .option("subscribe", args.output)
               .option("kafka.isolation.level", "read_committed")   # committed batches only
               .load())
    total, distinct = written.count(), written.select("key").distinct().count()
    print(f"output topic {args.output}: {total} records, {distinct} distinct orders", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
