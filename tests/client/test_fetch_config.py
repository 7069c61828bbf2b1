"""Fetcher options (Java names, clear errors) and the batch-header walk behind prefetch."""

from __future__ import annotations

import pytest

from kafka_ds.client.fetch_config import FETCH_PROPERTIES, FetchConfig
from kafka_ds.client.fetch_state import scan_batches
from kafka_ds.client.fetcher import Fetcher, _ranges
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import ConfigError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.types import IsolationLevel


def test_defaults_follow_the_java_consumer() -> None:
    config = FetchConfig.from_properties({})
    assert (config.fetch_min_bytes, config.fetch_max_bytes, config.fetch_max_wait_ms) == (
        1, 52_428_800, 500)
    assert config.max_partition_fetch_bytes == 4 * 1_048_576  # documented difference
    assert config.isolation_level == IsolationLevel.READ_UNCOMMITTED
    assert config.check_crcs and config.fail_on_data_loss and not config.include_headers
    assert config.decode_threads == 0
    assert not config.receive_ahead  # a helper thread only where asked for


def test_java_names_are_read() -> None:
    config = FetchConfig.from_properties({
        "fetch.min.bytes": "1024", "fetch.max.bytes": "1000000", "fetch.max.wait.ms": "50",
        "max.partition.fetch.bytes": "65536", "isolation.level": "READ_COMMITTED",
        "check.crcs": "false", "client.rack": "rack-a", "fail.on.data.loss": "false",
        "fetch.timeout.ms": "5000", "arrow.batch.rows": "1000", "include.headers": "true",
        "receive.ahead": "true",
    })
    assert config.read_committed and config.client_rack == "rack-a"
    assert (config.fetch_min_bytes, config.fetch_max_bytes, config.fetch_max_wait_ms,
            config.max_partition_fetch_bytes) == (1024, 1_000_000, 50, 65_536)
    assert not config.check_crcs and not config.fail_on_data_loss and config.include_headers
    assert (config.fetch_timeout_ms, config.arrow_batch_rows) == (5000, 1000)
    assert config.receive_ahead
    assert {"fetch.min.bytes", "isolation.level", "fail.on.data.loss"} <= FETCH_PROPERTIES


@pytest.mark.parametrize(("name", "value", "message"), [
    ("fetch.max.bytes", "big", r"fetch\.max\.bytes must be an integer"),
    ("fetch.max.bytes", "0", r"fetch\.max\.bytes must be at least 1"),
    ("max.partition.fetch.bytes", "3000000000", r"max\.partition\.fetch\.bytes must be"),
    ("isolation.level", "serializable", r"read_uncommitted or read_committed"),
    ("check.crcs", "perhaps", r"check\.crcs must be true or false"),
    ("receive.ahead", "sometimes", r"receive\.ahead must be true or false"),
    ("fetch.max.wait.ms", "-1", r"fetch\.max\.wait\.ms must be at least 0"),
    ("decode.threads", "64", r"decode\.threads must be an integer between 0 and 8"),
])
def test_bad_values_name_the_option(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FetchConfig.from_properties({name: value})


def test_from_properties_needs_bootstrap_servers() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        Fetcher.from_properties({"fetch.min.bytes": "1"})


def test_ranges_are_checked() -> None:
    assert _ranges([("t", 0, 0, 5)])[0].topic_partition == ("t", 0)
    with pytest.raises(ValueError, match="resolve earliest/latest"):
        _ranges([("t", 0, -2, 5)])
    with pytest.raises(ValueError, match="appears twice"):
        _ranges([("t", 0, 0, 5), ("t", 0, 5, 9)])


def _batch(base: int, count: int, codec: Compression = Compression.NONE) -> bytes:
    return encode_batch([NewRecord(value=b"v%d" % i, timestamp_ms=1) for i in range(count)],
                        base_offset=base, compression=codec)


def test_scan_batches_reads_positions_from_headers_only() -> None:
    buf = _batch(10, 5) + _batch(15, 3, Compression.LZ4) + _batch(40, 2)  # a gap: compaction
    assert scan_batches(buf) == (42, 10)
    # A cut-off last batch does not count: it is fetched again.
    assert scan_batches(buf[:-7]) == (18, 10)
    assert scan_batches(buf[:30]) == (None, None)
    assert scan_batches(b"") == (None, None)
    assert scan_batches(memoryview(buf)) == (42, 10)
