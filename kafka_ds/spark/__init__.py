"""The Spark layer: ``format("pykafka")``, the only package of kafka_ds that imports pyspark.

Importing ``kafka_ds.spark`` imports pyspark; importing ``kafka_ds`` or ``kafka_ds.client``
does not.
"""

from kafka_ds.spark.datasource import PyKafkaDataSource

__all__ = ["PyKafkaDataSource"]
