"""Delivery results: what ``Producer.send`` returns, and how a batch's outcome reaches it.

Layer: client. The Java client's ``ProduceRequestResult`` / ``FutureRecordMetadata`` split:
one ``BatchResult`` per batch (an event set once the broker answers), and per record a small
``RecordFuture`` that points at its batch and index. A ``concurrent.futures.Future`` per
record would cost a lock and a condition variable per ``send()``; this costs one small
tuple, and offers the same methods (``result``, ``exception``, ``done``,
``add_done_callback``, ``cancel``...).

A batch split after MESSAGE_TOO_LARGE hands its records to new batches: the old result then
completes when all pieces have, and each record's future follows its piece.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.errors import KafkaDsError, KafkaTimeoutError

log = logging.getLogger(__name__)

# One lock for every result's callback list: completion and add_done_callback are rare
# compared to send(), and a lock per batch would cost more than it saves.
_CALLBACK_LOCK = threading.Lock()


class RecordMetadata(NamedTuple):
    """Where a record was written. ``offset`` is -1 when unknown (acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class RecordTooLargeError(KafkaDsError):
    """A record too large to send: the message names its size and the limit."""


class BatchResult:
    """The outcome of one batch: base offset and log-append time, or an error."""

    __slots__ = (
        "_callbacks",
        "_done",
        "_event",
        "_pending_children",
        "base_offset",
        "children",
        "error",
        "log_append_time_ms",
    )

    def __init__(self) -> None:
        # The event is made by the first wait() that finds the batch unfinished: most batches
        # are never waited on one by one (or only once done), and an Event (a Condition and
        # its lock) per batch was a visible share of send_arrow's cost at 100-record batches.
        self._event: threading.Event | None = None
        self._done = False
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] | None = []
        # After a split: (first index, piece) for each piece, in order.
        self.children: list[tuple[int, ProducerBatch]] | None = None
        self._pending_children = 0

    def done(self) -> bool:
        return self._done

    def wait(self, timeout_s: float | None = None) -> bool:
        if self._done:
            return True
        with _CALLBACK_LOCK:  # complete() sets _done and reads _event under the same lock
            if self._done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout_s)

    def complete(self, base_offset: int, log_append_time_ms: int,
                 error: BaseException | None) -> None:
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        with _CALLBACK_LOCK:
            callbacks, self._callbacks = self._callbacks, None
            self._done = True
            if self._event is not None:
                self._event.set()
        for callback in callbacks or ():
            try:
                callback()
            except Exception:  # a user callback must not kill the sender
                log.exception("producer delivery callback raised")

    def add_callback(self, callback: Callable[[], None]) -> None:
        with _CALLBACK_LOCK:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback()

    def split_into(self, pieces: list[tuple[int, ProducerBatch]]) -> None:
        """This batch's records now travel in ``pieces``; complete when they all have."""
        self.children = pieces
        self._pending_children = len(pieces)
        for _, piece in pieces:
            piece.result.add_callback(self._child_done)

    def _child_done(self) -> None:
        with _CALLBACK_LOCK:
            self._pending_children -= 1
            last = self._pending_children == 0
        if last:
            assert self.children is not None
            errors = [piece.result.error for _, piece in self.children if piece.result.error]
            self.complete(-1, -1, errors[0] if errors else None)


def locate(batch: ProducerBatch, index: int) -> tuple[ProducerBatch, int]:
    """The batch and index that hold record ``index`` of ``batch`` now (after splits)."""
    result: BatchResult = batch.result
    while result.children is not None:
        for start, piece in reversed(result.children):
            if index >= start:
                batch, index = piece, index - start
                break
        result = batch.result
    return batch, index


def metadata_for(batch: ProducerBatch, index: int) -> RecordMetadata:
    batch, index = locate(batch, index)
    result: BatchResult = batch.result
    if result.error is not None:
        raise result.error
    offset = result.base_offset + index if result.base_offset >= 0 else -1
    timestamp = (result.log_append_time_ms if result.log_append_time_ms >= 0
                 else batch.timestamps[index])
    return RecordMetadata(batch.topic, batch.partition, offset, timestamp)


