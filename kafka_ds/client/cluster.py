"""The cluster as the client sees it: brokers, topics, partition leaders, coordinators.

Layer: client (over ``net.NetworkClient``; never pyspark).

``Cluster`` keeps the last Metadata answer and refreshes it when asked for a topic it does
not know, when a caller reports an error that says the view is stale (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH ...: ``BrokerError.invalid_metadata``), or
when the cache is older than ``metadata.max.age.ms``. A topic-level error in a Metadata
answer is kept per topic (``topic_errors``) and ``topic()`` raises what it means
(``topic_errors`` module): TOPIC_AUTHORIZATION_FAILED is ``TopicAuthorizationError``,
UNKNOWN_TOPIC_OR_PARTITION ``UnknownTopicError`` (retriable: "not known here"), a topic
still being created (LEADER_NOT_AVAILABLE) is waited for; none of them means "deleted".

Requests are routed by kind: partition data to the partition leader, group requests to the
group coordinator, transaction requests to the transaction coordinator (FindCoordinator,
cached until an error says it moved).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeVar

from kafka_ds.client.config import ClientConfig
from kafka_ds.client.topic_errors import TopicAuthorizationError, UnknownTopicError
from kafka_ds.net.broker_conn import BrokerConnection, HandshakeCutError
from kafka_ds.net.pool import NetworkClient
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import (
    BrokerError,
    ErrorCode,
    KafkaDsError,
    KafkaTimeoutError,
    NetworkError,
)
from kafka_ds.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka_ds.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["BrokerInfo", "Cluster", "CoordinatorType", "PartitionInfo", "TopicAuthorizationError",
           "TopicInfo", "UnknownTopicError"]


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader_id: int  # -1 while no leader is elected
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    is_internal: bool = False

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


# The operations an ACL must grant when FindCoordinator is denied (Kafka's authorizer).
_COORDINATOR_ACL_ADVICE: dict[int, str] = {
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "WRITE and DESCRIBE",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "READ and DESCRIBE",
}


class CoordinatorType(IntEnum):
    GROUP = 0
    TRANSACTION = 1


class Cluster:
    """Metadata cache and request routing over one ``NetworkClient``."""

    def __init__(self, client: NetworkClient, *, metadata_max_age_ms: int = 300_000,
                 retry_backoff_ms: int = 100) -> None:
        self.client = client
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        # The error code of the last Metadata answer for each topic that had one.
        self.topic_errors: dict[str, int] = {}
        self._refreshed_at_ms: int | None = None
        self._stale = True
        self._coordinators: dict[tuple[int, str], int] = {}

    @classmethod
    def connect(cls, config: ClientConfig) -> Cluster:
        """A cluster view over a new ``NetworkClient`` (connections open on first use)."""
        client = NetworkClient(config.bootstrap_servers, config.connection)
        return cls(client, metadata_max_age_ms=config.metadata_max_age_ms,
                   retry_backoff_ms=config.retry_backoff_ms)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- metadata -------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Mark the cache stale: the next lookup refreshes it."""
        self._stale = True

    def _is_fresh(self) -> bool:
        if self._stale or self._refreshed_at_ms is None:
            return False
        age_ms = self.client.clock.monotonic_ms() - self._refreshed_at_ms
        return age_ms < self.metadata_max_age_ms

    def refresh(self, topics: Iterable[str] | None = None, timeout_ms: int | None = None) -> None:
        """Fetch metadata for ``topics`` (plus those already cached); None means all topics."""
        wanted = None if topics is None else sorted(set(topics) | set(self.topics))
        response = self.with_any_broker(
            lambda connection: self._metadata(connection.node_id,
                                              connection.version_for(ApiKey.METADATA), wanted,
                                              timeout_ms), timeout_ms)
        self._apply(response, replace_all=wanted is None)

    def with_any_broker(self, call: Callable[[BrokerConnection], T],
                        timeout_ms: int | None = None) -> T:
        """``call(connection)`` on some live connection, for a lookup any broker can answer.

        A connection that breaks under the request, or during its own ApiVersions/SASL
        handshake (a broker restarting, a link cut), is worth another try on a fresh one,
        within ``timeout_ms``, as the Java client retries metadata. A broker that cannot be
        reached at all (refused, unresolvable, timed out) fails at once; so does a failed
        authentication. Fresh connections closed at their first request twice running are a
        listener refusing us (security.protocol or SASL not what it expects): that error,
        which says so, is raised then rather than retried until the timeout.
        """
        timeout = self.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.client.clock.monotonic_ms() + timeout
        refused_in_a_row = 0
        while True:
            connection: BrokerConnection | None = None
            try:
                connection = self.client.any_connection()
                return call(connection)
            except NetworkError as exc:
                if connection is None and not isinstance(exc, HandshakeCutError):
                    raise
                refused = connection is None or connection.responses_received == 0
                refused_in_a_row = refused_in_a_row + 1 if refused else 0
                if refused_in_a_row >= 2 or \
                        self.client.clock.monotonic_ms() + self.retry_backoff_ms >= deadline_ms:
                    raise
                log.info("lookup failed, retrying on a fresh connection: %s", exc)
                # Back off, polling: other requests on this client keep moving meanwhile.
                self.client.poll_until(lambda: False, self.retry_backoff_ms)

    def _metadata(self, node_id: int, version: int, wanted: list[str] | None,
                  timeout_ms: int | None) -> MetadataResponse:
        request_topics: list[MetadataRequestTopic] | None
        if wanted is None:
            request_topics = None if version >= 1 else []
        else:
            request_topics = [MetadataRequestTopic(name=name) for name in wanted]
        request = MetadataRequest(topics=request_topics, allow_auto_topic_creation=False)
        response: MetadataResponse = self.client.request(node_id, request,
                                                         timeout_ms=timeout_ms, version=version)
        return response

    def known_by_any_broker(self, name: str, timeout_ms: int | None = None) -> bool | None:
        """Does any live broker know topic ``name``? None when none could be asked.

        A broker whose metadata lags may not know a topic created a moment ago, but none
        forgets one that exists: if every broker says UNKNOWN_TOPIC_OR_PARTITION, a topic
        seen before was deleted. (Asks each broker once: for that rare decision only.)"""
        answered = False
        for node_id in sorted(self.brokers):
            try:
                connection = self.client.connection(node_id)
                response = self._metadata(node_id, connection.version_for(ApiKey.METADATA),
                                          [name], timeout_ms)
            except KafkaDsError as exc:
                log.debug("asking broker %s about topic %r: %s", node_id, name, exc)
                continue
            for topic in response.topics:
                if topic.name != name:
                    continue
                if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return True  # known (or at least not unknown: not authorised, ...)
                answered = True
        return False if answered else None

    def _apply(self, response: MetadataResponse, replace_all: bool) -> None:
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack)
                        for b in response.brokers}
        self.client.set_nodes({b.node_id: (b.host, b.port) for b in response.brokers})
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        topics = {} if replace_all else dict(self.topics)
        for topic in response.topics:
            if topic.name is None:
                continue
            if topic.error_code:
                # Unknown, unauthorised or still-being-created topics must not linger in the
                # cache; what the error was is kept for ``topic()`` to explain.
                topics.pop(topic.name, None)
                self.topic_errors[topic.name] = topic.error_code
                if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    log.debug("metadata for %s: error %s", topic.name, topic.error_code)
                continue
            self.topic_errors.pop(topic.name, None)
            partitions = {
                p.partition_index: PartitionInfo(
                    topic.name, p.partition_index, p.leader_id, p.leader_epoch,
                    tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
                for p in topic.partitions
            }
            topics[topic.name] = TopicInfo(topic.name, topic.topic_id, partitions,
                                           topic.is_internal)
        self.topics = topics
        self.topics_by_id = {info.topic_id: info for info in topics.values()}
        self._refreshed_at_ms = self.client.clock.monotonic_ms()
        self._stale = False

    def topic(self, name: str, timeout_ms: int | None = None) -> TopicInfo:
        """Metadata of ``name``, refreshing when needed; ``UnknownTopicError`` if absent.

        Waits (within ``timeout_ms``) for every partition to have a leader: a topic that was
        just created, or whose leader just moved, briefly has none.
        """
        timeout = self.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.client.clock.monotonic_ms() + timeout
        while True:
            info = self.topics.get(name)
            if info is not None and self._is_fresh() and all(
                    p.leader_id >= 0 for p in info.partitions.values()):
                return info
            self.refresh([name], timeout_ms=timeout)
            info = self.topics.get(name)
            if info is None:
                error = self.topic_error(name)
                if not error.retriable or isinstance(error, UnknownTopicError):
                    raise error
                if self.client.clock.monotonic_ms() >= deadline_ms:
                    raise KafkaTimeoutError(f"metadata of topic {name!r} still says {error.name}"
                                            f" after {timeout} ms") from error
            elif all(p.leader_id >= 0 for p in info.partitions.values()):
                return info
            elif self.client.clock.monotonic_ms() >= deadline_ms:
                missing = sorted(p.partition for p in info.partitions.values() if p.leader_id < 0)
                raise KafkaTimeoutError(f"partitions {missing} of {name!r} have no leader after "
                                        f"{timeout} ms")
            self.client.clock.sleep_ms(self.retry_backoff_ms)

    def topic_error(self, name: str) -> BrokerError:
        """The error for a topic the last Metadata answer did not describe."""
        code = self.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            return TopicAuthorizationError(name, self.principal, "metadata")
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return UnknownTopicError(name)
        return BrokerError(code, f"metadata of topic {name!r}")

    @property
    def principal(self) -> str | None:
        """``User:<name>`` for SASL PLAIN/SCRAM (the broker's default principal); else None
        (TLS or OAUTHBEARER identities are the broker's to decide)."""
        sasl = self.client.config.sasl
        if sasl is not None and sasl.username and sasl.mechanism != "OAUTHBEARER":
            return f"User:{sasl.username}"
        return None

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self.topic(topic).partitions)

    def leader_for(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``-``partition`` (refreshing if we know none)."""
        info = self.topic(topic)
        partition_info = info.partitions.get(partition)
        if partition_info is None:
            self.invalidate()
            info = self.topic(topic)
            partition_info = info.partitions.get(partition)
            if partition_info is None:
                raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"{topic} has no partition {partition} "
                                  f"(it has {info.partition_count})")
        return partition_info.leader_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.topic(topic).partitions[partition].leader_epoch

    # --- coordinators ---------------------------------------------------------------------

    def coordinator(self, key_type: CoordinatorType, key: str,
                    timeout_ms: int | None = None) -> int:
        """Node id of the coordinator of group/transactional id ``key`` (cached)."""
        cached = self._cached_coordinator(key_type, key)
        if cached is not None:
            return cached
        timeout = self.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.client.clock.monotonic_ms() + timeout
        while True:
            error = self._find_coordinator(key_type, key, timeout)
            if error is None:
                return self._coordinators[(key_type, key)]
            if not error.retriable or self.client.clock.monotonic_ms() >= deadline_ms:
                raise error
            self.client.clock.sleep_ms(self.retry_backoff_ms)

    def coordinators(self, key_type: CoordinatorType, keys: Iterable[str],
                     timeout_ms: int | None = None) -> dict[str, int]:
        """Node ids of the coordinators of many keys (cached), those not cached looked up in
        one FindCoordinator when the broker takes several keys (v4+, KIP-699): a commit of
        N transactions waits for one round trip here, not N in a row."""
        wanted = list(dict.fromkeys(keys))
        self.look_up_coordinators(key_type, wanted, timeout_ms)
        # What the batch did not settle (errors, a broker before v4) goes one key at a time,
        # with that path's retries and error messages.
        return {key: self.coordinator(key_type, key, timeout_ms) for key in wanted}

    def look_up_coordinators(self, key_type: CoordinatorType, keys: Iterable[str],
                             timeout_ms: int | None = None) -> None:
        """Fill the cache for the keys not in it with one FindCoordinator (v4+), when more
        than one is missing; never raises and never retries: what it leaves out, ``coordinator``
        looks up on its own later (a caller that asks key by key anyway warms the cache with
        this, without waiting out a failing lookup twice)."""
        missing = [key for key in dict.fromkeys(keys)
                   if self._cached_coordinator(key_type, key) is None]
        if len(missing) < 2:
            return
        timeout = self.client.config.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            self._find_coordinators(key_type, missing, timeout)
        except KafkaDsError as exc:
            log.debug("batched FindCoordinator failed (asking key by key): %s", exc)

    def _cached_coordinator(self, key_type: CoordinatorType, key: str) -> int | None:
        cached = self._coordinators.get((key_type, key))
        # A coordinator on a broker that metadata no longer lists is looked up again. Before
        # the first Metadata answer there is no list to check against: the node that
        # FindCoordinator named (and registered) stands.
        if cached is not None and (cached in self.brokers or not self.brokers):
            return cached
        return None

    def _find_coordinators(self, key_type: CoordinatorType, keys: list[str],
                           timeout_ms: int) -> None:
        def ask(connection: BrokerConnection) -> FindCoordinatorResponse | None:
            version = connection.version_for(ApiKey.FIND_COORDINATOR)
            if version < 4:
                return None
            return self.client.request(
                connection.node_id, FindCoordinatorRequest(key_type=key_type,
                                                           coordinator_keys=keys),
                timeout_ms=timeout_ms, version=version)

        response = self.with_any_broker(ask, timeout_ms)
        for entry in response.coordinators if response is not None else ():
            if not entry.error_code and entry.key in keys:
                self._remember_coordinator(key_type, entry.key, entry.node_id, entry.host,
                                           entry.port)

    def _find_coordinator(self, key_type: CoordinatorType, key: str,
                          timeout_ms: int) -> BrokerError | None:
        def ask(connection: BrokerConnection) -> tuple[int, FindCoordinatorResponse]:
            version = connection.version_for(ApiKey.FIND_COORDINATOR)
            if version >= 4:
                request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            else:
                request = FindCoordinatorRequest(key=key, key_type=key_type)
            return version, self.client.request(connection.node_id, request,
                                                timeout_ms=timeout_ms, version=version)

        version, response = self.with_any_broker(ask, timeout_ms)
        if version >= 4:
            entry = response.coordinators[0]
            code, message, node = entry.error_code, entry.error_message, (
                entry.node_id, entry.host, entry.port)
        else:
            code, message, node = response.error_code, response.error_message, (
                response.node_id, response.host, response.port)
        what = "transactional id" if key_type == CoordinatorType.TRANSACTION else "group"
        if code in _COORDINATOR_ACL_ADVICE:
            # The broker does not say who was denied: name the principal we logged in as.
            who = self.principal or "this client"
            return BrokerError(code, f"finding the coordinator of {what} {key!r} as {who}",
                               message or f"an ACL must allow {who} "
                                          f"{_COORDINATOR_ACL_ADVICE[code]} on {what} {key!r}")
        if code:
            return BrokerError(code, f"finding the coordinator of {what} {key!r}", message)
        self._remember_coordinator(key_type, key, *node)
        return None

    def _remember_coordinator(self, key_type: CoordinatorType, key: str, node_id: int,
                              host: str, port: int) -> None:
        if node_id not in self.brokers:
            known = self.client.known_nodes()
            known[node_id] = (host, port)
            self.client.set_nodes(known)
        self._coordinators[(key_type, key)] = node_id

    def forget_coordinator(self, key_type: CoordinatorType, key: str) -> None:
        """Drop a cached coordinator (after NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE)."""
        self._coordinators.pop((key_type, key), None)

