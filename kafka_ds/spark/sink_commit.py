"""The sink's driver side: commit or abort a batch whose tasks prepared Kafka transactions.

Layer: spark (over ``kafka_ds.client``). Spark calls ``commit(messages, batchId)`` on the
driver once every task succeeded, with a writer unpickled afresh each time, in a Python
worker that Spark reuses while it lives (one process served 30 micro-batch commits in a row,
pyspark 4.3: its kept connection, ``sink_pool``, spares later commits the connection set-up
and lookups). Nothing in memory is trusted from one call to the next: every decision is
read back from Kafka, so a driver that died and came back decides the same. Exactly-once::

    commit(B):
      the query's last intent is for B (a replay: its tasks SKIPPED) -> roll forward:
          EndTxn(commit) for every transaction that intent records, then step 4
      otherwise, for the PREPARED tasks' transactions:
      1. check they are all still open with the task's epoch (DescribeTransactions, sent
         before the intent read above and answered meanwhile: both only read). One that
         is not (timed out, fenced by a zombie attempt) -> abort the others, raise
         SinkBatchAbortedError: nothing of B is visible, a restart writes B again
      2. write the commit intent of B (sink_intent): the commit point
      3. EndTxn(commit) for all, in parallel; those without an answer (a coordinator
         unreachable) again, until transaction.timeout.ms: the batch is decided, so every
         one must end committed. Lost ones (the coordinator aborted them between 1 and 3,
         or during a restart that outlived transaction.timeout.ms) -> SinkDataLossError;
         still unanswered -> a timeout that says how many were committed
      4. after a restart (a new run id) or with fewer partitions than before: abort
         transactions still open under the prefix that nobody will finish
         (ListTransactions, else the ids the last intent says were used); and the ids of
         EMPTY tasks on a retry (an earlier attempt may have written before it failed)
    abort(B):
      first settle the intent's transactional id (sink_intent): an intent write commit()
          gave up on cannot land later
      the intent of B exists -> the commit was decided: commit its transactions now (the
          replay's roll-forward finds them done; aborting them would lose a decided batch)
      otherwise EndTxn(abort) for the prepared ones, InitProducerId on the ids of failed
          tasks, and the lingering cleanup of step 4

A replay of B (the driver died after step 2, before Spark's commit log) has its tasks skip
(``sink_task``) and rolls the intent forward: EndTxn is idempotent for the same producer id
and epoch, so the transactions already committed answer NONE. Batch (non-streaming) writes
take steps 1 and 3 only: there is no replay to serve.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from kafka_ds.client.admin import Admin, DescribedTransaction
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.transactions import (
    UNANSWERED,
    end_transactions,
    end_transactions_until,
    fence_transactional_id,
)
from kafka_ds.protocol.errors import BrokerError, ErrorCode, KafkaDsError, KafkaTimeoutError
from kafka_ds.protocol.txn_state import LOST_CODES, TransactionToken
from kafka_ds.spark import sink_pool
from kafka_ds.spark.sink_faults import armed, fault_point
from kafka_ds.spark.sink_intent import CommitIntent, IntentStore, intent_for
from kafka_ds.spark.sink_messages import (
    LostTransaction,
    SinkBatchAbortedError,
    SinkCommitMessage,
    SinkDataLossError,
    TaskOutcome,
)
from kafka_ds.spark.sink_options import SinkOptions
from kafka_ds.spark.sink_task import default_sink_id

log = logging.getLogger(__name__)

_TIMEOUT_MS = 60_000


class BatchCommit:
    """One commit or abort call: the batch's messages and a cluster connection."""

    def __init__(self, options: SinkOptions, messages: Sequence[object], batch_id: int | None,
                 sink_id: str | None, transaction_timeout_ms: int) -> None:
        self.options = options
        self.batch_id = batch_id  # None: a batch (non-streaming) write
        self.transaction_timeout_ms = transaction_timeout_ms
        self.messages: list[SinkCommitMessage | None] = [
            message if isinstance(message, SinkCommitMessage) else None
            for message in messages]
        known = [message for message in self.messages if message is not None]
        # Only tasks learn the streaming query id from Spark; when none reported, a local
        # checkpoint still has it.
        self.query_id = known[0].query_id if known else (
            query_id_from_checkpoint(options.checkpoint_location) if batch_id is not None
            else None)
        self.sink_id = sink_id or options.transactional_id_prefix or (
            known[0].sink_id if known else None) or (
            default_sink_id(self.query_id) if self.query_id else None)
        runs = {message.run_id for message in known}
        self.run_id = runs.pop() if len(runs) == 1 else None

    @property
    def streaming(self) -> bool:
        return self.batch_id is not None

    def _what(self) -> str:
        return f"batch {self.batch_id}" if self.streaming else "the batch write"

    def _prepared(self) -> list[SinkCommitMessage]:
        return [message for message in self.messages if message is not None
                and message.outcome is TaskOutcome.PREPARED]

    # --- commit ------------------------------------------------------------------------------

    def commit(self) -> None:
        fault_point("commit:start", batch_id=self.batch_id)
        if self.options.exactly_once and self.sink_id is not None:
            self._commit_transactions()
        fault_point("commit:end", batch_id=self.batch_id)

    def _commit_transactions(self) -> None:
        sink_id = self.sink_id
        assert sink_id is not None  # commit() calls this only for a named exactly-once sink
        started = time.monotonic()
        prepared = self._prepared()
        with _pooled(self.options) as cluster:
            store = self._store(cluster)
            # Step 1's DescribeTransactions goes out before the intent read, whose round
            # trips then cover it: both only read, and a replay (nothing prepared) asks none.
            described = self._start_check(cluster, prepared) if store is not None else None
            previous = store.latest(self.query_id) if store is not None else None
            if previous is not None and self.batch_id is not None and \
                    previous.batch_id >= self.batch_id:
                self._roll_forward(cluster, previous, prepared)
            elif prepared:
                tokens = [message.token for message in prepared if message.token is not None]
                try:
                    self._check_open(cluster, prepared, described)
                except SinkBatchAbortedError:
                    raise
                except BaseException:
                    if not self.streaming:  # no intent: abort() cannot tell the commit began
                        self._abort_quietly(cluster, tokens)
                    raise
                if store is not None:
                    assert self.batch_id is not None
                    store.write(intent_for(sink_id, self.query_id, self.run_id,
                                           self.batch_id, len(self.messages), previous,
                                           tokens))
                    fault_point("commit:after-intent", batch_id=self.batch_id)
                self._commit_all(cluster, tokens, prepared)
            self._fence_retried_empty(cluster)
            if self.streaming and self._restarted_or_shrunk(previous):
                self.abort_lingering(cluster, previous)
        log.info("pykafka sink %s: committed %s (%d transactions, %d records) in %.0f ms; "
                 "slowest task by phase (ms): %s", self.sink_id, self._what(), len(prepared),
                 sum(m.record_count for m in prepared), (time.monotonic() - started) * 1000,
                 _slowest_phases(self.messages))

    def _store(self, cluster: Cluster) -> IntentStore | None:
        if not self.streaming:
            return None
        assert self.sink_id is not None
        return IntentStore(cluster, self.options.properties,
                           self.options.intent_topic_for(self.sink_id), self.sink_id,
                           self.transaction_timeout_ms)

    def _roll_forward(self, cluster: Cluster, previous: CommitIntent,
                      prepared: list[SinkCommitMessage]) -> None:
        """The batch's commit was decided by an earlier run: finish it, write nothing new."""
        batch_id = self.batch_id
        assert batch_id is not None
        if prepared:  # cannot happen: the intent existed before any task of the replay ran
            self._end(cluster, [m.token for m in prepared if m.token is not None], False)
            raise KafkaDsError(f"pykafka sink {self.sink_id}: batch {batch_id} was decided "
                               "before, yet some of its tasks wrote again; their transactions "
                               "were aborted. Restart the query")
        if previous.batch_id > batch_id:
            # Spark replays only its last batch: an intent ahead of it means the checkpoint
            # was restored or its logs cut back. The rows of the same offsets were written by
            # the run that got that far, so writing nothing is exactly once; said, not silent.
            log.warning("pykafka sink %s: batch %d is older than batch %d, whose commit an "
                        "earlier run of this query decided (was the checkpoint restored or "
                        "cut back?): it writes nothing, as its rows were written then. To "
                        "write them again, use a new checkpoint location or another "
                        "transactionalIdPrefix", self.sink_id, batch_id, previous.batch_id)
            return
        log.warning("pykafka sink %s: batch %d is a replay of a batch whose commit was decided"
                    " (intent of %d transactions): rolling it forward", self.sink_id, batch_id,
                    len(previous.transactions))
        self._commit_all(cluster, list(previous.transactions), None)

    def _start_check(self, cluster: Cluster, prepared: list[SinkCommitMessage]
                     ) -> Callable[[], dict[str, DescribedTransaction]] | None:
        """Send step 1's DescribeTransactions without waiting for the answers; None if there
        is nothing to ask, or if sending failed (``_check_open`` then asks, and handles the
        error, as it would have)."""
        ids = [m.token.transactional_id for m in prepared if m.token is not None]
        if not ids:
            return None
        try:
            return Admin(cluster).start_describe_transactions(ids, timeout_ms=_TIMEOUT_MS)
        except KafkaDsError as exc:
            log.debug("pykafka sink %s: DescribeTransactions not sent ahead: %s", self.sink_id,
                      exc)
            return None

    def _check_open(self, cluster: Cluster, prepared: list[SinkCommitMessage],
                    described: Callable[[], dict[str, DescribedTransaction]] | None = None
                    ) -> None:
        """Step 1: every transaction still open as its task left it, or abort the batch.
        ``described``: the answers of a DescribeTransactions already sent (``_start_check``)."""
        ids = [m.token.transactional_id for m in prepared if m.token is not None]
        try:
            states = described() if described is not None else \
                Admin(cluster).describe_transactions(ids, timeout_ms=_TIMEOUT_MS)
        except BrokerError as exc:  # e.g. a 2.x broker: commit and report losses instead
            log.warning("pykafka sink %s: cannot check the transactions before committing "
                        "(%s); committing without the check", self.sink_id, exc)
            return
        dead: list[LostTransaction] = []
        for message in prepared:
            token = message.token
            assert token is not None
            state = states.get(token.transactional_id)
            if (state is not None and state.transaction_state == "Ongoing"
                    and state.producer_id == token.producer_id
                    and state.producer_epoch == token.producer_epoch):
                continue
            if state is None or state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                cause = "the coordinator no longer knows the transactional id"
            elif state.producer_id == token.producer_id and \
                    state.producer_epoch == token.producer_epoch:
                cause = f"it is {state.transaction_state}, not open"
            else:
                cause = (f"it is {state.transaction_state} under producer {state.producer_id} "
                         f"epoch {state.producer_epoch}, not the task's {token.producer_id}/"
                         f"{token.producer_epoch}: the coordinator aborted it "
                         "(transaction.timeout.ms passed) or another task attempt took over "
                         "its transactional id")
            dead.append(_lost(message.partition_id, token, cause))
        if dead:
            dead_ids = {item.transactional_id for item in dead}
            self._end(cluster, [m.token for m in prepared if m.token is not None
                                and m.token.transactional_id not in dead_ids], False)
            raise SinkBatchAbortedError(self.sink_id or "", self.batch_id, dead)

    def _commit_all(self, cluster: Cluster, tokens: list[TransactionToken],
                    prepared: list[SinkCommitMessage] | None) -> None:
        """Step 3 (and the roll-forward): EndTxn(commit) for every token; losses are loud."""
        if len(tokens) > 1 and armed("commit:after-first-end"):
            codes = self._end(cluster, tokens[:1], True)
            fault_point("commit:after-first-end", batch_id=self.batch_id, committed=1,
                        transactions=len(tokens))
            codes += self._end(cluster, tokens[1:], True)
        else:
            codes = self._end(cluster, tokens, True)
        unanswered = [token.transactional_id for token, code in zip(tokens, codes, strict=True)
                      if code == UNANSWERED]
        if unanswered:
            done = sum(1 for code in codes if code == 0)
            visible = ("; for a batch write, the write is partly visible: do not simply run it "
                       "again" if not self.streaming else
                       "; the query's restart finishes the commit (its intent is written)")
            raise KafkaTimeoutError(
                f"pykafka sink {self.sink_id}: committed {done} of {len(tokens)} transactions "
                f"of {self._what()}; EndTxn(commit) of {len(unanswered)} got no answer within "
                f"transaction.timeout.ms ({self.transaction_timeout_ms} ms) of trying, first "
                f"{unanswered[0]!r}: their records become visible if a commit arrived, and "
                f"are aborted by the coordinator otherwise{visible}")
        partition_of = {m.token.transactional_id: m.partition_id for m in prepared or ()
                        if m.token is not None}
        lost = [_lost(partition_of.get(token.transactional_id,
                                       _partition_of(token.transactional_id)), token,
                      f"EndTxn(commit) answered {BrokerError(code).name}")
                for token, code in zip(tokens, codes, strict=True) if code in LOST_CODES]
        failed = [(token, code) for token, code in zip(tokens, codes, strict=True)
                  if code and code not in LOST_CODES]
        if failed:
            token, code = failed[0]
            raise BrokerError(code, f"committing {len(failed)} transaction(s) of "
                              f"{self._what()} of the pykafka sink {self.sink_id}, first "
                              f"{token.transactional_id!r}")
        if lost:
            error = SinkDataLossError(self.sink_id or "", self.batch_id, lost)
            if self.options.fail_on_data_loss:
                raise error
            log.error("%s (failOnDataLoss=false: going on)", error)

    def _fence_retried_empty(self, cluster: Cluster) -> None:
        """An empty task touches no broker: if an earlier attempt of it failed after writing,
        what that attempt left open under the partition's id is aborted here."""
        for message in self.messages:
            if message is not None and message.outcome is TaskOutcome.EMPTY and \
                    message.attempt > 0:
                self._fence(cluster, f"{self.sink_id}-{message.partition_id}")

    def _abort_quietly(self, cluster: Cluster, tokens: list[TransactionToken]) -> None:
        try:
            self._end(cluster, tokens, False)
        except KafkaDsError as exc:
            log.warning("pykafka sink %s: could not abort %s (its transactions end by "
                        "transaction.timeout.ms): %s", self.sink_id, self._what(), exc)

    def _end(self, cluster: Cluster, tokens: Iterable[TransactionToken | None],
             commit: bool) -> list[int]:
        """EndTxn for every token. A commit asks again for those without an answer (a
        coordinator unreachable), up to transaction.timeout.ms: once one transaction of a
        batch is committed, the others must be too, and past that time the coordinator
        aborts them (and says so). An abort without an answer is left to that timeout."""
        wanted = [token for token in tokens if token is not None]
        if not wanted:
            return []
        if commit:
            return end_transactions_until(cluster, wanted, True,
                                          deadline_ms=self.transaction_timeout_ms,
                                          timeout_ms=_TIMEOUT_MS)
        codes = end_transactions(cluster, wanted, False, timeout_ms=_TIMEOUT_MS)
        unanswered = [token.transactional_id for token, code in zip(wanted, codes, strict=True)
                      if code == UNANSWERED]
        if unanswered:
            log.warning("pykafka sink %s: EndTxn(abort) of %d transaction(s) got no answer "
                        "(first %r): they end by transaction.timeout.ms", self.sink_id,
                        len(unanswered), unanswered[0])
        return codes

    def _restarted_or_shrunk(self, previous: CommitIntent | None) -> bool:
        return (previous is None or previous.run_id != self.run_id or self.run_id is None
                or previous.max_spark_partitions > len(self.messages))

    # --- abort and cleanup -------------------------------------------------------------------

    def abort(self) -> None:
        if not self.options.exactly_once:
            return
        if self.sink_id is None:
            log.warning("pykafka sink: %s failed before any task reported its transactional "
                        "id prefix (and the checkpoint is not on a local file system); "
                        "transactions it left open are aborted when the query restarts, or by "
                        "transaction.timeout.ms (set transactionalIdPrefix to abort them now)",
                        self._what())
            return
        failed = [index for index, message in enumerate(self.messages) if message is None]
        with _pooled(self.options) as cluster:
            store = self._store(cluster)
            if store is not None:
                # commit() may have given up on its intent write while the write was still in
                # flight: end it before reading, or it could land after this abort.
                store.settle(_TIMEOUT_MS)
            previous = store.latest(self.query_id) if store is not None else None
            if previous is not None and self.batch_id is not None and \
                    previous.batch_id >= self.batch_id:
                if previous.batch_id == self.batch_id:
                    self._finish_decided(cluster, previous)
                return
            if not failed and not self.streaming:
                return  # commit() failed, and already ended what it could
            self._end(cluster, [m.token for m in self._prepared()], False)
            for index in failed:
                self._fence(cluster, f"{self.sink_id}-{index}")
            self.abort_lingering(cluster, previous)
        log.info("pykafka sink %s: aborted %s", self.sink_id, self._what())

    def _finish_decided(self, cluster: Cluster, intent: CommitIntent) -> None:
        """abort() of a batch whose intent exists (commit() failed after writing it, or the
        settle completed the write it gave up on): commit what the intent records now,
        rather than leave it to a restart that may come after transaction.timeout.ms, when
        the coordinator has aborted it."""
        try:
            self._commit_all(cluster, list(intent.transactions), None)
        except KafkaDsError as exc:
            log.error("pykafka sink %s: batch %d failed after its commit was decided, and "
                      "committing its %d transaction(s) failed too (the restarted query "
                      "tries again): %s", self.sink_id, intent.batch_id,
                      len(intent.transactions), exc)
            return
        log.warning("pykafka sink %s: batch %d failed after its commit was decided; its %d "
                    "transaction(s) are committed (the restarted query writes nothing for it)",
                    self.sink_id, intent.batch_id, len(intent.transactions))

    def abort_lingering(self, cluster: Cluster, previous: CommitIntent | None) -> None:
        """Abort every transaction still open under the sink's prefix: at this point no task
        of this sink runs (or one that does is a zombie, which this fences)."""
        assert self.sink_id is not None
        pattern = re.compile(rf"{re.escape(self.sink_id)}-[0-9]+")
        try:
            listed = Admin(cluster).list_transactions(
                states=["Ongoing"], id_pattern=pattern.pattern, timeout_ms=_TIMEOUT_MS)
            lingering = sorted(item.transactional_id for item in listed
                               if pattern.fullmatch(item.transactional_id)
                               and item.state == "Ongoing")
        except BrokerError as exc:  # not authorised, or a broker without ListTransactions
            most = previous.max_spark_partitions if previous is not None else 0
            lingering = [f"{self.sink_id}-{index}" for index in range(len(self.messages), most)]
            log.info("pykafka sink %s: cannot list transactions (%s); fencing the %d ids "
                     "above this batch's partitions instead", self.sink_id, exc, len(lingering))
        for transactional_id in lingering:
            self._fence(cluster, transactional_id)
        if lingering:
            log.warning("pykafka sink %s: aborted %d transaction(s) left open by an earlier "
                        "run or attempt: %s", self.sink_id, len(lingering), lingering[:10])

    def _fence(self, cluster: Cluster, transactional_id: str) -> None:
        try:
            fence_transactional_id(cluster, transactional_id,
                                   transaction_timeout_ms=self.transaction_timeout_ms,
                                   timeout_ms=_TIMEOUT_MS)
        except KafkaDsError as exc:
            log.warning("pykafka sink %s: could not abort transactional id %r (it ends by "
                        "transaction.timeout.ms): %s", self.sink_id, transactional_id, exc)


