"""Producer configuration: Java property names, Java's checks, errors that say the fix."""

from __future__ import annotations

import pytest

from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import ConfigError

BASE = {"bootstrap.servers": "localhost:9092"}


def _config(**props: str) -> ProducerConfig:
    return ProducerConfig.from_properties({**BASE, **{k.replace("_", "."): v
                                                      for k, v in props.items()}})


def test_defaults_match_java() -> None:
    config = ProducerConfig.from_properties(BASE)
    assert config.acks == -1 and config.enable_idempotence
    assert (config.batch_size_bytes, config.linger_ms, config.max_in_flight) == (16_384, 5, 5)
    assert config.buffer_memory_bytes == 33_554_432 and config.max_request_size_bytes == 1_048_576
    assert config.delivery_timeout_ms == 120_000 and config.compression is Compression.NONE


def test_parses_java_names() -> None:
    config = ProducerConfig.from_properties({
        **BASE, "acks": "1", "linger.ms": "20", "compression.type": "zstd",
        "compression.zstd.level": "7", "transactional.id": None or "",
        "enable.idempotence": "false"})
    assert (config.acks, config.linger_ms, config.compression_level) == (1, 20, 7)
    assert config.compression is Compression.ZSTD and not config.enable_idempotence


@pytest.mark.parametrize(("props", "message"), [
    ({"acks": "2"}, "acks must be 0, 1 or all"),
    ({"linger.ms": "soon"}, "linger.ms must be an integer"),
    ({"compression.type": "brotli"}, "compression.type must be one of"),
    ({"compression.type": "gzip", "compression.gzip.level": "12"}, "compression.gzip.level"),
    ({"delivery.timeout.ms": "1000"}, "delivery.timeout.ms .* must be at least linger.ms"),
    ({"enable.idempotence": "true", "acks": "1"}, "requires idempotence.*acks=1"),
    ({"enable.idempotence": "true", "max.in.flight.requests.per.connection": "6"},
     "at most 5"),
    ({"transactional.id": "t", "acks": "0"}, "transactional.id is set"),
    ({"transactional.id": "t", "enable.idempotence": "false"}, "requires idempotence"),
    ({"partitioner.class": "com.example.Mine"}, "partitioner.class"),
    ({"enable.idempotence": "maybe"}, "true or false"),
])
def test_invalid_settings_name_the_property(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig.from_properties({**BASE, **props})


def test_conflicts_turn_implicit_idempotence_off() -> None:
    assert not ProducerConfig.from_properties({**BASE, "acks": "1"}).enable_idempotence
    assert not ProducerConfig.from_properties(
        {**BASE, "max.in.flight.requests.per.connection": "10"}).enable_idempotence


def test_secrets_stay_out_of_repr() -> None:
    config = ProducerConfig.from_properties({
        **BASE, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="u" password="hunter2";'})
    assert "hunter2" not in repr(config)


def test_lz4_level_9_is_fast_mode_as_in_java() -> None:
    # Java's Lz4BlockOutputStream: its default level (9) picks lz4's fast compressor, any other
    # level LZ4HC. Our levels go to liblz4, where 9 would be LZ4HC 9 (14-19x the CPU).
    from kafka_ds.protocol.compression import compress

    fast = _config(compression_type="lz4", compression_lz4_level="9")
    high = _config(compression_type="lz4", compression_lz4_level="10")
    assert (fast.compression_level, high.compression_level) == (None, 10)
    data = b"".join(b"%d-%x;" % (i, i * 2654435761 % 2**32) for i in range(20_000))
    default_frame = compress(Compression.LZ4, data)
    assert compress(Compression.LZ4, data, fast.compression_level) == default_frame
    assert len(compress(Compression.LZ4, data, high.compression_level)) < len(default_frame)
