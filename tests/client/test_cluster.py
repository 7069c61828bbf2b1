"""The cluster view's decisions, without a broker: what a topic-level Metadata error means.

Metadata answers are fed to ``Cluster`` as ``refresh`` would get them; no connection is made
(``NetworkClient`` connects lazily). Issue 14, bug 4: only "unknown" may ever lead to
"deleted", and only in the fetcher, once a topic seen before is unknown everywhere.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ds.client.cluster import Cluster, CoordinatorType
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.topic_errors import (
    TopicAuthorizationError,
    TopicDeletedError,
    UnknownTopicError,
)
from kafka_ds.net.pool import NetworkClient
from kafka_ds.protocol.errors import (
    BrokerError,
    DataLossError,
    ErrorCode,
    KafkaTimeoutError,
    NetworkError,
)
from kafka_ds.protocol.messages.find_coordinator import Coordinator, FindCoordinatorResponse
from kafka_ds.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

TOPIC_ID = uuid.UUID(int=7)


def _answer(code: int = 0, leader: int = 1) -> MetadataResponse:
    partitions = [] if code else [MetadataResponsePartition(
        error_code=0, partition_index=0, leader_id=leader, leader_epoch=3, replica_nodes=[1],
        isr_nodes=[1], offline_replicas=[])]
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=1, host="127.0.0.1", port=1, rack=None)],
        cluster_id="c", controller_id=1,
        topics=[MetadataResponseTopic(error_code=code, name="t", topic_id=TOPIC_ID,
                                      is_internal=False, partitions=partitions)])


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    properties = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
                  "sasl.password": "secret"}
    config = ClientConfig.from_properties(properties)
    view = Cluster(NetworkClient(config.bootstrap_servers, config.connection),
                   retry_backoff_ms=1)
    yield view
    view.close()


def _answers(cluster: Cluster, *answers: MetadataResponse) -> list[int]:
    """``refresh`` applies the next canned answer; returns the list of refreshes done."""
    queue = list(answers)
    done: list[int] = []

    def refresh(topics: Any = None, timeout_ms: Any = None) -> None:
        done.append(1)
        cluster._apply(queue.pop(0) if len(queue) > 1 else queue[0], replace_all=False)

    cluster.refresh = refresh  # type: ignore[method-assign]
    return done


def test_authorization_failure_names_topic_and_principal(cluster: Cluster) -> None:
    _answers(cluster, _answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(TopicAuthorizationError) as caught:
        cluster.topic("t")
    error = caught.value
    assert not error.retriable
    assert error.topic == "t" and error.principal == "User:carol"
    assert "User:carol" in str(error) and "'t'" in str(error)
    assert "secret" not in str(error)


def test_unknown_topic_is_retriable_and_not_data_loss(cluster: Cluster) -> None:
    _answers(cluster, _answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    with pytest.raises(UnknownTopicError) as caught:
        cluster.topic("t")
    assert caught.value.retriable and not isinstance(caught.value, DataLossError)
    assert cluster.topic_errors == {"t": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_a_topic_being_created_is_waited_for(cluster: Cluster) -> None:
    refreshes = _answers(cluster, _answer(ErrorCode.LEADER_NOT_AVAILABLE),
                         _answer(ErrorCode.LEADER_NOT_AVAILABLE), _answer())
    assert cluster.topic("t", timeout_ms=10_000).topic_id == TOPIC_ID
    assert len(refreshes) == 3 and "t" not in cluster.topic_errors


def test_a_topic_still_being_created_times_out_naming_the_error(cluster: Cluster) -> None:
    _answers(cluster, _answer(ErrorCode.LEADER_NOT_AVAILABLE))
    with pytest.raises(KafkaTimeoutError, match="LEADER_NOT_AVAILABLE"):
        cluster.topic("t", timeout_ms=0)


def test_other_topic_errors_are_reported_as_they_are(cluster: Cluster) -> None:
    _answers(cluster, _answer(ErrorCode.INVALID_TOPIC_EXCEPTION))
    with pytest.raises(BrokerError) as caught:
        cluster.topic("t")
    assert caught.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert not isinstance(caught.value, UnknownTopicError | TopicAuthorizationError)


def test_no_principal_is_guessed_without_sasl() -> None:
    config = ClientConfig.from_properties({"bootstrap.servers": "127.0.0.1:1"})
    with Cluster(NetworkClient(config.bootstrap_servers, config.connection)) as view:
        assert view.principal is None


@pytest.mark.parametrize("error", [
    TopicAuthorizationError("t", "User:carol", "fetching t-0 at offset 5"),
    TopicAuthorizationError("t"),
    UnknownTopicError("t", ": no broker knew it"),
    TopicDeletedError("t", 3, 120, reason="the topic was deleted and recreated", hint="h"),
])
def test_errors_pickle_with_their_fields(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_deleted_is_data_loss_and_says_so() -> None:
    error = TopicDeletedError("t", 3, 120).with_hint("Set fail.on.data.loss=false")
    assert isinstance(error, DataLossError) and isinstance(error, TopicDeletedError)
    assert str(error) == ("data loss in t-3: the topic was deleted while offset 120 was being "
                          "read. Set fail.on.data.loss=false")


@pytest.mark.parametrize(("key_type", "code", "what", "operations"), [
    (CoordinatorType.TRANSACTION, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
     "transactional id", "WRITE and DESCRIBE"),
    (CoordinatorType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "group", "READ and DESCRIBE"),
])
def test_a_denied_coordinator_lookup_names_the_key_and_principal(
        cluster: Cluster, key_type: CoordinatorType, code: ErrorCode, what: str,
        operations: str) -> None:
    class _Connection:
        node_id = 1

        def version_for(self, api_key: Any) -> int:
            return 3

    cluster.client.any_connection = lambda: _Connection()  # type: ignore[method-assign]
    cluster.client.request = lambda *args, **kwargs: FindCoordinatorResponse(  # type: ignore[method-assign]
        error_code=code, error_message=None, node_id=-1, host="", port=-1)
    with pytest.raises(BrokerError) as caught:
        cluster.coordinator(key_type, "the-key")
    message = str(caught.value)
    assert caught.value.code == code and not caught.value.retriable
    assert f"{what} 'the-key' as User:carol" in message
    assert f"an ACL must allow User:carol {operations}" in message
    assert "secret" not in message


def test_a_connection_broken_under_a_metadata_request_is_retried(cluster: Cluster) -> None:
    """A cut link (or a broker restarting) under one Metadata request is not the end: the
    refresh asks again on a fresh connection, within its timeout (found by the pipeline's
    proxy test, where a sink task's intent lookup died of a single cut connection)."""
    class _Connection:
        node_id = 1
        responses_received = 3  # a connection that had been serving requests

        def version_for(self, api_key: Any) -> int:
            return 4

    answers: list[Any] = [NetworkError("broker 127.0.0.1:1 closed the connection"),
                          _answer()]

    def request(*args: Any, **kwargs: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cluster.client.any_connection = lambda: _Connection()  # type: ignore[method-assign]
    cluster.client.request = request  # type: ignore[method-assign]
    assert cluster.topic("t").partitions[0].leader_id == 1
    assert answers == []  # asked twice


def test_a_connection_that_keeps_breaking_fails_within_the_timeout(cluster: Cluster) -> None:
    class _Connection:
        node_id = 1
        responses_received = 3  # a connection that had been serving requests

        def version_for(self, api_key: Any) -> int:
            return 4

    calls: list[int] = []

    def request(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise NetworkError("broker 127.0.0.1:1 closed the connection")

    cluster.client.any_connection = lambda: _Connection()  # type: ignore[method-assign]
    cluster.client.request = request  # type: ignore[method-assign]
    with pytest.raises(NetworkError):
        cluster.refresh(["t"], timeout_ms=50)
    assert len(calls) > 1


def test_fresh_connections_refused_twice_fail_at_once_naming_the_listener_mismatch(
        cluster: Cluster) -> None:
    """A listener that closes every fresh connection at its first request (PLAINTEXT to a
    SASL listener) is not waited out to the timeout: the second refusal is raised."""
    class _Connection:
        node_id = 1
        responses_received = 0

        def version_for(self, api_key: Any) -> int:
            return 4

    calls: list[int] = []

    def request(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise NetworkError("broker 127.0.0.1:1 closed the connection before answering our "
                           "first request: check security.protocol")

    cluster.client.any_connection = lambda: _Connection()  # type: ignore[method-assign]
    cluster.client.request = request  # type: ignore[method-assign]
    with pytest.raises(NetworkError, match=r"security\.protocol"):
        cluster.refresh(["t"], timeout_ms=600_000)
    assert len(calls) == 2


class _FindCoordinatorBroker:
    """Answers FindCoordinator as a broker of ``version`` would: every transactional id's
    coordinator is node 1, except ids starting with "denied" (an ACL refusal). Keeps the
    keys of each request it got."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.requests: list[list[str]] = []

    def connection(self) -> Any:
        broker = self

        class _Connection:
            node_id = 1
            responses_received = 3

            def version_for(self, api_key: Any) -> int:
                return broker.version

        return _Connection()

    def request(self, node_id: int, request: Any, **kwargs: Any) -> FindCoordinatorResponse:
        denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if self.version < 4:
            self.requests.append([request.key])
            code = denied if request.key.startswith("denied") else 0
            return FindCoordinatorResponse(error_code=code, error_message=None, node_id=1,
                                           host="127.0.0.1", port=1)
        self.requests.append(list(request.coordinator_keys))
        return FindCoordinatorResponse(coordinators=[
            Coordinator(key=key, node_id=1, host="127.0.0.1", port=1,
                        error_code=denied if key.startswith("denied") else 0,
                        error_message=None) for key in request.coordinator_keys])


def _broker(cluster: Cluster, version: int) -> _FindCoordinatorBroker:
    broker = _FindCoordinatorBroker(version)
    cluster.client.any_connection = broker.connection  # type: ignore[method-assign]
    cluster.client.request = broker.request  # type: ignore[method-assign]
    return broker


def test_a_coordinator_found_before_any_metadata_is_not_asked_for_again(
        cluster: Cluster) -> None:
    """A producer finds its coordinator before it ever fetches metadata: the lookup stands
    (it cost a second FindCoordinator in every task's begin_transaction, and one per
    transaction in the sink's commit), until metadata says its broker is gone."""
    broker = _broker(cluster, 4)
    assert cluster.coordinator(CoordinatorType.TRANSACTION, "t-0") == 1
    assert cluster.coordinator(CoordinatorType.TRANSACTION, "t-0") == 1
    assert broker.requests == [["t-0"]]
    cluster._apply(MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=2, host="127.0.0.1", port=2, rack=None)],
        cluster_id="c", controller_id=2, topics=[]), replace_all=True)
    cluster.coordinator(CoordinatorType.TRANSACTION, "t-0")
    assert broker.requests == [["t-0"], ["t-0"]]


def test_the_coordinators_of_many_ids_come_from_one_request(cluster: Cluster) -> None:
    broker = _broker(cluster, 4)
    cluster.coordinator(CoordinatorType.TRANSACTION, "t-0")
    found = cluster.coordinators(CoordinatorType.TRANSACTION, ["t-0", "t-1", "t-2", "t-1"])
    assert found == {"t-0": 1, "t-1": 1, "t-2": 1}
    assert broker.requests == [["t-0"], ["t-1", "t-2"]]  # t-0 was known


def test_a_broker_before_batched_lookups_is_asked_key_by_key(cluster: Cluster) -> None:
    broker = _broker(cluster, 3)
    assert cluster.coordinators(CoordinatorType.TRANSACTION, ["t-0", "t-1"]) == \
        {"t-0": 1, "t-1": 1}
    assert broker.requests == [["t-0"], ["t-1"]]


def test_a_key_refused_in_a_batched_lookup_raises_the_single_lookups_error(
        cluster: Cluster) -> None:
    broker = _broker(cluster, 4)
    with pytest.raises(BrokerError, match="transactional id 'denied-1' as User:carol"):
        cluster.coordinators(CoordinatorType.TRANSACTION, ["t-0", "denied-1"])
    assert broker.requests == [["t-0", "denied-1"], ["denied-1"]]


def test_warming_the_cache_asks_once_and_leaves_failures_to_the_single_lookup(
        cluster: Cluster) -> None:
    """end_transactions warms the cache this way, then asks key by key: a refused id must not
    be looked up (and waited for) twice before its EndTxn."""
    broker = _broker(cluster, 4)
    cluster.look_up_coordinators(CoordinatorType.TRANSACTION, ["t-0", "denied-1", "t-0"])
    assert broker.requests == [["t-0", "denied-1"]]
    assert cluster.coordinator(CoordinatorType.TRANSACTION, "t-0") == 1
    assert broker.requests == [["t-0", "denied-1"]]  # t-0 came from the cache
    with pytest.raises(BrokerError, match="denied-1"):
        cluster.coordinator(CoordinatorType.TRANSACTION, "denied-1")
    assert broker.requests == [["t-0", "denied-1"], ["denied-1"]]