def query_id_from_checkpoint(location: str | None) -> str | None:
    """The streaming query id recorded in a checkpoint on a local file system, else None.

    Only tasks learn the query id from Spark; when every task of a batch failed before
    reporting, this is how abort() still finds the default transactional id prefix. Remote
    checkpoints (HDFS, S3...) are out of Python's reach: there the transactions wait for the
    query's restart, or the option transactionalIdPrefix names them.
    """
    if not location:
        return None
    path = location[len("file:"):] if location.startswith("file:") else location
    if "://" in path:
        return None
    try:
        with open(os.path.join(path, "metadata")) as metadata:
            return str(json.loads(metadata.readline())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _slowest_phases(messages: Sequence[SinkCommitMessage | None]) -> dict[str, int]:
    slowest: dict[str, int] = {}
    for message in messages:
        for phase, ms in message.phases_ms if message is not None else ():
            slowest[phase] = max(slowest.get(phase, 0), ms)
    return slowest


@contextlib.contextmanager
def _pooled(options: SinkOptions) -> Iterator[Cluster]:
    """The commit worker's kept connection (Spark reuses the worker for later commits);
    dropped after an error, so the next commit reconnects."""
    try:
        yield sink_pool.cluster(options.properties)
    except BaseException:
        sink_pool.discard_cluster(options.properties)
        raise


def _lost(partition_id: int, token: TransactionToken, cause: str) -> LostTransaction:
    return LostTransaction(token.transactional_id, partition_id, token.partitions,
                           token.record_count, cause)


def _partition_of(transactional_id: str) -> int:
    suffix = transactional_id.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1
