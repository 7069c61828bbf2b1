"""The quick start on a secured cluster: SASL SCRAM over TLS, secrets from the environment.

What it shows: the options that connect ``format("pykafka")`` to a cluster that requires
SCRAM authentication and TLS. They are the Java client's options, so the same map configures
``format("kafka")``. No secret is in the code or on the command line (where ``ps`` shows it):
the password is read from the environment on the driver, and Spark's plans, logs and our
errors show ``[redacted]`` in its place.

    export KAFKA_BOOTSTRAP=broker1:9094 KAFKA_SASL_USERNAME=app KAFKA_SASL_PASSWORD=...
    export KAFKA_SSL_TRUSTSTORE=/etc/kafka/ca.pem      # PEM, PKCS12 or JKS; on every executor
    spark-submit examples/secured_quickstart.py --topic clicks

Other settings (optional): ``KAFKA_SASL_MECHANISM`` (``SCRAM-SHA-512``, or ``SCRAM-SHA-256``),
``KAFKA_SSL_TRUSTSTORE_TYPE`` (``PEM``; ``PKCS12``/``JKS`` also need
``KAFKA_SSL_TRUSTSTORE_PASSWORD``), ``KAFKA_SECURITY_PROTOCOL`` (``SASL_SSL``; only a test
cluster without TLS would use ``SASL_PLAINTEXT``). The arguments are the quick start's
(``--batches``, ``--available-now``, ``--starting-offsets``).
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession
from quickstart import arguments, click_stream, page_views, print_to_console


def security_options(env: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    """Java client options for SASL SCRAM (+ TLS) from the environment."""
    username, password = env["KAFKA_SASL_USERNAME"], env["KAFKA_SASL_PASSWORD"]
    # The JAAS line's quotes would end the value early: refuse rather than mangle it.
    if '"' in username or '"' in password:
        raise SystemExit("KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD must not contain '\"'")
    options = {
        "kafka.security.protocol": env.get("KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
        "kafka.sasl.mechanism": env.get("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"),
        "kafka.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{username}" password="{password}";',
    }
    if "KAFKA_SSL_TRUSTSTORE" in env:
        options["kafka.ssl.truststore.location"] = env["KAFKA_SSL_TRUSTSTORE"]
        options["kafka.ssl.truststore.type"] = env.get("KAFKA_SSL_TRUSTSTORE_TYPE", "PEM")
        if "KAFKA_SSL_TRUSTSTORE_PASSWORD" in env:
            options["kafka.ssl.truststore.password"] = env["KAFKA_SSL_TRUSTSTORE_PASSWORD"]
    return options


def main() -> None:
    args = arguments().parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", args.bootstrap)
    spark = SparkSession.builder.appName("kafka_ds secured quick start").getOrCreate()
    records = click_stream(spark, bootstrap, args.topic, args.starting_offsets,
                           **security_options(os.environ))
    print_to_console(page_views(records), batches=args.batches,
                     available_now=args.available_now, max_seconds=args.max_seconds)
    spark.stop()


if __name__ == "__main__":
    main()
