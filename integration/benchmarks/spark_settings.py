"""The Spark settings the Spark benchmarks run with, beyond the harness session's defaults.

One setting, which the README recommends for ``format("pykafka")``:
``spark.python.unix.domain.socket.enabled=true``. Over Spark's default TCP socket between an
executor and its Python worker, every Python task waits about 40 ms before its input arrives:
the JVM writes the task's command and then its input in two small writes without
``TCP_NODELAY``, so Nagle's algorithm holds the second until the first is acknowledged, and
the worker, which has nothing to send yet, delays that acknowledgement (Linux's delayed ACK,
40 ms). A Unix domain socket has neither. Measured with py-spy on the Python workers of a
micro-batch stream (2026-11-24, pyspark 4.3.0): the wait in ``open_stream`` before the input
fell from 48-50 ms to about 2 ms per task, for our source and for a source doing no I/O alike.
The JVM connector runs no Python task, so the setting changes nothing on its side.

``--tcp-python-sockets`` on the benchmark scripts measures with Spark's default instead.
"""

from __future__ import annotations

UNIX_SOCKETS = {"spark.python.unix.domain.socket.enabled": "true"}


def session_conf(tcp_python_sockets: bool) -> dict[str, str]:
    """The extra SparkSession settings for a benchmark run."""
    return {} if tcp_python_sockets else dict(UNIX_SOCKETS)


def describe(conf: dict[str, str]) -> str:
    """The settings as the report lists them."""
    if not conf:
        return "Spark's defaults (Python workers over TCP)"
    return ", ".join(f"{key}={value}" for key, value in sorted(conf.items()))