class RecordFuture(tuple[ProducerBatch, int]):
    """The future of one sent record; resolves to ``RecordMetadata``.

    Implements the ``concurrent.futures.Future`` methods a caller uses. Its callbacks run on
    the producer's sender thread: keep them short, and never wait on the producer in them.

    Underneath it is the pair (batch, index), made as ``RecordFuture((batch, index))``: a
    tuple subclass is built in C, without the Python ``__init__`` call a slotted class costs
    (about a quarter of ``send()``'s time for small records).
    """

    __slots__ = ()

    @property
    def batch(self) -> ProducerBatch:
        """The batch the record was appended to (it may have been split since)."""
        return self[0]

    def done(self) -> bool:
        return bool(self[0].result.done())

    def running(self) -> bool:
        return not self.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False  # a record handed to the producer cannot be taken back

    def _wait(self, timeout: float | None) -> None:
        if not self[0].result.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s (it may still "
                                    "be delivered; delivery.timeout.ms bounds the wait)")

    def result(self, timeout: float | None = None) -> RecordMetadata:
        self._wait(timeout)
        return metadata_for(self[0], self[1])

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        batch, _ = locate(self[0], self[1])
        error: BaseException | None = batch.result.error
        return error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self[0].result.add_callback(lambda: fn(self))

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"RecordFuture({self[0].topic}-{self[0].partition}, {state})"


def run_record_callbacks(batch: ProducerBatch) -> None:
    """Call the ``send(callback=...)`` callbacks of a completed batch: (metadata, error)."""
    for index, callback in batch.callbacks or ():
        try:
            try:
                metadata = metadata_for(batch, index)
            except BaseException as exc:
                callback(None, exc)
            else:
                callback(metadata, None)
        except Exception:
            log.exception("send() callback raised")


class BulkFuture:
    """The outcome of ``Producer.send_many``: done when every batch it wrote to is done."""

    __slots__ = ("_batches", "count")

    def __init__(self, batches: list[ProducerBatch], count: int) -> None:
        self._batches = batches
        self.count = count

    def done(self) -> bool:
        return all(batch.result.done() for batch in self._batches)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch in self._batches:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not batch.result.wait(remaining):
                raise KafkaTimeoutError(f"records not acknowledged within {timeout} s")
        for batch in self._batches:
            error = _first_error(batch)
            if error is not None:
                return error
        return None

    def result(self, timeout: float | None = None) -> int:
        """The number of records, once all are acknowledged; raises the first failure."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self.count

    def failures(self) -> list[tuple[ProducerBatch, BaseException]]:
        """Every batch that failed so far, with its error (all of them, for a summary)."""
        out = []
        for batch in self._batches:
            error = _first_error(batch) if batch.result.done() else None
            if error is not None:
                out.append((batch, error))
        return out


def _first_error(batch: ProducerBatch) -> BaseException | None:
    result: BatchResult = batch.result
    if result.children is not None:
        for _, piece in result.children:
            error = _first_error(piece)
            if error is not None:
                return error
        return None
    return result.error


# How many of a batch's rejected records an error message names; the rest are counted.
SHOWN_RECORD_ERRORS = 3


def summarize_record_errors(record_errors: Any, message: str | None = None) -> str:
    """A Produce response's per-record errors in a few lines, however many there are.

    A whole batch rejected for one reason (INVALID_TIMESTAMP on every record) becomes "1000
    records rejected: record 0: ...; record 1: ...; record 2: ...; and 997 more", not a
    line per record.
    """
    shown = "; ".join(f"record {error.batch_index}: {error.batch_index_error_message}"
                      for error in record_errors[:SHOWN_RECORD_ERRORS])
    rest = len(record_errors) - SHOWN_RECORD_ERRORS
    text = f"{len(record_errors)} record(s) rejected: {shown}" + (
        f"; and {rest} more" if rest > 0 else "")
    return f"{message}; {text}" if message else text


def check_record_size(size: int, config: Any, topic: str) -> None:
    """Refuse, in send(), a record that could never be sent (Java's RecordTooLargeException)."""
    if size > config.max_request_size_bytes:
        raise RecordTooLargeError(
            f"a record of about {size} bytes for topic {topic!r} is larger than "
            f"max.request.size ({config.max_request_size_bytes} bytes): raise max.request.size"
            " (and the topic's max.message.bytes), or send smaller records")
    if size > config.buffer_memory_bytes:
        raise RecordTooLargeError(
            f"a record of about {size} bytes for topic {topic!r} is larger than buffer.memory "
            f"({config.buffer_memory_bytes} bytes): raise buffer.memory")
