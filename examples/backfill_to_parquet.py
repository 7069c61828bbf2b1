"""Batch backfill: the records of a time range, read from Kafka into Parquet.

What it shows: a bounded batch read with ``startingTimestamp`` and ``endingTimestamp`` (one
timestamp, in epoch milliseconds, for every partition; Kafka finds the first offset at or
after each), the binary columns cast to strings, and the result written as Parquet files.

    spark-submit examples/backfill_to_parquet.py --bootstrap localhost:9092 --topic clicks \\
        --start 2026-01-01T00:00:00Z --end 2026-01-02T00:00:00Z --output /data/clicks/2026-01-01

The range is ``[start, end)`` by record timestamp. A partition with no record at or after
``--start`` fails the read (``startingOffsetsByTimestampStrategy=error``, the default);
``--end`` past the last record reads to the end of the partition.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def epoch_ms(text: str) -> str:
    """ISO 8601 (``Z`` or an offset; UTC if none) to epoch milliseconds, as the option wants."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.now().astimezone().tzinfo).astimezone()
    return str(int(moment.timestamp() * 1000))


def main() -> None:
    parser = argparse.ArgumentParser(description="Read a time range of a topic into Parquet.")
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--start", required=True, help="ISO 8601, e.g. 2026-01-01T00:00:00Z")
    parser.add_argument("--end", required=True, help="ISO 8601, exclusive")
    parser.add_argument("--output", required=True, help="a directory; replaced if it exists")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("kafka_ds backfill").getOrCreate()
    records = (spark.read.format("pykafka")
               .option("kafka.bootstrap.servers", args.bootstrap)
               .option("subscribe", args.topic)
               .option("startingTimestamp", epoch_ms(args.start))
               .option("endingTimestamp", epoch_ms(args.end))
               .load())
    rows = records.select(F.col("key").cast("string").alias("key"),
                          F.col("value").cast("string").alias("value"),
                          "partition", "offset", "timestamp")
    rows.write.mode("overwrite").parquet(args.output)
    written = spark.read.parquet(args.output)
    print(f"backfill: {written.count()} records of {args.topic} from {args.start} to "
          f"{args.end} in {args.output}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
