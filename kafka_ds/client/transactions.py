"""Transactional producing: coordinator requests, protocol choice, and finishing a prepared
transaction from another process.

Layer: client. Specs: KIP-98 (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn), KIP-890 (transactions v2), KIP-447 (TxnOffsetCommit group fields).
The state machine and error classes are sans-IO, in ``protocol.txn_state``.

``TransactionManager`` methods whose names end in ``_task`` run on the producer's sender
thread (they use its NetworkClient); the ``Producer`` submits them and waits.

Protocol per transaction, fixed when it begins and recorded in the token::

    v2  when the coordinator's finalized transaction.version >= 2 and it accepts Produce
        v12+, TxnOffsetCommit v5 and EndTxn v5: partitions join by Produce v12, offsets by
        TxnOffsetCommit v5, EndTxn v5 bumps the epoch and returns the next one
    v1  otherwise: AddPartitionsToTxn (v<=3) before the first Produce to a partition,
        Produce capped at v11, AddOffsetsToTxn + TxnOffsetCommit (v<=4), EndTxn (v<=4)

``complete_transaction(config, token, commit)`` ends a prepared transaction from the token
alone, in any process: FindCoordinator, then EndTxn at the version the token's protocol
needs. Repeating it succeeds (a committed transaction answers NONE to the same request).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kafka_ds.client.cluster import Cluster, CoordinatorType
from kafka_ds.client.config import ClientConfig
from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import BrokerError, ErrorCode, KafkaDsError, KafkaTimeoutError
from kafka_ds.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from kafka_ds.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kafka_ds.protocol.messages.end_txn import EndTxnRequest
from kafka_ds.protocol.messages.init_producer_id import InitProducerIdRequest
from kafka_ds.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kafka_ds.protocol.producer_state import ProducerState
from kafka_ds.protocol.txn_state import (
    COORDINATOR_CODES,
    LOST_CODES,
    ErrorClass,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionLostError,
    TransactionToken,
    TxnState,
    TxnStateMachine,
    classify,
    expired_id_message,
    fenced_message,
)

if TYPE_CHECKING:
    from kafka_ds.client.sender import Sender

log = logging.getLogger(__name__)
# end_transactions' code for an EndTxn that got no answer in time (not a Kafka error code:
# those are -1 and up).
UNANSWERED = -1000

TV1_PRODUCE_MAX = 11
TV2_PRODUCE_MAX = 12
TV1_TXN_MAX = 4  # EndTxn, TxnOffsetCommit, AddOffsetsToTxn under v1
TV2_END_TXN = 5
TV2_TXN_OFFSET_COMMIT = 5
ADD_PARTITIONS_MAX = 3  # v4+ is broker-to-broker
INIT_PRODUCER_ID_MAX = 5  # v6 (KIP-939) is unstable on released brokers


def choose_protocol(finalized_features: Mapping[str, int],
                    api_ranges: Mapping[int, tuple[int, int]]) -> int:
    """1 or 2: the transaction protocol to use with a coordinator (KIP-890's rule)."""
    def max_of(key: int) -> int:
        return api_ranges.get(key, (0, -1))[1]

    if (finalized_features.get("transaction.version", 0) >= 2
            and max_of(ApiKey.PRODUCE) > TV1_PRODUCE_MAX
            and max_of(ApiKey.TXN_OFFSET_COMMIT) > TV1_TXN_MAX
            and max_of(ApiKey.END_TXN) >= TV2_END_TXN):
        return 2
    return 1


def end_txn_version(negotiated: int, protocol: int, transactional_id: str) -> int:
    if protocol == 2:
        if negotiated < TV2_END_TXN:
            raise KafkaDsError(
                f"transaction {transactional_id!r} was produced with transactions v2 but this "
                f"broker speaks EndTxn up to v{negotiated} only (v5 needed): was the cluster's "
                "transaction.version downgraded?")
        return TV2_END_TXN
    return min(negotiated, TV1_TXN_MAX)


def _end_txn(transactional_id: str, producer_id: int, producer_epoch: int, protocol: int,
             commit: bool) -> Callable[[Any], tuple[EndTxnRequest, int]]:
    """Builds EndTxn for a coordinator connection, at the version the protocol requires."""
    def build(connection: Any) -> tuple[EndTxnRequest, int]:
        version = end_txn_version(connection.version_for(ApiKey.END_TXN), protocol,
                                  transactional_id)
        return EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                             producer_epoch=producer_epoch, committed=commit), version

    return build


