"""Administrative calls: create/delete topics, add partitions, delete records, read configs.

Layer: client.

Used by tests, examples and the sink's checks, not on any hot path. Topic-level calls go to
any broker: in KRaft mode brokers forward them to the active controller. DeleteRecords goes
to each partition's leader. Every call raises ``BrokerError`` naming the topic on failure;
``create_topic`` then waits until metadata shows a leader for every partition, so that a
caller can produce at once.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_ds.client.cluster import Cluster, CoordinatorType, TopicInfo
from kafka_ds.client.config import ClientConfig
from kafka_ds.net.future import RequestFuture
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import BrokerError, ErrorCode, KafkaTimeoutError
from kafka_ds.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
)
from kafka_ds.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from kafka_ds.protocol.messages.delete_records import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopic,
)
from kafka_ds.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
)
from kafka_ds.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from kafka_ds.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from kafka_ds.protocol.messages.describe_transactions import (
    TransactionState as DescribedTransaction,
)
from kafka_ds.protocol.messages.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka_ds.protocol.types import TopicPartition

_TOPIC_RESOURCE = 2  # DescribeConfigs resource type of a topic
_BROKER_RESOURCE = 4  # ... and of a broker


@dataclass(frozen=True)
class ListedTransaction:
    """One transactional id a coordinator reports (ListTransactions)."""

    transactional_id: str
    producer_id: int
    state: str  # "Ongoing", "PrepareCommit", "CompleteAbort", ...


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 partitions / replication factor means the broker's default."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


class Admin:
    """Admin operations over a ``Cluster`` (which it does not own unless built here)."""

    def __init__(self, cluster: Cluster, *, owns_cluster: bool = False) -> None:
        self.cluster = cluster
        self._owns_cluster = owns_cluster

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> Admin:
        return cls(Cluster.connect(ClientConfig.from_properties(properties)), owns_cluster=True)

    def close(self) -> None:
        if self._owns_cluster:
            self.cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _any_node(self, api_key: int) -> tuple[int, int]:
        # A connection cut during its handshake is retried on a fresh one (a lookup).
        return self.cluster.with_any_broker(
            lambda connection: (connection.node_id, connection.version_for(api_key)))

    # --- topics ---------------------------------------------------------------------------

    def create_topics(self, topics: Iterable[NewTopic], *, timeout_ms: int = 60_000,
                      exist_ok: bool = False, validate_only: bool = False) -> None:
        """Create ``topics``; with ``exist_ok`` an existing topic is not an error."""
        wanted = list(topics)
        node_id, version = self._any_node(ApiKey.CREATE_TOPICS)
        request = CreateTopicsRequest(
            topics=[CreatableTopic(
                name=topic.name, num_partitions=topic.partitions,
                replication_factor=topic.replication_factor,
                configs=[CreatableTopicConfig(name=key, value=str(value))
                         for key, value in topic.config.items()])
                for topic in wanted],
            timeout_ms=timeout_ms, validate_only=validate_only)
        response: CreateTopicsResponse = self.cluster.client.request(
            node_id, request, timeout_ms=timeout_ms + 5_000, version=version)
        for result in response.topics:
            if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
                continue
            if result.error_code:
                raise BrokerError(result.error_code, f"creating topic {result.name!r}",
                                  result.error_message)
        if not validate_only:
            self.cluster.invalidate()
            for topic in wanted:
                self._wait_for_topic(topic.name, timeout_ms)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     config: Mapping[str, str] | None = None, *, timeout_ms: int = 60_000,
                     exist_ok: bool = False) -> TopicInfo:
        """Create one topic and return its metadata once every partition has a leader."""
        self.create_topics([NewTopic(name, partitions, replication_factor, dict(config or {}))],
                           timeout_ms=timeout_ms, exist_ok=exist_ok)
        return self.cluster.topic(name)

    def _wait_until(self, done: Callable[[], bool], timeout_ms: int, failure: str) -> None:
        """Poll metadata until ``done()``: a broker's metadata may lag the controller a moment."""
        clock = self.cluster.client.clock
        deadline_ms = clock.monotonic_ms() + timeout_ms
        while not done():
            if clock.monotonic_ms() >= deadline_ms:
                raise KafkaTimeoutError(f"{failure} within {timeout_ms} ms")
            clock.sleep_ms(self.cluster.retry_backoff_ms)

    def _wait_for_topic(self, name: str, timeout_ms: int) -> None:
        def visible() -> bool:
            try:
                self.cluster.topic(name, timeout_ms=timeout_ms)
            except BrokerError as exc:
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
                return False
            return True

        self._wait_until(visible, timeout_ms,
                         f"topic {name!r} was created but did not appear in metadata")

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 60_000,
                      missing_ok: bool = False) -> None:
        wanted = list(names)
        node_id, version = self._any_node(ApiKey.DELETE_TOPICS)
        if version >= 6:
            request = DeleteTopicsRequest(topics=[DeleteTopicState(name=name) for name in wanted],
                                          timeout_ms=timeout_ms)
        else:
            request = DeleteTopicsRequest(topic_names=wanted, timeout_ms=timeout_ms)
        response: DeleteTopicsResponse = self.cluster.client.request(
            node_id, request, timeout_ms=timeout_ms + 5_000, version=version)
        for result in response.responses:
            if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and missing_ok:
                continue
            if result.error_code:
                raise BrokerError(result.error_code, f"deleting topic {result.name!r}",
                                  result.error_message)
        self._wait_for_deletion(wanted, timeout_ms)

    def _wait_for_deletion(self, names: list[str], timeout_ms: int) -> None:
        # Return only once metadata no longer lists the topics, so that a caller recreating
        # or looking for them sees a consistent cluster.
        def gone() -> bool:
            for name in names:
                self.cluster.topics.pop(name, None)
            self.cluster.refresh(names)
            return not any(name in self.cluster.topics for name in names)

        self._wait_until(gone, timeout_ms,
                         f"topics {names} were deleted but still appear in metadata")

    def create_partitions(self, topic: str, total_count: int, *,
                          timeout_ms: int = 60_000) -> None:
        """Grow ``topic`` to ``total_count`` partitions; returns once metadata lists them all."""
        node_id, version = self._any_node(ApiKey.CREATE_PARTITIONS)
        request = CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=topic, count=total_count, assignments=None)],
            timeout_ms=timeout_ms, validate_only=False)
        response: CreatePartitionsResponse = self.cluster.client.request(
            node_id, request, timeout_ms=timeout_ms + 5_000, version=version)
        for result in response.results:
            if result.error_code:
                raise BrokerError(result.error_code,
                                  f"growing {result.name!r} to {total_count} partitions",
                                  result.error_message)

        def grown() -> bool:
            self.cluster.invalidate()
            return self.cluster.topic(topic, timeout_ms=timeout_ms).partition_count >= total_count

        self._wait_until(grown, timeout_ms,
                         f"{topic!r} was grown to {total_count} partitions but metadata did not "
                         "show them")

    # --- records and configs --------------------------------------------------------------

    def delete_records(self, before_offsets: Mapping[TopicPartition, int], *,
                       timeout_ms: int = 60_000) -> dict[TopicPartition, int]:
        """Delete records below each offset (-1: up to the high watermark).

        Returns each partition's new low watermark (log start offset).
        """
        by_leader: dict[int, dict[str, list[DeleteRecordsPartition]]] = defaultdict(
            lambda: defaultdict(list))
        for tp, offset in before_offsets.items():
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            by_leader[leader][tp.topic].append(
                DeleteRecordsPartition(partition_index=tp.partition, offset=offset))
        client = self.cluster.client
        futures: list[RequestFuture[Any]] = []
        for leader, topics in by_leader.items():
            request = DeleteRecordsRequest(
                topics=[DeleteRecordsTopic(name=name, partitions=parts)
                        for name, parts in topics.items()],
                timeout_ms=timeout_ms)
            futures.append(client.send(leader, request, timeout_ms=timeout_ms + 5_000))
        client.poll_until(lambda: all(future.done() for future in futures), timeout_ms + 5_000)
        low_watermarks: dict[TopicPartition, int] = {}
        for future in futures:
            if not future.done():
                raise KafkaTimeoutError(f"DeleteRecords did not complete in {timeout_ms} ms")
            response: DeleteRecordsResponse = future.result()
            for topic in response.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    if part.error_code:
                        raise BrokerError(part.error_code, f"deleting records of {tp}")
                    low_watermarks[tp] = part.low_watermark
        return low_watermarks

    def describe_topic_config(self, topic: str, *,
                              timeout_ms: int = 30_000) -> dict[str, str | None]:
        """The effective configuration of ``topic`` (name -> value; secrets come back None)."""
        node_id, version = self._any_node(ApiKey.DESCRIBE_CONFIGS)
        request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=_TOPIC_RESOURCE, resource_name=topic, configuration_keys=None)])
        response: DescribeConfigsResponse = self.cluster.client.request(
            node_id, request, timeout_ms=timeout_ms, version=version)
        result = response.results[0]
        if result.error_code:
            raise BrokerError(result.error_code, f"describing the configuration of {topic!r}",
                              result.error_message)
        return {entry.name: entry.value for entry in result.configs}

    def describe_broker_config(self, node_id: int | None = None, *,
                               timeout_ms: int = 30_000) -> dict[str, str | None]:
        """The effective configuration of a broker (any one when ``node_id`` is None).

        Needs DESCRIBE_CONFIGS on the cluster; ``BrokerError`` (CLUSTER_AUTHORIZATION_FAILED)
        otherwise.
        """
        if node_id is None:
            if not self.cluster.brokers:
                self.cluster.refresh([])
            node_id = min(self.cluster.brokers)
        version = self.cluster.client.connection(node_id).version_for(ApiKey.DESCRIBE_CONFIGS)
        request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=_BROKER_RESOURCE, resource_name=str(node_id), configuration_keys=None)])
        response: DescribeConfigsResponse = self.cluster.client.request(
            node_id, request, timeout_ms=timeout_ms, version=version)
        result = response.results[0]
        if result.error_code:
            raise BrokerError(result.error_code, f"describing the configuration of broker "
                              f"{node_id}", result.error_message)
        return {entry.name: entry.value for entry in result.configs}

    # --- transactions ---------------------------------------------------------------------

    def list_transactions(self, *, states: Iterable[str] = (), id_pattern: str | None = None,
                          timeout_ms: int = 30_000) -> list[ListedTransaction]:
        """Transactional ids known to the coordinators, in ``states`` (all when empty).

        Every broker coordinates part of the ids, so every broker is asked. ``id_pattern``
        (a Java regular expression) filters on the broker when it supports ListTransactions
        v2 (KIP-1152, Kafka 4.1+); callers filter the result again for older brokers.
        Needs DESCRIBE on each transactional id: others are silently left out.
        """
        self.cluster.refresh()
        client = self.cluster.client
        futures: list[tuple[int, RequestFuture[Any]]] = []
        for node_id in sorted(self.cluster.brokers):
            version = client.connection(node_id).version_for(ApiKey.LIST_TRANSACTIONS)
            request = ListTransactionsRequest(
                state_filters=list(states), producer_id_filters=[],
                transactional_id_pattern=id_pattern if version >= 2 else None)
            futures.append((node_id, client.send(node_id, request, version,
                                                 timeout_ms=timeout_ms)))
        client.poll_until(functools.partial(_all_done, [f for _, f in futures]), timeout_ms)
        listed: list[ListedTransaction] = []
        for node_id, future in futures:
            if not future.done():
                raise KafkaTimeoutError(f"ListTransactions on broker {node_id} did not "
                                        f"complete in {timeout_ms} ms")
            response: ListTransactionsResponse = future.result()
            if response.error_code:
                raise BrokerError(response.error_code, f"listing transactions on broker "
                                  f"{node_id}")
            listed.extend(ListedTransaction(state.transactional_id, state.producer_id,
                                            state.transaction_state)
                          for state in response.transaction_states)
        return listed

    def describe_transactions(self, transactional_ids: Iterable[str], *,
                              timeout_ms: int = 30_000) -> dict[str, DescribedTransaction]:
        """Each id's state at its coordinator (one request per coordinator, in parallel).

        An id the coordinator does not know comes back with error_code
        TRANSACTIONAL_ID_NOT_FOUND; coordinator moves are retried within ``timeout_ms``.
        """
        pending = sorted(set(transactional_ids))
        clock = self.cluster.client.clock
        deadline_ms = clock.monotonic_ms() + timeout_ms
        described: dict[str, DescribedTransaction] = {}
        while pending:
            sent = self._send_describe(pending, timeout_ms)
            pending = sorted(set(self._collect_described(sent, timeout_ms, described)))
            if pending:
                if clock.monotonic_ms() >= deadline_ms:
                    raise KafkaTimeoutError(f"DescribeTransactions for {pending} did not "
                                            f"succeed within {timeout_ms} ms")
                for transactional_id in pending:
                    self.cluster.forget_coordinator(CoordinatorType.TRANSACTION,
                                                    transactional_id)
                clock.sleep_ms(self.cluster.retry_backoff_ms)
        return described

    def start_describe_transactions(self, transactional_ids: Iterable[str], *,
                                    timeout_ms: int = 30_000
                                    ) -> Callable[[], dict[str, DescribedTransaction]]:
        """``describe_transactions`` in two halves: the requests go out now, and the call
        returned collects the answers (retrying what needs it), so that other requests on
        this cluster can run in between."""
        wanted = sorted(set(transactional_ids))
        sent = self._send_describe(wanted, timeout_ms)

        def collect() -> dict[str, DescribedTransaction]:
            described: dict[str, DescribedTransaction] = {}
            retry = self._collect_described(sent, timeout_ms, described)
            if retry:
                for transactional_id in retry:
                    self.cluster.forget_coordinator(CoordinatorType.TRANSACTION,
                                                    transactional_id)
                described.update(self.describe_transactions(retry, timeout_ms=timeout_ms))
            return described

        return collect

    def _send_describe(self, transactional_ids: list[str], timeout_ms: int
                       ) -> list[tuple[list[str], RequestFuture[Any]]]:
        by_node: dict[int, list[str]] = defaultdict(list)
        nodes = self.cluster.coordinators(CoordinatorType.TRANSACTION, transactional_ids,
                                          timeout_ms=timeout_ms)
        for transactional_id in transactional_ids:
            by_node[nodes[transactional_id]].append(transactional_id)
        client = self.cluster.client
        return [(ids, client.send(node_id, DescribeTransactionsRequest(transactional_ids=ids),
                                  timeout_ms=timeout_ms))
                for node_id, ids in by_node.items()]

    def _collect_described(self, sent: list[tuple[list[str], RequestFuture[Any]]],
                           timeout_ms: int, described: dict[str, DescribedTransaction]
                           ) -> list[str]:
        """Wait for the answers of ``_send_describe`` into ``described``; returns the ids to
        ask again (no answer, or a retriable error such as a moved coordinator)."""
        self.cluster.client.poll_until(functools.partial(_all_done, [f for _, f in sent]),
                                       timeout_ms)
        retry: list[str] = []
        for ids, future in sent:
            if not future.done() or future.failed():
                retry.extend(ids)
                continue
            response: DescribeTransactionsResponse = future.result()
            for state in response.transaction_states:
                code = state.error_code
                if code and BrokerError(code).retriable:
                    self.cluster.forget_coordinator(CoordinatorType.TRANSACTION,
                                                    state.transactional_id)
                    retry.append(state.transactional_id)
                elif code and code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise BrokerError(code, "describing transactional id "
                                      f"{state.transactional_id!r}")
                else:
                    described[state.transactional_id] = state
        return retry


def _all_done(futures: list[RequestFuture[Any]]) -> bool:
    return all(future.done() for future in futures)
