"""The driver's view of Kafka: which partitions the query reads, and their offsets.

One ``OffsetReader`` per reader object on Spark's planner side, holding one cluster connection
for the life of the query (opened on first use, closed by ``close``). It never reads records.

* Partitions: ``subscribe`` lists the named topics' partitions, ``subscribePattern`` every
  non-internal topic whose name the regular expression *finds* (an unanchored search, as Java's
  ``Matcher.find``), ``assign`` the named partitions that exist. A topic named by ``subscribe``
  or ``assign`` that the cluster does not have is reported by ``missing_topics``, so that the
  source can say "does not exist" at query start instead of failing later with a misleading
  data-loss error. One that goes missing later fails the lookup (``TopicGoneError``, retried
  as any lookup), as the JVM connector's describeTopics does, rather than being left out.
* Offsets: ListOffsets at the configured ``kafka.isolation.level``, so that under
  read_committed "latest" is the last stable offset and no batch plans past an open
  transaction.
* Retries, as the JVM connector: a lookup that fails is retried ``fetchOffset.numRetries``
  times, ``fetchOffset.retryIntervalMs`` apart, finding the partitions again each time. Latest
  offsets below offsets already known (a broker answering from a stale replica, KAFKA-7703) are
  asked again the same number of times before they are believed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kafka_ds.client import offsets as lookup
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.protocol.errors import (
    AuthenticationError,
    BrokerError,
    ConfigError,
    ErrorCode,
    KafkaDsError,
)
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.errors import (
    TopicGoneError,
    TopicNotFoundError,
    start_offsets_do_not_match,
)
from kafka_ds.spark.offsets_json import EARLIEST, LATEST, OffsetMap
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.source_options import (
    ASSIGN,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    OffsetLimit,
    SourceOptions,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class OffsetReader:
    """Partition discovery and offset lookups for one source (driver side)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cluster: Cluster | None = None
        self._pattern = re.compile(options.pattern) if options.pattern else None

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster.connect(ClientConfig.from_properties(self.options.client))
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # --- retries -----------------------------------------------------------------------------

    def _with_retries(self, what: str, body: Callable[[], T]) -> T:
        attempts = self.options.fetch_offset_num_retries
        for attempt in range(1, attempts + 1):
            try:
                return body()
            except (KafkaOptionError, AuthenticationError, ConfigError):
                raise  # the user's to fix: asking again changes nothing
            except KafkaDsError as exc:
                if isinstance(exc, BrokerError) and not exc.retriable and not (
                        exc.invalid_metadata):
                    raise
                if attempt == attempts:
                    raise
                log.warning("attempt %d of %d at %s failed: %s; retrying in %d ms", attempt,
                            attempts, what, exc, self.options.fetch_offset_retry_interval_ms)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
                self.close()  # start again from a fresh view (Spark resets its admin too)
        raise AssertionError("unreachable")

    # --- partitions --------------------------------------------------------------------------

    def _named_topics(self) -> list[str]:
        if self.options.strategy == SUBSCRIBE:
            return list(self.options.topics)
        return sorted({tp.topic for tp in self.options.assigned})

    def _discover(self) -> list[TopicPartition]:
        cluster = self.cluster
        strategy = self.options.strategy
        if strategy == SUBSCRIBE_PATTERN:
            cluster.refresh(None)
            assert self._pattern is not None
            topics = [info for name, info in cluster.topics.items()
                      if not info.is_internal and self._pattern.search(name)]
            return sorted(TopicPartition(info.name, p) for info in topics
                          for p in info.partitions)
        names = self._named_topics()
        cluster.refresh(names)
        gone = [name for name in names if name not in cluster.topics]
        if gone:
            # Leaving it out would read as "its partitions were deleted": with
            # failOnDataLoss=false the query would go on without it, and read it all again
            # from earliest once a broker lists it again.
            self._raise_if_denied(gone)
            raise TopicGoneError(gone, "subscribe" if strategy == SUBSCRIBE else "assign")
        found = [cluster.topics[name] for name in names]
        partitions = sorted(TopicPartition(info.name, p) for info in found
                            if not info.is_internal for p in info.partitions)
        if strategy == ASSIGN:
            wanted = set(self.options.assigned)
            partitions = [tp for tp in partitions if tp in wanted]
        return partitions

    def partitions(self) -> list[TopicPartition]:
        """The partitions the query reads now (sorted)."""
        return self._with_retries("finding the partitions to read", self._discover)

    def missing_topics(self) -> list[str]:
        """Topics named by ``subscribe`` / ``assign`` that the cluster does not have."""
        if self.options.strategy == SUBSCRIBE_PATTERN:
            return []

        def find() -> list[str]:
            names = self._named_topics()
            self.cluster.refresh(names)
            return [name for name in names if name not in self.cluster.topics]

        return self._with_retries("looking up topics", find)

    def check_topics_exist(self, known: Iterable[TopicPartition] = ()) -> None:
        """Raise ``TopicNotFoundError`` for named topics that neither exist nor were read
        before (a topic in ``known`` that is gone now was deleted: data loss, not a typo)."""
        known_topics = {tp.topic for tp in known}
        missing = [name for name in self.missing_topics() if name not in known_topics]
        for _ in range(1, self.options.fetch_offset_num_retries):
            self._raise_if_denied(missing)
            if not missing:
                break
            # Ask again before failing: a topic created a moment ago can still answer
            # LEADER_NOT_AVAILABLE, which metadata does not tell apart from "no such topic".
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
            missing = [name for name in self.missing_topics() if name not in known_topics]
        self._raise_if_denied(missing)
        if missing:
            option = "subscribe" if self.options.strategy == SUBSCRIBE else "assign"
            raise TopicNotFoundError(missing, option)

    def _raise_if_denied(self, missing: list[str]) -> None:
        """A topic the principal may not describe is missing from Metadata too: say that it
        is denied (naming topic and principal), not that it does not exist."""
        for name in missing:
            if self.cluster.topic_errors.get(name) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                raise self.cluster.topic_error(name)

    def leaders(self) -> dict[TopicPartition, int]:
        """The leader node of each partition, as last seen in metadata (-1 unknown)."""
        cluster = self.cluster
        return {TopicPartition(info.name, p.partition): p.leader_id
                for info in cluster.topics.values() for p in info.partitions.values()}

    # --- offsets -----------------------------------------------------------------------------

    def _list(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not targets:
            return {}
        answers = lookup.list_offsets(self.cluster, targets,
                                      isolation_level=self.options.isolation_level)
        return {tp: answer.offset for tp, answer in answers.items()}

    def latest(self, known: Mapping[TopicPartition, int] | None = None) -> OffsetMap:
        """Latest offsets (LSO under read_committed) of every partition read now."""
        def fetch() -> OffsetMap:
            partitions = self._discover()
            latest = self._list(dict.fromkeys(partitions, lookup.LATEST))
            for attempt in range(1, self.options.fetch_offset_num_retries + 1):
                behind = sorted(tp for tp, offset in latest.items()
                                if known is not None and known.get(tp, -1) > offset)
                if not behind or attempt == self.options.fetch_offset_num_retries:
                    break
                log.warning("latest offsets went back for %s (known: %s, fetched: %s); asking "
                            "again", ", ".join(map(str, behind)),
                            [known[tp] for tp in behind] if known else [],
                            [latest[tp] for tp in behind])
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
                latest = self._list(dict.fromkeys(partitions, lookup.LATEST))
            return latest

        return self._with_retries("looking up latest offsets", fetch)

    def earliest(self, partitions: Iterable[TopicPartition]) -> OffsetMap:
        """Earliest offsets of those of ``partitions`` that still exist (others are left out)."""
        wanted = set(partitions)
        if not wanted:
            return {}

        def fetch() -> OffsetMap:
            existing = [tp for tp in self._discover() if tp in wanted]
            return self._list(dict.fromkeys(existing, lookup.EARLIEST))

        return self._with_retries("looking up earliest offsets", fetch)

    def resolve(self, limit: OffsetLimit, partitions: list[TopicPartition], *,
                starting: bool, keep_latest: bool) -> OffsetMap:
        """Offsets for ``partitions`` from a starting or ending ``limit``.

        With ``keep_latest`` a "latest" start stays the sentinel -1 (resolved when a batch is
        planned: see ``source``); everything else becomes a concrete offset.
        """
        if limit.kind == "earliest":
            wanted = dict.fromkeys(partitions, EARLIEST)
        elif limit.kind == "latest":
            wanted = dict.fromkeys(partitions, LATEST)
        elif limit.kind == "offsets":
            wanted = dict(limit.offsets)
            for topic, sentinel in limit.topic_sentinels.items():
                wanted.update({tp: sentinel for tp in partitions if tp.topic == topic})
            if set(wanted) != set(partitions):
                raise start_offsets_do_not_match(limit.option, wanted, partitions,
                                                 timestamps=False)
        else:
            return self._by_timestamp(limit, partitions, starting=starting,
                                      keep_latest=keep_latest)
        return self._resolve_sentinels(wanted, keep_latest=keep_latest)

    def _resolve_sentinels(self, wanted: Mapping[TopicPartition, int], *,
                           keep_latest: bool) -> OffsetMap:
        def fetch() -> OffsetMap:
            targets = {tp: offset for tp, offset in wanted.items()
                       if offset == EARLIEST or (offset == LATEST and not keep_latest)}
            found = self._list(targets)
            return {tp: found.get(tp, offset) for tp, offset in wanted.items()}

        return self._with_retries("looking up offsets", fetch)

    def _by_timestamp(self, limit: OffsetLimit, partitions: list[TopicPartition], *,
                      starting: bool, keep_latest: bool) -> OffsetMap:
        if limit.kind == "timestamps":
            if set(limit.offsets) != set(partitions):
                raise start_offsets_do_not_match(limit.option, limit.offsets, partitions,
                                                 timestamps=True)
            timestamps = dict(limit.offsets)
        else:
            assert limit.timestamp_ms is not None
            timestamps = dict.fromkeys(partitions, limit.timestamp_ms)

        def fetch() -> OffsetMap:
            found = lookup.offsets_for_times(self.cluster, timestamps,
                                             isolation_level=self.options.isolation_level)
            resolved: OffsetMap = {}
            for tp in sorted(timestamps):
                offset = found.get(tp)
                if offset is not None:
                    resolved[tp] = offset
                elif starting and not limit.no_match_latest:
                    raise KafkaOptionError(
                        f"option '{limit.option}': no offset matched the timestamp "
                        f"{timestamps[tp]} in {tp} (no record at or after it). Set "
                        "startingOffsetsByTimestampStrategy to 'latest' to start such "
                        "partitions at their latest offset instead")
                else:
                    resolved[tp] = LATEST
            return resolved

        resolved = self._with_retries("looking up offsets by timestamp", fetch)
        return self._resolve_sentinels(resolved, keep_latest=keep_latest)
