"""Secrets stay secret through a whole secured pipeline run.

The pipeline (``pipeline_app``) reads over SASL/SCRAM and writes over mutual TLS with a
password-protected PKCS12 keystore, at INFO log level, with Spark's event log on (what the
history server and the UI's SQL tab show: plans, options, properties). Then every file the
run wrote is searched for the SCRAM password and the keystore password: the driver's
stdout/stderr (Spark's and the Python workers' logs), the checkpoint directory, the event
log, the query's ``explain(extended=True)`` and its progress JSON. A second run with a wrong
password checks the authentication error's text the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.listeners import SCRAM_USERS
from integration.harness.tls import STORE_PASSWORD
from integration.pipeline_run import PipelineRun

pytestmark = [pytest.mark.spark]

WRONG_PASSWORD = "not-the-scram-password-7f3a"


def _options(kafka: KafkaCluster, listener: str, **kwargs: str) -> dict[str, str]:
    return {f"kafka.{key}": value for key, value in kafka.java_config(listener, **kwargs).items()
            if key != "bootstrap.servers"}


def _files_containing(secret: str, roots: list[Path]) -> list[str]:
    found = []
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and secret.encode() in path.read_bytes():
                found.append(str(path))
    return found


def test_no_password_in_logs_checkpoint_event_log_plans_or_progress(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    user, password = SCRAM_USERS["SCRAM-SHA-256"]
    source_options = _options(kafka, "SASL_SCRAM", mechanism="SCRAM-SHA-256")
    sink_options = _options(kafka, "MTLS")
    assert any(password in value for value in source_options.values())
    assert sink_options["kafka.ssl.keystore.password"] == STORE_PASSWORD
    pipe = PipelineRun(kafka, tmp_path, f"pipe-secret-{tmp_path.name[-12:]}", rows=3_000,
                       batch_rows=1_000)
    events = tmp_path / "events"
    events.mkdir()
    # Uncompressed (Spark compresses event logs with zstd by default): grep must see text.
    spark_conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
                  "spark.eventLog.compress": "false"}
    written = [tmp_path / "checkpoint", events, tmp_path / "explain.txt",
               tmp_path / "progress.json"]
    result = pipe.run(source_bootstrap=kafka.bootstrap("SASL_SCRAM"),
                      sink_bootstrap=kafka.bootstrap("MTLS"), source_options=source_options,
                      sink_options=sink_options, spark_conf=spark_conf, log_level="INFO",
                      explain_file=str(tmp_path / "explain.txt"),
                      progress_file=str(tmp_path / "progress.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert pipe.assert_exactly_once() == 3_000  # the secured pipeline did run
    logs = sorted(tmp_path.glob("run-*.log"))
    # What is searched is not empty: the run did write plans, events and logs.
    assert "pykafka" in (tmp_path / "explain.txt").read_text()
    assert '"sink"' in (tmp_path / "progress.json").read_text()
    event_text = b"".join(path.read_bytes() for path in events.rglob("*") if path.is_file())
    assert b"SparkListenerSQLExecutionStart" in event_text and b"pykafka" in event_text
    assert (tmp_path / "checkpoint" / "offsets").is_dir()
    assert "INFO" in logs[-1].read_text()
    for secret in (password, STORE_PASSWORD):
        assert _files_containing(secret, [*logs, *written]) == [], secret

    # A wrong password fails the query with an authentication error that does not echo it.
    (tmp_path / "denied").mkdir()
    denied = PipelineRun(kafka, tmp_path / "denied", f"pipe-denied-{tmp_path.name[-12:]}",
                         rows=10, batch_rows=10)
    wrong = _options(kafka, "SASL_SCRAM", mechanism="SCRAM-SHA-256", username=user,
                     password=WRONG_PASSWORD)
    result = denied.run(source_bootstrap=kafka.bootstrap("SASL_SCRAM"),
                        source_options=wrong, log_level="INFO")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "SASL_AUTHENTICATION_FAILED" in output or "uthentication failed" in output, \
        output[-3000:]
    assert WRONG_PASSWORD not in output
    assert _files_containing(WRONG_PASSWORD, [tmp_path / "denied" / "checkpoint"]) == []
