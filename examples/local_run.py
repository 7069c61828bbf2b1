"""Run an example through spark-submit against a local Kafka: what ``make example`` does.

    python examples/local_run.py            # the quick start, fed by the generator

It starts a single-node Apache Kafka 4 (KRaft) from the jars ``make jars`` cached in
``~/.cache/kafka_ds`` (the test harness's broker), creates the topic ``clicks``, starts
``generator.py`` in a thread (20 events a second), and runs ``examples/quickstart.py``
through pyspark's own ``spark-submit`` until it has printed four micro-batches that read data
(or ten minutes passed, on a very slow machine). The generator writes until the quick start
ends. Then everything stops, the broker included.

``spark_submit`` is also what the example tests use to run each example as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SPARK_CONF_DIR = REPO / "spark_conf"
# The quick start stops after four micro-batches with data, or after this long in any case;
# the generator feeds it until then (it must not stop first: no data, no batches).
_MAX_SECONDS = 600


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def submit_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment spark-submit needs: this venv's Python for driver and workers, and
    ``spark_conf/`` as the configuration directory (spark-defaults.conf, log4j2.properties)."""
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(SPARK_CONF_DIR),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update(extra or {})
    return env


def spark_submit_command(script: str | Path, args: Sequence[str] = (), *,
                         submit_options: Sequence[str] = ()) -> list[str]:
    return [str(spark_home() / "bin" / "spark-submit"), *submit_options,
            str(EXAMPLES / script), *args]


def spark_submit(script: str | Path, args: Sequence[str] = (), *,
                 submit_options: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<script>`` through spark-submit; stdout and stderr are captured."""
    return subprocess.run(spark_submit_command(script, args, submit_options=submit_options),
                          env=submit_env(env), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


def main() -> int:
    sys.path.insert(0, str(REPO))  # the test harness's broker lives in integration/
    sys.path.insert(0, str(EXAMPLES))
    from generator import generate

    from integration.harness.cluster import KafkaCluster
    from kafka_ds.client.admin import Admin

    started = time.monotonic()
    print("Starting a local Apache Kafka broker (KRaft)...", flush=True)
    with KafkaCluster(nodes=1) as kafka:
        bootstrap = kafka.bootstrap()
        with Admin.from_properties({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topic("clicks", partitions=3)
        print(f"Kafka {kafka.version} is up at {bootstrap} ({time.monotonic() - started:.0f}s); "
              "the generator writes 20 click events a second to 'clicks'", flush=True)
        stop = threading.Event()
        feeder = threading.Thread(target=generate, args=(bootstrap, "clicks"),
                                  kwargs={"seconds": _MAX_SECONDS, "stop": stop}, daemon=True)
        feeder.start()
        command = spark_submit_command("quickstart.py", ["--bootstrap", bootstrap,
                                                         "--topic", "clicks", "--batches", "4",
                                                         "--max-seconds", str(_MAX_SECONDS)])
        print("Running:", " ".join(Path(c).name if i == 0 else c
                                    for i, c in enumerate(command)), flush=True)
        try:
            result = subprocess.run(command, env=submit_env(), cwd=REPO, check=False)
        finally:
            stop.set()
            feeder.join()
    print(f"Done in {time.monotonic() - started:.0f}s.", flush=True)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
