"""One local SparkSession for tests, examples and benchmarks, configured from spark_conf/.

A Spark JVM costs seconds to start and ``spark.jars`` cannot change after it has started,
so the process gets exactly one session, built here with:

* ``SPARK_CONF_DIR`` = ``<repo>/spark_conf`` (spark-defaults.conf: local[2], no UI, 2 shuffle
  partitions...), and log4j2 pointed at ``spark_conf/log4j2.properties`` explicitly as well;
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = this interpreter, so Python workers import
  the same venv (kafka_ds, pyarrow) as the driver;
* ``extra_jars`` on ``spark.jars`` (e.g. Spark's JVM Kafka connector from
  ``jars.fetch_spark_kafka_jars()``, which the ``spark`` pytest fixture adds).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_CONF_DIR = Path(__file__).resolve().parents[2] / "spark_conf"
_session: SparkSession | None = None
_session_jars: tuple[str, ...] = ()


def spark_session(extra_jars: Iterable[str | Path] = (), *, app_name: str = "kafka_ds-tests",
                  conf: dict[str, Any] | None = None) -> SparkSession:
    """Return the process's SparkSession, creating it on first call.

    Later calls return the same session; asking for jars it was not started with raises
    (the JVM classpath is fixed at start), so pass every jar you need on the first call.
    """
    global _session, _session_jars
    jars = tuple(str(Path(j).resolve()) for j in extra_jars)
    if _session is not None and _session._sc._jsc is not None:  # still alive
        missing = set(jars) - set(_session_jars)
        if missing:
            raise ValueError(f"SparkSession already started without {sorted(missing)}; "
                             "spark.jars is fixed at JVM start: request all jars up front")
        return _session

    os.environ["SPARK_CONF_DIR"] = str(SPARK_CONF_DIR)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # imported late: the harness works without pyspark

    # Warehouse dir (empty unless a test saves tables), removed at interpreter exit.
    warehouse = tempfile.mkdtemp(prefix="kafka_ds-spark-warehouse-")
    atexit.register(shutil.rmtree, warehouse, True)
    log4j = f"-Dlog4j2.configurationFile=file:{SPARK_CONF_DIR / 'log4j2.properties'}"
    builder = (SparkSession.builder.appName(app_name)
               .config("spark.driver.extraJavaOptions", log4j)
               .config("spark.executor.extraJavaOptions", log4j)
               # Keep spark-warehouse/ and metastore files out of the working tree.
               .config("spark.sql.warehouse.dir", warehouse))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    _session = builder.getOrCreate()
    _session_jars = jars
    return _session


def stop_spark_session() -> None:
    """Stop the process's session (the next ``spark_session`` call starts a new JVM)."""
    global _session, _session_jars
    if _session is not None:
        _session.stop()
    _session, _session_jars = None, ()