class _Coordinator:
    """Requests to a transactional id's coordinator with the retry rules they share."""

    def __init__(self, cluster: Cluster, transactional_id: str, retry_backoff_ms: int,
                 key_type: CoordinatorType = CoordinatorType.TRANSACTION) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id  # or the group id, for a group coordinator
        self.retry_backoff_ms = retry_backoff_ms
        self.key_type = key_type

    def node(self, timeout_ms: int) -> int:
        return self.cluster.coordinator(self.key_type, self.transactional_id,
                                        timeout_ms=timeout_ms)

    def call(self, build: Any, what: str, timeout_ms: int,
             error_of: Any = lambda response: response.error_code) -> Any:
        """Send ``build(version_for)`` until its error is not retriable; returns the response.

        ``build(connection)`` returns (request, version). Retries CONCURRENT_TRANSACTIONS
        and coordinator moves within ``timeout_ms``; returns responses with other errors.
        """
        client = self.cluster.client
        deadline_ms = client.clock.monotonic_ms() + timeout_ms
        attempt = 0
        last: BaseException | None = None
        while True:
            remaining_ms = max(deadline_ms - client.clock.monotonic_ms(), 1)
            code: int
            try:
                node = self.node(remaining_ms)
                request, version = build(client.connection(node))
                response = client.request(node, request, timeout_ms=remaining_ms,
                                          version=version)
                code = error_of(response)
            except (BrokerError, KafkaTimeoutError) as exc:
                if isinstance(exc, BrokerError) and not exc.retriable:
                    raise
                response, code = None, -2
                last = exc
            except KafkaDsError as exc:  # network: look the coordinator up again
                response, code = None, -2
                last = exc
            if code in COORDINATOR_CODES or code == -2:
                self.cluster.forget_coordinator(self.key_type, self.transactional_id)
            elif code == ErrorCode.CONCURRENT_TRANSACTIONS:
                pass
            elif response is not None and not (code and BrokerError(code).retriable):
                return response
            if client.clock.monotonic_ms() >= deadline_ms:
                reason = BrokerError(code).name if code >= 0 else str(last)
                raise KafkaTimeoutError(f"{what} for transactional.id {self.transactional_id!r}"
                                        f" did not succeed within {timeout_ms} ms: {reason}")
            attempt += 1
            # CONCURRENT_TRANSACTIONS clears within milliseconds: retry fast at first.
            backoff_ms = min(self.retry_backoff_ms, 20 * attempt)
            client.poll(backoff_ms)


