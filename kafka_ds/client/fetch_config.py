"""Fetcher settings from Java-style properties, and the fetcher's metrics.

Layer: client.

Kafka's consumer option names and defaults (``fetch.min.bytes`` 1, ``fetch.max.bytes`` 50 MiB,
``fetch.max.wait.ms`` 500, ``isolation.level`` read_uncommitted, ``check.crcs`` true,
``client.rack``), so the ``kafka.*`` options a Spark user already passes mean the same here.

One default differs on purpose: ``max.partition.fetch.bytes`` is 4 MiB, not 1 MiB. A Python
reader pays a fixed cost per response and per decode call that the JVM does not; measured
against a local broker (integration/benchmarks/bench_fetcher.py), 4 MiB responses read a
single partition 30-60 % faster than 1 MiB ones. Memory stays bounded by ``fetch.max.bytes``.

Options that are ours, not the Java consumer's:

* ``fail.on.data.loss`` (true): what to do when requested offsets are gone (Spark's
  ``failOnDataLoss``): raise ``DataLossError``, or skip to the earliest available offset.
* ``fetch.timeout.ms`` (120000, like Spark's ``kafkaConsumer.pollTimeoutMs`` default): how long
  a partition may make no progress (no response, leader unavailable, waiting for offsets that
  are not yet readable) before the read fails with ``KafkaTimeoutError``.
* ``arrow.batch.rows`` (65536): rows per yielded Arrow batch, at most. Smaller pieces are
  joined up to it while more data is already buffered.
* ``include.headers`` (false): add Spark's ``headers`` column.
* ``fetch.max.decompressed.bytes`` (256 MiB): cap on what one partition's compressed batches in
  one response may inflate to (a decompression bomb stops here), legacy wrappers included.
* ``fetch.max.decompressed.response.bytes`` (1 GiB): the same for all partitions of one
  response together, so that many partitions cannot add up to an unbounded total.
* ``decode.threads`` (0): threads that decompress chunks of large zstd or gzip records while
  the calling thread receives the next responses, parses the records of the chunk before and
  hands out Arrow batches (CRC-32C and zstd release the GIL). A chunk goes to them when its
  first batch is zstd or gzip with at least 128 compressed bytes per record; anything else,
  and everything with 0, is decoded in the calling thread. For small records decompression is
  a small share and the hand-off costs more than it saves; lz4 and snappy decompress about 3x
  faster, in calls too short to overlap (their thread waited for the GIL instead). Each thread
  beyond the first allows one more buffered response per broker. One thread takes the calling
  thread's CPU per 1 KB zstd record from about 900 ns to about 500 ns, for about 100 ns more
  CPU in all: it pays where a core is idle (one reader on a machine with cores to spare), not
  where every core is busy (Spark tasks on all executor cores, or 2 cores shared with a
  broker, as measured with integration/benchmarks/bench_fetcher.py), hence 0 by default.
* ``receive.ahead`` (false): while the calling thread decodes a compressed response of 1 MiB
  or more, a second thread receives the responses in flight (``fetch_receive``), so that
  copying them out of the socket (about 1 ms per 4 MiB) overlaps decoding instead of
  following it. Like ``decode.threads`` it pays only where a core is free: reading one
  partition of 1 KB records beside a local broker on 2 cores, 9-22 % faster (lz4) and 8-13 %
  (zstd) at load 1-4, but 4-9 % slower at load 5, for 0-10 % more CPU per record (thread
  hand-offs; integration/benchmarks/bench_fetcher.py), hence off by default.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_ds.client.config import ClientConfig, parse_bool, parse_int
from kafka_ds.protocol.errors import ConfigError
from kafka_ds.protocol.types import IsolationLevel

log = logging.getLogger(__name__)

FETCH_PROPERTIES = frozenset({
    "fetch.min.bytes", "fetch.max.bytes", "fetch.max.wait.ms", "max.partition.fetch.bytes",
    "isolation.level", "check.crcs", "client.rack", "fail.on.data.loss", "fetch.timeout.ms",
    "arrow.batch.rows", "include.headers", "fetch.max.decompressed.bytes", "decode.threads",
    "fetch.max.decompressed.response.bytes", "receive.ahead",
})

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class FetchConfig:
    """How the fetcher asks for data. Picklable (it travels to Spark executors)."""

    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 4 * 1_048_576
    isolation_level: int = IsolationLevel.READ_UNCOMMITTED
    check_crcs: bool = True
    client_rack: str = ""
    fail_on_data_loss: bool = True
    fetch_timeout_ms: int = 120_000
    arrow_batch_rows: int = 65_536
    include_headers: bool = False
    max_decompressed_bytes: int = 256 * 1024 * 1024
    decode_threads: int = 0
    max_decompressed_response_bytes: int = 1024 * 1024 * 1024
    receive_ahead: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        checks = [
            ("fetch.min.bytes", self.fetch_min_bytes, 0, _INT32_MAX),
            ("fetch.max.bytes", self.fetch_max_bytes, 1, _INT32_MAX),
            ("fetch.max.wait.ms", self.fetch_max_wait_ms, 0, _INT32_MAX),
            ("max.partition.fetch.bytes", self.max_partition_fetch_bytes, 1, _INT32_MAX),
            ("fetch.timeout.ms", self.fetch_timeout_ms, 1, None),
            ("arrow.batch.rows", self.arrow_batch_rows, 1, None),
            ("fetch.max.decompressed.bytes", self.max_decompressed_bytes, 1, None),
            ("decode.threads", self.decode_threads, 0, 8),
            ("fetch.max.decompressed.response.bytes", self.max_decompressed_response_bytes,
             1, None),
        ]
        for name, value, low, high in checks:
            if not isinstance(value, int) or value < low or (high is not None and value > high):
                bound = f"between {low} and {high}" if high is not None else f"at least {low}"
                raise ConfigError(f"{name} must be an integer {bound}, got {value!r}")
        if self.isolation_level not in (IsolationLevel.READ_UNCOMMITTED,
                                        IsolationLevel.READ_COMMITTED):
            raise ConfigError(f"isolation.level must be read_uncommitted or read_committed, "
                              f"got {self.isolation_level!r}")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == IsolationLevel.READ_COMMITTED

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> FetchConfig:
        """Read the fetch options (Java names); unknown ones are reported, as the producer does."""
        unknown = ClientConfig.unused_properties(properties, FETCH_PROPERTIES)
        if unknown:
            log.warning("ignoring fetcher properties kafka_ds does not know: %s",
                        ", ".join(unknown))
        isolation = properties.get("isolation.level", "read_uncommitted")
        try:
            isolation_level = IsolationLevel.parse(str(isolation))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            fetch_min_bytes=parse_int(properties, "fetch.min.bytes", 1, minimum=0),
            fetch_max_bytes=parse_int(properties, "fetch.max.bytes", 52_428_800, minimum=1),
            fetch_max_wait_ms=parse_int(properties, "fetch.max.wait.ms", 500, minimum=0),
            max_partition_fetch_bytes=parse_int(properties, "max.partition.fetch.bytes",
                                                4 * 1_048_576, minimum=1),
            isolation_level=isolation_level,
            check_crcs=parse_bool(properties, "check.crcs", True),
            client_rack=str(properties.get("client.rack", "") or ""),
            fail_on_data_loss=parse_bool(properties, "fail.on.data.loss", True),
            fetch_timeout_ms=parse_int(properties, "fetch.timeout.ms", 120_000, minimum=1),
            arrow_batch_rows=parse_int(properties, "arrow.batch.rows", 65_536, minimum=1),
            include_headers=parse_bool(properties, "include.headers", False),
            max_decompressed_bytes=parse_int(properties, "fetch.max.decompressed.bytes",
                                             256 * 1024 * 1024, minimum=1),
            decode_threads=parse_int(properties, "decode.threads", 0, minimum=0),
            max_decompressed_response_bytes=parse_int(
                properties, "fetch.max.decompressed.response.bytes", 1024 * 1024 * 1024,
                minimum=1),
            receive_ahead=parse_bool(properties, "receive.ahead", False),
        )


@dataclass
class FetchMetrics:
    """Counters of one fetcher (cumulative over its reads). Times in nanoseconds."""

    records: int = 0  # rows handed to the caller
    bytes: int = 0  # record bytes received (batches as on the wire)
    fetch_requests: int = 0
    full_requests: int = 0
    incremental_requests: int = 0
    session_resets: int = 0  # FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH ...
    retries: int = 0  # partition errors and lost connections that were retried
    data_loss_incidents: int = 0
    offsets_skipped: int = 0  # offsets jumped over with fail.on.data.loss=false
    fetch_wait_ns: int = 0  # blocked waiting for the network
    decode_ns: int = 0  # decoding and building Arrow batches
    received_ahead: int = 0  # chunks decoded while a helper thread received (receive.ahead)
    per_node_requests: dict[int, int] = field(default_factory=dict)
    # Record bytes received from each broker: where the data came from (KIP-392 reads go to
    # the replica in the client's rack, not the leader).
    per_node_bytes: dict[int, int] = field(default_factory=dict)
    preferred_replica_fallbacks: int = 0  # reads moved back to the leader (KIP-392)

    def as_dict(self) -> dict[str, int]:
        values = {name: value for name, value in vars(self).items()
                  if isinstance(value, int)}
        values["fetch_wait_ms"] = self.fetch_wait_ns // 1_000_000
        values["decode_ms"] = self.decode_ns // 1_000_000
        return values
