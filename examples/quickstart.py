"""Quick start: page views per 10-second window, read from Kafka with format("pykafka").

What it shows: a streaming read of a topic of JSON click events, the JSON parsed into
columns, a count per page over event-time windows with a watermark (late events are dropped
once their window is closed), and each micro-batch's updated counts printed to the console.

Run it against any Kafka (topic "clicks" holding JSON like
``{"user": "u7", "page": "/cart", "event_time": "2026-01-01T12:00:03.250Z"}``)::

    spark-submit examples/quickstart.py --bootstrap localhost:9092 --topic clicks

or with ``make example``, which starts a local Kafka, feeds it from ``examples/generator.py``
and runs this script through spark-submit for a few micro-batches (``examples/local_run.py``).
Options: ``--batches N`` stops after N micro-batches that read data (default: run until
stopped), ``--max-seconds S`` stops after S seconds in any case, ``--available-now`` reads
what the topic holds now and stops, ``--starting-offsets`` (default ``earliest``).
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

CLICK = StructType([
    StructField("user", StringType()),
    StructField("page", StringType()),
    StructField("event_time", TimestampType()),
])


def click_stream(spark: SparkSession, bootstrap: str, topic: str, starting_offsets: str,
                 **kafka_options: str) -> DataFrame:
    """The topic as a stream of Kafka records (key, value, topic, partition, offset, ...)."""
    reader = (spark.readStream.format("pykafka")        # the only difference from "kafka"
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets))
    for name, value in kafka_options.items():
        reader = reader.option(name, value)
    return reader.load()


def page_views(records: DataFrame) -> DataFrame:
    """Views per page and 10-second event-time window; events 30 s late are still counted."""
    events = (records
              .select(F.from_json(F.col("value").cast("string"), CLICK).alias("click"))
              .select("click.*")
              .where(F.col("event_time").isNotNull()))  # malformed JSON parses to nulls
    return (events
            .withWatermark("event_time", "30 seconds")
            .groupBy(F.window("event_time", "10 seconds"), "page")
            .count()
            .select(F.col("window.start").alias("window_start"), "page",
                    F.col("count").alias("views")))


def print_to_console(views: DataFrame, *, batches: int, available_now: bool,
                     max_seconds: float = 0) -> None:
    """Print each micro-batch's changed windows; stop after ``batches`` batches with data
    (or ``max_seconds``, whichever comes first), when caught up (``available_now``), or
    never."""
    writer = (views.writeStream
              .outputMode("update")                     # each batch: the windows it changed
              .format("console")
              .option("truncate", "false")
              .option("numRows", 100))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="2 seconds")
    query = writer.start()
    if available_now or batches <= 0:
        query.awaitTermination(max_seconds or None)
    else:
        deadline = time.monotonic() + (max_seconds or float("inf"))
        while (query.isActive and _batches_with_data(query) < batches
               and time.monotonic() < deadline):
            time.sleep(0.5)
    query.stop()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"quick start: {rows} Kafka records read in {_batches_with_data(query)} "
          "micro-batches", flush=True)


def _batches_with_data(query: StreamingQuery) -> int:
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--batches", type=int, default=0)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="stop after this long in any case (default: no limit)")
    return parser


def main() -> None:
    args = arguments().parse_args()
    spark = SparkSession.builder.appName("kafka_ds quick start").getOrCreate()
    records = click_stream(spark, args.bootstrap, args.topic, args.starting_offsets)
    print_to_console(page_views(records), batches=args.batches,
                     available_now=args.available_now, max_seconds=args.max_seconds)
    spark.stop()


if __name__ == "__main__":
    main()
