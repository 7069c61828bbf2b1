"""The plain version table that connections negotiate with, held to the message schemas."""

from __future__ import annotations

import subprocess
import sys

from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.supported import declared_versions
from kafka_ds.protocol.supported_versions import SUPPORTED_VERSIONS


def test_the_table_matches_every_request_class() -> None:
    # The oracle is each schema's own VALID_VERSIONS: adding a message class, or a version
    # to one, without updating the table fails here.
    declared = declared_versions()
    assert {ApiKey(key).name: versions for key, versions in SUPPORTED_VERSIONS.items()} == {
        ApiKey(key).name: versions for key, versions in declared.items()}


def test_a_connection_module_does_not_import_every_message_schema() -> None:
    # Spark starts a fresh Python process to plan each streaming query; importing the 25
    # message modules there cost about 35 ms of CPU for APIs it never sends.
    code = ("import sys, kafka_ds.net.pool; "
            "print(sorted(m for m in sys.modules if m.startswith('kafka_ds.protocol.messages.')))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True).stdout
    for never_sent_by_a_planner in ("produce", "end_txn", "delete_records", "create_topics",
                                    "describe_transactions", "txn_offset_commit"):
        assert f"kafka_ds.protocol.messages.{never_sent_by_a_planner}'" not in loaded, loaded
    assert "kafka_ds.protocol.messages.api_versions'" in loaded, loaded
