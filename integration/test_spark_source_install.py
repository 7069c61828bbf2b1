"""Installing the wheel is enough for ``format("pykafka")``: no ``spark.dataSource.register``.

The wheel is built from this checkout and installed into a fresh virtualenv, which borrows only
third-party packages (pyspark, pyarrow ...) from the test venv's site-packages through a .pth
line (so nothing is downloaded, and this checkout is not on its path). A child process with
that interpreter starts its own Spark (its Python workers use the same interpreter) and reads a
topic with ``format("pykafka")`` straight away: Spark's lookup of top-level ``pyspark_*``
modules must find ``pyspark_pykafka`` in the installed wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from integration.fetch_helpers import produce_values
from integration.harness.cluster import KafkaCluster

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    import kafka_ds, pyspark_pykafka
    spark = (SparkSession.builder.master("local[1]").appName("kafka_ds-wheel")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    df = (spark.read.format("pykafka").option("kafka.bootstrap.servers", sys.argv[1])
          .option("subscribe", sys.argv[2]).load())
    print(json.dumps({"rows": df.count(), "kafka_ds": kafka_ds.__file__,
                      "pyspark_pykafka": pyspark_pykafka.__file__}))
    spark.stop()
""")


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_registers_pykafka(kafka: KafkaCluster, topic: str,
                                                 tmp_path: Path) -> None:
    produce_values(kafka, topic, 25)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True)
    wheel = next(wheels.glob("kafka_ds-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # Third-party packages from the test venv (its site dir is added as a plain path entry,
    # so its own .pth files, among them our editable install's, are not processed).
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--target", str(site), str(wheel)], check=True)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYSPARK_", "SPARK_CONF_DIR", "PYTHONPATH"))}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    done = subprocess.run([str(python), str(script), kafka.bootstrap(), topic], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == 25
    # Both modules came from the installed wheel, not from this checkout.
    assert result["kafka_ds"].startswith(str(site)) and result["pyspark_pykafka"].startswith(
        str(site))