class TransactionManager:
    """Transaction state of one producer: shared by user threads and the sender thread."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int,
                 producer_state: ProducerState, retry_backoff_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = producer_state
        self.retry_backoff_ms = retry_backoff_ms
        self.machine = TxnStateMachine(transactional_id)
        self.lock = threading.Lock()
        self.protocol: int | None = None
        self.partitions: set[tuple[str, int]] = set()  # in the transaction
        self.has_offsets = False
        self.record_count = 0
        # EndTxn of the current transaction succeeded (a repeated commit or abort after a
        # timeout must not send it again once the epoch was bumped behind it).
        self.ended = False

    # --- the sender's hooks ------------------------------------------------------------------

    def can_send(self, batch: ProducerBatch) -> bool:
        state = self.machine.state
        if state in (TxnState.ABORTING, TxnState.ABORTABLE_ERROR):
            # Only a batch that went out already (it has its sequence) goes again: its
            # retry must settle before EndTxn. Batches never sent are dropped instead
            # (``abort_undrained``), as the Java client does.
            if batch.base_sequence < 0:
                return False
        elif state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.PREPARED):
            return False
        return self.protocol == 2 or (batch.topic, batch.partition) in self.partitions

    def produce_version_cap(self) -> int:
        return TV2_PRODUCE_MAX if self.protocol == 2 else TV1_PRODUCE_MAX

    def on_batch_failed(self, batch: ProducerBatch, error: BaseException) -> None:
        with self.lock:
            where = f"producing to {batch.topic}-{batch.partition}"
            if isinstance(error, BrokerError) and error.code == ErrorCode.PRODUCER_FENCED:
                self.machine.transition(TxnState.FATAL_ERROR, ProducerFencedError(fenced_message(
                    self.transactional_id, self.state.producer_id, self.state.producer_epoch,
                    where)))
            elif (isinstance(error, BrokerError)
                  and error.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING):
                # Under transactions v2 the first Produce of a transaction meets the expired
                # id; an abort could only be refused for the same reason. Fatal at once, as
                # in the Java client (4.x).
                self.machine.transition(TxnState.FATAL_ERROR, TransactionFatalError(
                    expired_id_message(self.transactional_id, where)))
            elif self.machine.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                                        TxnState.PREPARED):
                # INVALID_PRODUCER_EPOCH lands here too: since KIP-588 it means the
                # coordinator timed the transaction out (and bumped the epoch), which an
                # abort recovers from where the broker allows it (transactions v2); a
                # producer fenced by another one is told so by the abort's EndTxn.
                self.machine.transition(TxnState.ABORTABLE_ERROR, error)
                if self.state.abortable_reason is None:
                    self.state.abortable_reason = str(error)

    def before_drain(self, sender: Sender) -> None:
        """Under v1, add the partitions that got new batches before they may be drained;
        while aborting (or after an abortable error), drop what was never sent."""
        with sender.lock:
            new = sender.accumulator.new_partitions
            sender.accumulator.new_partitions = set()
        if self.machine.state in (TxnState.ABORTING, TxnState.ABORTABLE_ERROR):
            self.abort_undrained(sender)
            return
        if self.machine.state is TxnState.FATAL_ERROR:
            # Nothing can be sent any more: fail what waits now rather than at its
            # delivery.timeout.ms (the Java client aborts them too).
            error = self.machine.last_error
            sender.fail_queued(error if isinstance(error, KafkaDsError) else
                               TransactionFatalError(f"transactional producer "
                                                     f"{self.transactional_id!r} failed: {error}"))
            return
        if self.machine.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                                      TxnState.PREPARED):
            return
        pending = sorted(tp for tp in new if tp not in self.partitions)
        if not pending:
            return
        if self.protocol == 2:
            self.partitions.update(pending)  # Produce v12 adds them
            return
        try:
            self._add_partitions(sender, pending)
        except KafkaDsError as exc:
            self.fail(exc)
            sender.fail_queued(exc, lambda batch: (batch.topic, batch.partition) in pending)

    def abort_undrained(self, sender: Sender) -> int:
        """Fail every queued batch that never went out: the transaction will be aborted, so
        they must not be sent (the Java client does this on every sender loop)."""
        error = self.machine.last_error
        reason = f": {error}" if error is not None else ""
        return sender.fail_queued(
            TransactionAbortableError(f"the transaction of {self.transactional_id!r} is being "
                                      f"aborted; this record was never sent{reason}"),
            lambda batch: batch.base_sequence < 0)

    def fail(self, exc: BaseException) -> None:
        """Record a failure: fatal ones end the producer, others spoil the transaction.

        While ABORTING the state stays: the abort may simply be called again."""
        with self.lock:
            if isinstance(exc, TransactionFatalError):
                self.machine.transition(TxnState.FATAL_ERROR, exc)
            elif self.machine.state is TxnState.ABORTING:
                self.machine.last_error = exc
            elif self.machine.state is not TxnState.FATAL_ERROR:
                self.machine.transition(TxnState.ABORTABLE_ERROR, exc)

    def _raise_for(self, code: int, what: str) -> None:
        if not code:
            return
        if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            raise ProducerFencedError(fenced_message(
                self.transactional_id, self.state.producer_id, self.state.producer_epoch, what))
        if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            raise TransactionFatalError(expired_id_message(self.transactional_id, what))
        error = BrokerError(code, f"{what} for transactional.id {self.transactional_id!r}")
        if classify(code) is ErrorClass.FATAL:
            raise TransactionFatalError(str(error)) from error
        raise TransactionAbortableError(str(error)) from error

    def _coordinator(self, sender: Sender) -> _Coordinator:
        return _Coordinator(sender.cluster, self.transactional_id, self.retry_backoff_ms)

    def _add_partitions(self, sender: Sender, pending: list[tuple[str, int]]) -> None:
        topics: dict[str, list[int]] = {}
        for topic, partition in pending:
            topics.setdefault(topic, []).append(partition)
        state = self.state

        def build(connection: Any) -> tuple[Any, int]:
            request = AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=state.producer_id,
                v3_and_below_producer_epoch=state.producer_epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name=name, partitions=parts)
                                     for name, parts in topics.items()])
            return request, min(connection.version_for(ApiKey.ADD_PARTITIONS_TO_TXN),
                                ADD_PARTITIONS_MAX)

        def first_error(response: Any) -> int:
            codes = [p.partition_error_code for t in response.results_by_topic_v3_and_below
                     for p in t.results_by_partition if p.partition_error_code]
            real = [c for c in codes if c != ErrorCode.OPERATION_NOT_ATTEMPTED]
            return (real or codes or [0])[0]

        response = self._coordinator(sender).call(build, "AddPartitionsToTxn",
                                                  sender.config.max_block_ms, first_error)
        self._raise_for(first_error(response), f"adding partitions {pending}")
        self.partitions.update(pending)

    # --- tasks (sender thread) ---------------------------------------------------------------

    def init_task(self, sender: Sender, timeout_ms: int, bump: bool = False) -> None:
        """FindCoordinator + InitProducerId: fences older producers of this id and completes
        (commits or aborts) whatever transaction they left.

        ``bump``: a new epoch for this producer after an aborted transaction whose sequences
        may be out of step. With InitProducerId v3+ (KIP-360) it sends its current id and
        epoch, so that the coordinator bumps *its* epoch (and a retry whose reply was lost
        gets the same answer) rather than treating it as a new producer."""
        state = self.state

        def build(connection: Any) -> tuple[Any, int]:
            version = min(connection.version_for(ApiKey.INIT_PRODUCER_ID), INIT_PRODUCER_ID_MAX)
            current = bump and version >= 3 and state.has_producer_id
            return InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=state.producer_id if current else -1,
                producer_epoch=state.producer_epoch if current else -1), version

        response = self._coordinator(sender).call(build, "InitProducerId", timeout_ms)
        if response.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT:
            raise TransactionFatalError(
                f"transaction.timeout.ms={self.transaction_timeout_ms} is not accepted by the "
                "broker: it must be positive and at most the broker's transaction.max.timeout.ms"
                " (15 minutes by default)")
        self._raise_for(response.error_code, "InitProducerId")
        self.state.set_producer_id(response.producer_id, response.producer_epoch)
        self.state.abortable_reason = None
        with sender.lock:
            sender.accumulator.new_partitions.clear()

    def begin_task(self, sender: Sender, timeout_ms: int) -> int:
        """Choose the protocol of the transaction about to begin."""
        node = self._coordinator(sender).node(timeout_ms)
        connection = sender.client.connection(node)
        self.protocol = choose_protocol(connection.finalized_features, connection.api_ranges)
        self.partitions = set()
        self.has_offsets = False
        self.record_count = 0
        self.ended = False
        return self.protocol

    def send_offsets_task(self, sender: Sender, offsets: Mapping[tuple[str, int], Any],
                          group_id: str, timeout_ms: int) -> None:
        state = self.state
        coordinator = self._coordinator(sender)
        if self.protocol != 2:
            def build_add(connection: Any) -> tuple[Any, int]:
                return AddOffsetsToTxnRequest(
                    transactional_id=self.transactional_id, producer_id=state.producer_id,
                    producer_epoch=state.producer_epoch, group_id=group_id), \
                    min(connection.version_for(ApiKey.ADD_OFFSETS_TO_TXN), TV1_TXN_MAX)

            response = coordinator.call(build_add, "AddOffsetsToTxn", timeout_ms)
            self._raise_for(response.error_code, f"adding group {group_id!r} to the transaction")
        self.has_offsets = True
        topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), value in sorted(offsets.items()):
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            topics.setdefault(topic, []).append(TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=int(offset),
                committed_metadata=metadata))
        cluster = sender.cluster
        protocol = self.protocol

        def build_commit(connection: Any) -> tuple[Any, int]:
            negotiated = connection.version_for(ApiKey.TXN_OFFSET_COMMIT)
            version = TV2_TXN_OFFSET_COMMIT if protocol == 2 else min(negotiated, TV1_TXN_MAX)
            return TxnOffsetCommitRequest(
                transactional_id=self.transactional_id, group_id=group_id,
                producer_id=state.producer_id, producer_epoch=state.producer_epoch,
                generation_id=-1, member_id="", group_instance_id=None,
                topics=[TxnOffsetCommitRequestTopic(name=name, partitions=parts)
                        for name, parts in topics.items()]), version

        def first_error(response: Any) -> int:
            codes = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
            return codes[0] if codes else 0

        group = _Coordinator(cluster, group_id, self.retry_backoff_ms, CoordinatorType.GROUP)
        response = group.call(build_commit, "TxnOffsetCommit", timeout_ms, first_error)
        self._raise_for(first_error(response), f"committing offsets of group {group_id!r}")

    def end_task(self, sender: Sender, commit: bool, timeout_ms: int) -> None:
        """EndTxn(commit or abort) at the version of this transaction's protocol.

        Skipped when an earlier EndTxn of this transaction succeeded after its caller gave up
        waiting (tasks run in order on the sender thread): under transactions v2 that one
        bumped the epoch, and ending again with the new epoch would be PRODUCER_FENCED."""
        if self.ended:
            return
        protocol = self.protocol or 1
        state = self.state
        build = _end_txn(self.transactional_id, state.producer_id, state.producer_epoch,
                         protocol, commit)
        what = "committing" if commit else "aborting"
        response = self._coordinator(sender).call(build, f"EndTxn ({what})", timeout_ms)
        self._raise_for(response.error_code, f"{what} the transaction")
        self.ended = True
        if protocol == 2 and response.producer_id >= 0:
            # KIP-890: the coordinator bumped the epoch; the next transaction uses it.
            state.set_producer_id(response.producer_id, response.producer_epoch)

    def token(self) -> TransactionToken:
        return TransactionToken(
            transactional_id=self.transactional_id, producer_id=self.state.producer_id,
            producer_epoch=self.state.producer_epoch, protocol_version=self.protocol or 1,
            partitions=tuple(sorted(self.partitions)), record_count=self.record_count,
            has_offsets=self.has_offsets)


def complete_transaction(client_config: ClientConfig | Mapping[str, str],
                         token: TransactionToken, commit: bool,
                         timeout_ms: int = 60_000) -> str:
    """Commit (or abort) the prepared transaction ``token`` describes, from any process.

    Returns ``"committed"``, ``"aborted"`` or ``"empty"`` (nothing to end). Safe to repeat:
    ending an already ended transaction the same way succeeds. Raises
    ``TransactionLostError`` when a commit finds the transaction aborted (it outlived
    ``transaction.timeout.ms``, or a newer producer with the same transactional.id fenced
    it): its records are gone, which for an exactly-once sink is data loss.
    """
    if token.is_empty:
        return "empty"
    config = client_config if isinstance(client_config, ClientConfig) else \
        ClientConfig.from_properties(client_config)
    what = "commit" if commit else "abort"
    with Cluster.connect(config) as cluster:
        coordinator = _Coordinator(cluster, token.transactional_id, config.retry_backoff_ms)
        build = _end_txn(token.transactional_id, token.producer_id, token.producer_epoch,
                         token.protocol_version, commit)
        response = coordinator.call(build, f"EndTxn ({what})", timeout_ms)
    code = response.error_code
    if not code:
        return "committed" if commit else "aborted"
    if code in LOST_CODES:
        name = BrokerError(code).name
        if commit:
            raise TransactionLostError(
                f"transaction lost: committing transactional.id {token.transactional_id!r} "
                f"(producer {token.producer_id}, epoch {token.producer_epoch}, protocol "
                f"v{token.protocol_version}) failed with {name}. The coordinator already "
                "aborted it, because it stayed open longer than transaction.timeout.ms or a "
                "newer producer with the same transactional.id fenced it; its "
                f"{token.record_count} records will never be visible to read_committed readers")
        log.info("abort of transactional.id %r: %s (it was already ended)",
                 token.transactional_id, name)
        if code == ErrorCode.INVALID_TXN_STATE:
            raise TransactionFatalError(
                f"cannot abort transactional.id {token.transactional_id!r}: {name} (it was "
                "probably committed already)")
        return "aborted"
    raise BrokerError(code, f"EndTxn ({what}) of transactional.id {token.transactional_id!r}")


def end_transactions(cluster: Cluster, tokens: Sequence[TransactionToken], commit: bool, *,
                     timeout_ms: int = 60_000) -> list[int]:
    """End many prepared transactions at once over one ``Cluster``: the error code of each.

    The EndTxn requests go out together (one per transaction, pipelined to their
    coordinators); answers that say "retry" (a coordinator moved, CONCURRENT_TRANSACTIONS, a
    broken connection) are retried one by one within ``timeout_ms``. 0 means ended as asked,
    including a repeat of an earlier identical request. Codes in ``LOST_CODES`` on a commit
    mean the coordinator had aborted the transaction already (``complete_transaction``
    explains them). ``UNANSWERED`` means no answer within ``timeout_ms`` (the coordinator
    unreachable): whether that transaction ended is not known, and the others still got
    their turn (one coordinator's outage used to raise and leave the rest untried). Empty
    tokens are skipped (0).
    """
    deadline = time.monotonic() + timeout_ms / 1000
    codes = [0] * len(tokens)
    client = cluster.client
    sent: list[tuple[int, Any]] = []
    # One lookup for all, so that the requests below go out without waiting in between; what
    # it does not settle is left to the lookup per transaction below, which retries.
    cluster.look_up_coordinators(
        CoordinatorType.TRANSACTION,
        [token.transactional_id for token in tokens if not token.is_empty], timeout_ms)
    for index, token in enumerate(tokens):
        if token.is_empty:
            continue
        build = _end_txn(token.transactional_id, token.producer_id, token.producer_epoch,
                         token.protocol_version, commit)
        try:
            node = cluster.coordinator(CoordinatorType.TRANSACTION, token.transactional_id,
                                       timeout_ms=timeout_ms)
            request, version = build(client.connection(node))
        except KafkaDsError:
            sent.append((index, None))  # the retry below looks the coordinator up again
            continue
        sent.append((index, client.send(node, request, version, timeout_ms=timeout_ms)))
    client.poll_until(lambda: all(future is None or future.done() for _, future in sent),
                      timeout_ms)
    for index, future in sent:
        code = -1
        if future is not None and future.done() and not future.failed():
            code = future.result().error_code
        if code == -1 or code in COORDINATOR_CODES or code == ErrorCode.CONCURRENT_TRANSACTIONS:
            token = tokens[index]
            cluster.forget_coordinator(CoordinatorType.TRANSACTION, token.transactional_id)
            coordinator = _Coordinator(cluster, token.transactional_id, cluster.retry_backoff_ms)
            build = _end_txn(token.transactional_id, token.producer_id, token.producer_epoch,
                             token.protocol_version, commit)
            what = "commit" if commit else "abort"
            remaining_ms = max(int((deadline - time.monotonic()) * 1000), 0)
            try:
                code = coordinator.call(build, f"EndTxn ({what})", remaining_ms).error_code
            except KafkaTimeoutError:
                code = UNANSWERED
        codes[index] = code
    return codes


def end_transactions_until(cluster: Cluster, tokens: Sequence[TransactionToken],
                           commit: bool, *, deadline_ms: int, timeout_ms: int = 60_000,
                           backoff_ms: int = 1_000) -> list[int]:
    """``end_transactions``, then again for those left ``UNANSWERED``, until each has an
    answer or ``deadline_ms`` (from now) has passed. For a decided commit, whose
    transactions must all end alike: ``transaction.timeout.ms`` bounds it, as past that the
    coordinator aborts them (and answers so: a code in ``LOST_CODES``)."""
    deadline = time.monotonic() + deadline_ms / 1000
    codes = end_transactions(cluster, tokens, commit, timeout_ms=timeout_ms)
    while True:
        pending = [index for index, code in enumerate(codes) if code == UNANSWERED]
        left_s = deadline - time.monotonic()
        if not pending or left_s <= 0:
            return codes
        log.warning("EndTxn(%s) of %d transaction(s) got no answer (first %r); trying again",
                    "commit" if commit else "abort", len(pending),
                    tokens[pending[0]].transactional_id)
        time.sleep(min(backoff_ms / 1000, left_s))
        again = end_transactions(cluster, [tokens[index] for index in pending], commit,
                                 timeout_ms=max(min(timeout_ms, int(left_s * 1000)), 1))
        for index, code in zip(pending, again, strict=True):
            codes[index] = code


def fence_transactional_id(cluster: Cluster, transactional_id: str, *,
                           transaction_timeout_ms: int = 60_000,
                           timeout_ms: int = 60_000) -> tuple[int, int]:
    """InitProducerId for ``transactional_id`` from outside any producer: fences whoever
    uses it and aborts the transaction it left open (returns once that abort is complete).

    Returns the new (producer id, epoch). Used to release transactions nobody will finish,
    so that read_committed readers are not held back until ``transaction.timeout.ms``.
    """
    def build(connection: Any) -> tuple[Any, int]:
        version = min(connection.version_for(ApiKey.INIT_PRODUCER_ID), INIT_PRODUCER_ID_MAX)
        return InitProducerIdRequest(transactional_id=transactional_id,
                                     transaction_timeout_ms=transaction_timeout_ms), version

    response = _Coordinator(cluster, transactional_id, cluster.retry_backoff_ms).call(
        build, "InitProducerId", timeout_ms)
    if response.error_code:
        raise BrokerError(response.error_code,
                          f"InitProducerId for transactional.id {transactional_id!r}")
    return response.producer_id, response.producer_epoch
