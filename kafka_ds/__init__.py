"""kafka_ds: a Kafka source and exactly-once sink for Spark Structured Streaming, in pure Python.

The package speaks the Kafka wire protocol itself. Its layers import one way only::

    kafka_ds.spark -> kafka_ds.client -> kafka_ds.net -> kafka_ds.protocol

This module must stay light: importing ``kafka_ds`` (for the producer or the fetcher alone)
never imports pyspark.
"""

__version__ = "0.1.0"
