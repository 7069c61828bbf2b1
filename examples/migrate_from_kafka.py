"""Migrating from format("kafka"): one query, run with both formats, the results compared.

What it shows: moving a job from Spark's JVM connector to ``format("pykafka")`` changes the
format name and nothing else, neither the options nor the schema nor the results. The
query (page views per user from JSON click events, read in one batch) runs once with each
format; the two results are compared row by row.

``format("kafka")`` needs Spark's JVM connector on the classpath; ``format("pykafka")`` needs
nothing. ``spark_conf/jvm-kafka-connector.conf`` adds the connector from Maven Central::

    spark-submit --properties-file spark_conf/jvm-kafka-connector.conf \\
        examples/migrate_from_kafka.py --bootstrap localhost:9092 --topic clicks

(or ``--jars`` with the connector's jars, which ``make jars`` caches under
``~/.cache/kafka_ds``).
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def views_per_user(spark: SparkSession, kafka_format: str, bootstrap: str,
                   topic: str) -> DataFrame:
    """The query: identical for both formats but for ``kafka_format``."""
    records = (spark.read.format(kafka_format)
               .option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic)
               .option("startingOffsets", "earliest")
               .option("includeHeaders", "true")
               .load())
    return (records
            .select(F.get_json_object(F.col("value").cast("string"), "$.user").alias("user"),
                    "partition", "offset")
            .groupBy("user")
            .agg(F.count("*").alias("views"), F.max("offset").alias("last_offset")))


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one query on format kafka and pykafka.")
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("kafka_ds migrate from format(kafka)").getOrCreate()
    jvm = views_per_user(spark, "kafka", args.bootstrap, args.topic).cache()
    ours = views_per_user(spark, "pykafka", args.bootstrap, args.topic).cache()
    only_jvm, only_ours = jvm.exceptAll(ours).count(), ours.exceptAll(jvm).count()
    print(f'format("kafka"): {jvm.count()} rows, {jvm.agg(F.sum("views")).first()[0]} views',
          flush=True)
    print(f'format("pykafka"): {ours.count()} rows, {ours.agg(F.sum("views")).first()[0]} '
          "views", flush=True)
    print(f"schemas equal: {jvm.schema == ours.schema}; rows only in format(\"kafka\"): "
          f"{only_jvm}; rows only in format(\"pykafka\"): {only_ours}", flush=True)
    ours.orderBy("user").show(100, truncate=False)
    spark.stop()
    if only_jvm or only_ours:
        raise SystemExit("the two formats disagree")


if __name__ == "__main__":
    main()
