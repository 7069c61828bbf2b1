"""The transactional calls of ``Producer``: init, begin, send offsets, prepare, commit, abort.

Layer: client. A mixin, so that ``producer.py`` keeps to appending records; ``Producer``
inherits these methods and holds the state they use (``_txn``, the sender, the config). The
wire work runs on the sender thread (``transactions.TransactionManager``'s tasks); these
calls drive the state machine around it and wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kafka_ds.client.producer_config import ProducerConfig
from kafka_ds.client.sender import Sender
from kafka_ds.client.transactions import TransactionManager
from kafka_ds.protocol.errors import KafkaTimeoutError
from kafka_ds.protocol.txn_state import (
    TransactionAbortableError,
    TransactionStateError,
    TransactionToken,
    TxnState,
)


class ProducerTransactions:
    """Mixed into ``Producer``: the calls of a producer with a ``transactional.id``."""

    config: ProducerConfig
    _txn: TransactionManager | None
    _sender: Sender
    _lock: threading.Lock  # Producer's: every append holds it

    def flush(self, timeout_ms: int | None = None) -> None:
        raise NotImplementedError  # Producer.flush

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError("this producer has no transactional.id: set it to use "
                                        "transactions")
        return self._txn

    def _run(self, task: Callable[[Sender], Any], timeout_ms: int | None, what: str) -> Any:
        timeout = self.config.max_block_ms if timeout_ms is None else timeout_ms
        future = self._sender.submit(task)
        try:
            return future.result(timeout / 1000 + 5)
        except TimeoutError:
            raise KafkaTimeoutError(f"{what} did not complete within {timeout} ms") from None

    def init_transactions(self, timeout_ms: int | None = None) -> None:
        """Register the transactional.id, fencing older producers using it and completing
        the transaction they left open. Call once, before the first transaction (again
        after prepare_transaction() to start over with a fresh epoch). If it times out,
        call it again."""
        txn = self._transactions()
        action = "init_transactions()"
        timeout = self.config.max_block_ms if timeout_ms is None else timeout_ms
        with txn.lock:
            if not txn.machine.resume(action):
                txn.machine.start(TxnState.INITIALIZING, action)
        try:
            self._run(lambda sender: txn.init_task(sender, timeout), timeout, action)
        except KafkaTimeoutError as exc:
            raise self._unfinished(action, exc) from exc
        except BaseException as exc:
            with txn.lock:
                txn.machine.transition(TxnState.FATAL_ERROR, exc)
            raise
        with txn.lock:
            txn.machine.transition(TxnState.READY)

    @staticmethod
    def _unfinished(action: str, exc: KafkaTimeoutError) -> KafkaTimeoutError:
        """The error of a transactional call that timed out part-way (KIP-266)."""
        return KafkaTimeoutError(f"{exc}. The broker may have completed it: call {action} "
                                 "again to finish (nothing else is allowed until then)")

    def begin_transaction(self) -> None:
        txn = self._transactions()
        txn.machine.require(TxnState.READY, action="begin_transaction()")
        self._run(lambda sender: txn.begin_task(sender, self.config.max_block_ms), None,
                  "begin_transaction()")
        with txn.lock:
            txn.machine.transition(TxnState.IN_TRANSACTION)

    @property
    def transaction_state(self) -> TxnState | None:
        """Where the transactional state machine is (None without a transactional.id)."""
        return self._txn.machine.state if self._txn is not None else None

    @property
    def transaction_protocol(self) -> int | None:
        """1 or 2: the protocol of the current transaction (None outside one)."""
        return self._txn.protocol if self._txn is not None else None

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], Any],
                                    group_id: str, timeout_ms: int | None = None) -> None:
        """Commit consumer offsets with the transaction: {(topic, partition): offset or
        (offset, metadata)}; they become visible to the group only if it commits."""
        txn = self._transactions()
        txn.machine.require(TxnState.IN_TRANSACTION, action="send_offsets_to_transaction()")
        timeout = self.config.max_block_ms if timeout_ms is None else timeout_ms
        try:
            self._run(lambda sender: txn.send_offsets_task(sender, offsets, group_id, timeout),
                      timeout, "send_offsets_to_transaction()")
        except TransactionAbortableError as exc:
            txn.fail(exc)
            raise

    def _stop_appends(self, txn: TransactionManager, target: TxnState, action: str) -> None:
        """Move to ``target`` (PREPARED, COMMITTING or ABORTING) under the producer's lock,
        which every append holds while it checks for IN_TRANSACTION: from here on send()
        refuses, and every record it accepted is queued for the flush that follows. Flushing
        first and moving after let a send() from another thread in between join no flush,
        and EndTxn or the token could go out without it (the Java client also moves to
        COMMITTING before it flushes)."""
        with self._lock, txn.lock:
            if target is TxnState.PREPARED:
                txn.machine.transition(target)
            else:
                txn.machine.start(target, action)

    def _flush_transaction(self, timeout_ms: int | None, action: str, state: TxnState,
                           ) -> None:
        """Wait for every record of the transaction; it must still be in ``state`` then (a
        batch that failed made it abortable)."""
        txn = self._transactions()
        try:
            self.flush(timeout_ms)
        except KafkaTimeoutError as exc:
            if state is TxnState.COMMITTING:
                raise self._unfinished(action, exc) from exc
            raise KafkaTimeoutError(
                f"{action}: {exc}. The transaction is prepared but not every record is "
                "acknowledged: call commit_transaction() (which waits for them) or "
                "abort_transaction()") from exc
        txn.machine.require(state, action=action)

    def prepare_transaction(self, timeout_ms: int | None = None) -> TransactionToken:
        """Flush and wait for every acknowledgement, without ending the transaction.

        Returns the token another process passes to ``complete_transaction`` to commit or
        abort it. The transaction must end before ``transaction.timeout.ms`` after its first
        record, or the coordinator aborts it. From the call on, send() refuses.
        """
        txn = self._transactions()
        action = "prepare_transaction()"
        txn.machine.require(TxnState.IN_TRANSACTION, action=action)
        self._stop_appends(txn, TxnState.PREPARED, action)
        self._flush_transaction(timeout_ms, action, TxnState.PREPARED)
        return txn.token()

    def commit_transaction(self, timeout_ms: int | None = None) -> None:
        """Flush, then commit. From the call on, send() refuses. If it times out, call it
        again: the commit may have happened, and calling again finishes it (the Java
        client's rule, KIP-266)."""
        txn = self._transactions()
        action = "commit_transaction()"
        if not txn.machine.resume(action):
            txn.machine.require(TxnState.IN_TRANSACTION, TxnState.PREPARED, action=action)
            self._stop_appends(txn, TxnState.COMMITTING, action)
        # Again when resumed: the first call may have timed out in this flush.
        self._flush_transaction(timeout_ms, action, TxnState.COMMITTING)
        self._end(txn, True, timeout_ms)

    def abort_transaction(self, timeout_ms: int | None = None) -> None:
        """Drop the records not yet sent, wait for those in flight (retries included), and
        abort. If it times out or fails, call it again."""
        txn = self._transactions()
        action = "abort_transaction()"
        if not txn.machine.resume(action):
            txn.machine.require(TxnState.IN_TRANSACTION, TxnState.PREPARED,
                                TxnState.ABORTABLE_ERROR, action=action)
            self._stop_appends(txn, TxnState.ABORTING, action)
        # Batches never sent are dropped now (and by the sender on every loop while
        # aborting); batches that went out, retries included, are waited for: EndTxn must
        # not overtake them.
        self._run(lambda sender: txn.abort_undrained(sender), timeout_ms, action)
        try:
            self.flush(timeout_ms)
        except KafkaTimeoutError as exc:
            raise self._unfinished(action, exc) from exc
        self._end(txn, False, timeout_ms)

    def _end(self, txn: TransactionManager, commit: bool, timeout_ms: int | None) -> None:
        """EndTxn (unless an earlier call got it through), then, after an abort that left
        sequences out of step, a new epoch; READY at last. A timeout keeps the state (the
        call is pending: calling it again resumes here)."""
        timeout = self.config.max_block_ms if timeout_ms is None else timeout_ms
        action = "commit_transaction()" if commit else "abort_transaction()"
        try:
            if (txn.partitions or txn.has_offsets) and not txn.ended:
                self._run(lambda sender: txn.end_task(sender, commit, timeout), timeout, action)
            if not commit and txn.state.abortable_reason is not None:
                # Sequences of this epoch may be out of step with the broker (a batch failed
                # or expired): continue with a new epoch, as the Java client does.
                self._run(lambda sender: txn.init_task(sender, timeout, bump=True), timeout,
                          action)
        except KafkaTimeoutError as exc:
            raise self._unfinished(action, exc) from exc
        except TransactionAbortableError as exc:
            txn.fail(exc)  # a commit can only abort now; an abort stays pending
            raise
        except BaseException as exc:
            with txn.lock:
                txn.machine.transition(TxnState.FATAL_ERROR, exc)
            raise
        with txn.lock:
            txn.machine.transition(TxnState.READY)

