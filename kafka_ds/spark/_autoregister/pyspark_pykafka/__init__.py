"""Makes ``format("pykafka")`` available without ``spark.dataSource.register``.

Spark 4 looks for top-level modules named ``pyspark_*`` on the Python path of its workers and
registers the ``DefaultSource`` each one exposes. This package lives in the source tree under
``kafka_ds/spark/_autoregister/`` and is installed as the top-level ``pyspark_pykafka`` (see
pyproject.toml: the wheel maps it there, and an editable install puts its parent directory on
``sys.path``).
"""

from kafka_ds.spark.datasource import PyKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
