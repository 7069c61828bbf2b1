"""``PyKafkaDataSource``: the DataSource Spark finds under ``format("pykafka")``.

This class only routes: Spark pickles it to the driver's planner and to every executor, so it
holds nothing but the option map. The source lives in ``kafka_ds.spark.source`` and the sink in
``kafka_ds.spark.sink``; both are imported when first asked for, so a read never loads the
sink's code and the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType


class PyKafkaDataSource(DataSource):
    """Kafka for Spark Structured Streaming, in pure Python: ``format("pykafka")``.

    The user manual is filled in by the source and the sink as they land.
    """

    @classmethod
    def name(cls) -> str:
        return "pykafka"

    def schema(self) -> StructType:
        from kafka_ds.spark.source import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from kafka_ds.spark.source import create_batch_reader

        return create_batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafka_ds.spark.source import create_stream_reader

        return create_stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafka_ds.spark.sink import create_batch_writer

        return create_batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafka_ds.spark.sink import create_stream_writer

        return create_stream_writer(self.options, schema, overwrite)
