"""The benchmarks' no-I/O Python source hands Spark what a read of the real topic would.

``make bench`` quotes our reads against it as the least a Python source can cost. That holds
only if its rows are shaped as a Kafka read's: same schema, same topic name (Spark's JVM pays
per character of it), partitions, offsets and values. The oracle is Spark's JVM connector
reading a real topic written to that shape; the timestamp, which a made-up topic cannot
share, is left out of the comparison.
"""

from __future__ import annotations

from typing import Any

from integration.benchmarks import floor_source
from integration.fetch_helpers import produce
from integration.harness.cluster import KafkaCluster
from integration.spark_source_util import assert_same, read_batch, unique_name

PARTITIONS = 2
ROWS = 1_001  # rounded down to whole partitions by kafka_shape
VALUE_BYTES = 30


def test_the_floor_reads_as_the_jvm_connector_reads_a_topic_of_its_shape(
        spark: Any, kafka: KafkaCluster) -> None:
    floor_source.register(spark)
    topic = unique_name("bench-read-floor-shape")
    rows, shape = floor_source.kafka_shape(ROWS, VALUE_BYTES, PARTITIONS)
    assert rows == 1_000
    kafka.create_topic(topic, PARTITIONS)
    produce(kafka, topic, [{"value": b"v" * VALUE_BYTES, "partition": partition}
                           for partition in range(PARTITIONS)
                           for _ in range(rows // PARTITIONS)])
    options = {"kafka.bootstrap.servers": kafka.bootstrap(), "subscribe": topic}
    floor = read_batch(spark, floor_source.KAFKA_FORMAT, {**options, **shape})
    jvm = read_batch(spark, "kafka", options)
    assert_same(floor.drop("timestamp"), jvm.drop("timestamp"))
    assert floor.schema == jvm.schema
