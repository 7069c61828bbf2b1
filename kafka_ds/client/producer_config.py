"""Producer settings from the Java client's property names, checked as the Java client checks them.

Layer: client. ``ProducerConfig.from_properties({"bootstrap.servers": ..., "acks": "all"})``
parses, validates, and rejects what the Java producer rejects, with errors naming the
property and the fix. Connection settings (security, SASL, TLS, timeouts) are delegated to
``ClientConfig``.

Idempotence is on by default, as in Java 3.0+. As in Java 3.2+, settings that conflict with
it (``acks`` other than all, ``retries=0``, more than 5 requests in flight) turn it off when
``enable.idempotence`` was not set explicitly, and are an error when it was set to true or a
``transactional.id`` is given.

``batch.size`` bounds a batch's estimated size on the wire, as in Java: with
``compression.type`` set, records that compress well pack more of them into a batch (the
estimate follows each topic's observed compression ratio). Records wait uncompressed until the
sender encodes their batch, and count so against ``buffer.memory``, so a batch never holds more
than ``max.request.size`` bytes of uncompressed records. librdkafka counts ``batch.size``
uncompressed: with compressible data our batches hold more records than confluent-kafka's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_ds.client.config import ClientConfig, parse_bool, parse_int
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import ConfigError
from kafka_ds.protocol.producer_state import MAX_IN_FLIGHT

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1

PRODUCER_PROPERTIES = frozenset({
    "acks", "linger.ms", "batch.size", "buffer.memory", "max.block.ms",
    "max.in.flight.requests.per.connection", "request.timeout.ms", "delivery.timeout.ms",
    "retries", "retry.backoff.ms", "retry.backoff.max.ms", "compression.type",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "max.request.size", "enable.idempotence", "transactional.id", "transaction.timeout.ms",
    "partitioner.ignore.keys", "partitioner.class", "key.serializer", "value.serializer",
    "partitioner.adaptive.partitioning.enable", "partitioner.availability.timeout.ms",
    "enable.metrics.push", "metrics.recording.level",
})

_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
_LEVELS = {Compression.GZIP: ("compression.gzip.level", 1, 9),
           Compression.LZ4: ("compression.lz4.level", 1, 17),
           Compression.ZSTD: ("compression.zstd.level", -131072, 22)}
# Java's compression.lz4.level default. Java's Lz4BlockOutputStream takes it to mean lz4's fast
# compressor and any other level LZ4HC at that level; liblz4 reads 9 as LZ4HC 9, 14-19x the
# CPU of fast mode on 100 B records. A setting copied from a Java configuration must not cost
# that.
_JAVA_LZ4_DEFAULT_LEVEL = 9
_DEFAULT_PARTITIONERS = {"", "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
                         "org.apache.kafka.clients.producer.internals.BuiltInPartitioner"}


def _parse_acks(raw: str | None) -> int:
    if raw is None:
        return -1
    text = str(raw).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ConfigError(f"acks must be 0, 1 or all (-1), got {raw!r}")


@dataclass(frozen=True)
class ProducerConfig:
    """Validated producer settings (milliseconds and bytes in the names)."""

    client: ClientConfig
    acks: int = -1
    linger_ms: int = 5
    batch_size_bytes: int = 16_384
    buffer_memory_bytes: int = 33_554_432
    max_block_ms: int = 60_000
    max_in_flight: int = 5
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    retries: int = _INT32_MAX
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    compression: Compression = Compression.NONE
    compression_level: int | None = None
    max_request_size_bytes: int = 1_048_576
    enable_idempotence: bool = True
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    partitioner_ignore_keys: bool = False
    properties: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ProducerConfig:
        props = {key: str(value) for key, value in properties.items()}
        client = ClientConfig.from_properties(props)
        acks = _parse_acks(props.get("acks"))
        codec_name = props.get("compression.type", "none").strip().lower()
        if codec_name not in _CODECS:
            raise ConfigError(f"compression.type must be one of {', '.join(_CODECS)}, "
                              f"got {props['compression.type']!r}")
        codec = _CODECS[codec_name]
        level = None
        if codec in _LEVELS:
            name, low, high = _LEVELS[codec]
            if name in props:
                level = parse_int(props, name, 0)
                if not low <= level <= high:
                    raise ConfigError(f"{name} must be between {low} and {high}, got {level}")
                if codec is Compression.LZ4 and level == _JAVA_LZ4_DEFAULT_LEVEL:
                    level = None  # what Java's level 9 means: lz4's fast mode, not LZ4HC 9
        linger_ms = parse_int(props, "linger.ms", 5, minimum=0)
        request_timeout_ms = parse_int(props, "request.timeout.ms", 30_000, minimum=1)
        delivery_timeout_ms = parse_int(props, "delivery.timeout.ms", 120_000, minimum=1)
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ConfigError(
                f"delivery.timeout.ms ({delivery_timeout_ms}) must be at least linger.ms "
                f"({linger_ms}) + request.timeout.ms ({request_timeout_ms}): raise "
                "delivery.timeout.ms or lower the other two")
        batch_size = parse_int(props, "batch.size", 16_384, minimum=0)
        buffer_memory = parse_int(props, "buffer.memory", 33_554_432, minimum=1)
        max_request_size = parse_int(props, "max.request.size", 1_048_576, minimum=1)
        max_in_flight = parse_int(props, "max.in.flight.requests.per.connection", 5, minimum=1)
        retries = parse_int(props, "retries", _INT32_MAX, minimum=0)
        transactional_id = props.get("transactional.id") or None
        explicit_idempotence = "enable.idempotence" in props
        idempotence = parse_bool(props, "enable.idempotence", True)
        conflicts = []
        if acks != -1:
            conflicts.append(f"acks={props.get('acks')} (idempotence needs acks=all)")
        if max_in_flight > MAX_IN_FLIGHT:
            conflicts.append(f"max.in.flight.requests.per.connection={max_in_flight} (at most "
                             f"{MAX_IN_FLIGHT} with idempotence: the broker remembers only the "
                             "last 5 batches per producer)")
        if retries == 0:
            conflicts.append("retries=0 (idempotence needs retries > 0)")
        if transactional_id is not None and explicit_idempotence and not idempotence:
            raise ConfigError("transactional.id requires idempotence: remove "
                              "enable.idempotence=false or the transactional.id")
        if conflicts and (transactional_id is not None or (explicit_idempotence and idempotence)):
            why = "transactional.id is set" if transactional_id else "enable.idempotence=true"
            raise ConfigError(f"{why}, which requires idempotence, but: {'; '.join(conflicts)}."
                              " Fix those settings, or set enable.idempotence=false "
                              "(not possible with transactional.id)")
        if conflicts and idempotence:
            log.info("idempotence disabled because of %s", "; ".join(conflicts))
            idempotence = False
        partitioner = props.get("partitioner.class", "").strip()
        if partitioner not in _DEFAULT_PARTITIONERS:
            raise ConfigError(f"partitioner.class={partitioner!r} is not supported: kafka_ds "
                              "uses the Java default partitioner (murmur2 for keys, sticky "
                              "for unkeyed records); pass partition= to send() to choose one")
        transaction_timeout_ms = parse_int(props, "transaction.timeout.ms", 60_000, minimum=1)
        config = cls(
            client=client, acks=acks, linger_ms=linger_ms, batch_size_bytes=batch_size,
            buffer_memory_bytes=buffer_memory,
            max_block_ms=parse_int(props, "max.block.ms", 60_000, minimum=0),
            max_in_flight=max_in_flight, request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms, retries=retries,
            retry_backoff_ms=parse_int(props, "retry.backoff.ms", 100, minimum=0),
            retry_backoff_max_ms=parse_int(props, "retry.backoff.max.ms", 1_000, minimum=0),
            compression=codec, compression_level=level,
            max_request_size_bytes=max_request_size, enable_idempotence=idempotence,
            transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms,
            partitioner_ignore_keys=parse_bool(props, "partitioner.ignore.keys", False),
            properties=props,
        )
        unknown = ClientConfig.unused_properties(props, PRODUCER_PROPERTIES)
        if unknown:
            log.warning("ignoring producer properties kafka_ds does not know: %s",
                        ", ".join(unknown))
        return config
