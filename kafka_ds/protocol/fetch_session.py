"""Incremental fetch sessions (KIP-227): what one client keeps per broker, and the requests.

Layer: protocol (sans-IO). Builds ``FetchRequest`` values and reads ``FetchResponse`` values;
never touches a socket or a clock. The fetcher (``client.fetcher``) owns one ``FetchSession``
per broker and drives it: ``build`` -> send -> ``on_response`` or ``on_failure``.

Why sessions: a full Fetch lists every partition on every request. With a session, the broker
remembers the partitions and their fetch state; each later request lists only the partitions
whose fetch position, max bytes or leader epoch changed, plus ``forgotten_topics_data`` for
partitions to drop, and the response lists only partitions that have records or whose metadata
(high watermark, log start, last stable offset, error) changed. A partition missing from an
incremental response therefore means "nothing new", which is why the session must remember
which partitions it holds.

Request metadata ``(session_id, epoch)`` on the wire:

* ``(0, 0)``      full request, create a session if the broker can (INITIAL);
* ``(id, 0)``     full request, close session ``id`` and create a new one;
* ``(id, n>0)``   incremental request in session ``id``; ``n`` is the previous epoch + 1;
* ``(id, -1)``    close session ``id`` (the request itself is then sessionless);
* ``(0, -1)``     full request, no session at all (``FetchSession(sessionless=True)``: a
  one-off read of a record or two, where opening a session costs a close round trip).

State machine (only a *successful* response moves it forward; a request that failed leaves
the committed view untouched, and the next request is full)::

                      full request (0, 0)
        +-------------+  ok, session id 0 back (the broker made no session): stay
        |   INITIAL   |<----------------------------------------------------------+
        | id 0, ep 0  |<-- FETCH_SESSION_ID_NOT_FOUND; closed by the broker;      |
        +-------------+    close_request() sent                                   |
              | ok, session id X > 0 back                                          |
              v                                                                    |
        +-------------+  ok: epoch n + 1, partitions committed                     |
        |    OPEN     |-----------+                                                |
        | id X, ep n  |<----------+  (incremental: changed partitions only)        |
        +-------------+                                                            |
              | INVALID_FETCH_SESSION_EPOCH, another top-level error, an incremental|
              | response that does not match the request, or no response at all    |
              v (we cannot know whether the broker applied it)                     |
        +-------------+  full request (X, 0): the broker drops X and opens Y       |
        |   RESYNC    |  ok, id Y -> OPEN(Y, 1); ok, id 0 -------------------------+
        | id X, ep 0  |
        +-------------+

A *full* response that does not match its request is not used either; the next request is
full again and retires the session that response opened (its id, or INITIAL if it opened
none): the old id was already retired by the full request. An empty full response with a
throttle time (KIP-219) only delays the next request.

The epoch after 2**31 - 1 wraps to 1 (0 and -1 are reserved), as the Java client does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    PartitionData,
)
from kafka_ds.protocol.types import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
ZERO_UUID = uuid.UUID(int=0)
# The first Fetch version naming topics by id instead of by name (KIP-516).
TOPIC_ID_VERSION = 13


class PartitionFetch(NamedTuple):
    """What a request says about one partition; a session resends it only when it changes."""

    fetch_offset: int
    partition_max_bytes: int
    topic_id: uuid.UUID = ZERO_UUID
    # The leader epoch from metadata (KIP-320): a stale leader answers FENCED_LEADER_EPOCH.
    current_leader_epoch: int = -1


@dataclass(frozen=True)
class PendingFetch:
    """A request built by ``FetchSession.build`` and what the session becomes if it succeeds."""

    request: FetchRequest
    version: int
    is_full: bool
    session_id: int
    epoch: int
    # Partitions listed in the request, and partitions asked to be forgotten.
    sent: dict[TopicPartition, PartitionFetch]
    forgotten: list[TopicPartition]
    # The session's partitions once this request is applied by the broker.
    next_partitions: dict[TopicPartition, PartitionFetch]

    @property
    def is_close(self) -> bool:
        # (0, -1) is a sessionless full request, not a close.
        return self.epoch == FINAL_EPOCH and self.session_id != INVALID_SESSION_ID


class FetchOutcome(NamedTuple):
    """What ``FetchSession.on_response`` made of a response.

    ``ok`` False means the response must not be used (session-level error or a response that
    does not match the request): ``error_code`` or ``problem`` says why, and the session has
    already arranged for the next request to be full.
    """

    ok: bool
    partitions: list[tuple[TopicPartition, PartitionData]]
    error_code: int = 0
    problem: str | None = None
    # KIP-219: an empty full response with a throttle time is the broker asking us to slow
    # down, not a broken session (nothing to reset, nothing to count).
    throttled: bool = False


@dataclass
class FetchSession:
    """One client's fetch session with one broker (``node_id``)."""

    node_id: int
    session_id: int = INVALID_SESSION_ID
    # The epoch the *next* request carries: 0 means the next request is full.
    next_epoch: int = INITIAL_EPOCH
    # The partitions the broker holds for us, as last confirmed by a successful response.
    partitions: dict[TopicPartition, PartitionFetch] = field(default_factory=dict)
    # Version the session was opened with: topic ids (v13+) cannot be mixed with names.
    version: int | None = None
    full_requests: int = 0
    incremental_requests: int = 0
    # Every request full and outside any session (0, -1): the broker opens none, so there
    # is none to close.
    sessionless: bool = False

    @property
    def is_open(self) -> bool:
        return self.session_id != INVALID_SESSION_ID

    @property
    def next_is_full(self) -> bool:
        return self.next_epoch == INITIAL_EPOCH

    # --- requests --------------------------------------------------------------------------

    def build(self, wanted: Mapping[TopicPartition, PartitionFetch], *, version: int,
              max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int = 0,
              rack_id: str = "") -> PendingFetch:
        """The next request for exactly the partitions in ``wanted`` (in that order).

        Full when no session is open (or it must be resynchronised, or the version changed);
        otherwise incremental: only partitions that are new or whose ``PartitionFetch``
        changed, and the session's partitions missing from ``wanted`` as forgotten.
        """
        if version < 7:
            raise ValueError("fetch sessions need Fetch v7+")
        if self.version is not None and version != self.version and not self.next_is_full:
            # Names vs topic ids: a session opened in one dialect is not continued in the other.
            self.reset(close_existing=True)
        use_ids = version >= TOPIC_ID_VERSION
        if use_ids and any(p.topic_id == ZERO_UUID for p in wanted.values()):
            raise ValueError(f"Fetch v{version} names topics by id, and some partitions have no "
                             "topic id: use v12 or refresh metadata")
        next_partitions = dict(wanted)
        if self.sessionless:
            request = FetchRequest(
                max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=isolation_level, session_id=INVALID_SESSION_ID,
                session_epoch=FINAL_EPOCH, topics=_topics(next_partitions, use_ids),
                forgotten_topics_data=[], rack_id=rack_id if version >= 11 else "")
            return PendingFetch(request, version, True, INVALID_SESSION_ID, FINAL_EPOCH,
                                dict(next_partitions), [], next_partitions)
        if any(tp in self.partitions and self.partitions[tp].topic_id != state.topic_id
               for tp, state in wanted.items()):
            # A topic was recreated under the same name: its new id cannot be slipped into
            # the session beside the old one, so start a fresh session.
            self.reset(close_existing=True)
        if self.next_is_full:
            sent = dict(wanted)
            forgotten: list[TopicPartition] = []
            is_full = True
        else:
            sent = {tp: state for tp, state in wanted.items()
                    if self.partitions.get(tp) != state}
            forgotten = [tp for tp in self.partitions if tp not in wanted]
            is_full = False
        request = FetchRequest(
            max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
            isolation_level=isolation_level, session_id=self.session_id,
            session_epoch=self.next_epoch, topics=_topics(sent, use_ids),
            forgotten_topics_data=_forgotten(forgotten, self.partitions, use_ids),
            rack_id=rack_id if version >= 11 else "",
        )
        return PendingFetch(request, version, is_full, self.session_id, self.next_epoch, sent,
                            forgotten, next_partitions)

    def close_request(self, *, version: int, isolation_level: int = 0) -> PendingFetch | None:
        """A request closing the open session (epoch -1, no partitions); None if none is open.

        The session is forgotten at once: whatever the answer, the next request is full.
        """
        if not self.is_open:
            return None
        request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=0,
                               isolation_level=isolation_level, session_id=self.session_id,
                               session_epoch=FINAL_EPOCH, topics=[], forgotten_topics_data=[])
        pending = PendingFetch(request, version, True, self.session_id, FINAL_EPOCH, {}, [], {})
        self.reset(close_existing=False)
        return pending

    # --- responses -------------------------------------------------------------------------

    def on_response(self, pending: PendingFetch, response: FetchResponse) -> FetchOutcome:
        """Commit ``pending`` if ``response`` is a good answer to it; else prepare a resync."""
        if pending.is_close:
            return FetchOutcome(True, [])
        if response.error_code:
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.reset(close_existing=False)
            else:
                self.reset(close_existing=True)
            return FetchOutcome(False, [], response.error_code)
        names = {state.topic_id: tp.topic for tp, state in pending.next_partitions.items()}
        partitions: list[tuple[TopicPartition, PartitionData]] = []
        for topic in response.responses:
            name = names.get(topic.topic_id) if pending.version >= TOPIC_ID_VERSION \
                else topic.topic
            if name is None:
                self.reset(close_existing=True)
                return FetchOutcome(False, [], problem=f"response names topic id "
                                    f"{topic.topic_id}, which the session does not hold")
            for data in topic.partitions:
                partitions.append((TopicPartition(name, data.partition_index), data))
        if pending.is_full and not partitions and response.throttle_time_ms > 0:
            self._restart(response.session_id)
            return FetchOutcome(False, [], throttled=True)
        problem = self._check(pending, partitions)
        if problem is not None:
            if pending.is_full:
                # The full request already retired the old session: the broker holds the
                # one it just answered with (or none). Retire that one next, not the old id
                # (which the broker no longer knows: FETCH_SESSION_ID_NOT_FOUND, and the new
                # session would sit in the broker's cache until it expired).
                self._restart(response.session_id)
            else:
                self.reset(close_existing=True)
            return FetchOutcome(False, [], problem=problem)
        # Commit: the broker has applied the request.
        self.version = pending.version
        if pending.is_full:
            self.full_requests += 1
        else:
            self.incremental_requests += 1
        if response.session_id == INVALID_SESSION_ID:
            # A full request the broker made no session for (its cache is full), or an
            # incremental one after which the broker closed the session: start over.
            self.reset(close_existing=False)
        elif pending.is_full:
            self.session_id = response.session_id
            self.next_epoch = 1
            self.partitions = dict(pending.next_partitions)
        else:
            self.next_epoch = 1 if pending.epoch >= _MAX_EPOCH else pending.epoch + 1
            self.partitions = dict(pending.next_partitions)
        return FetchOutcome(True, partitions)

    def on_failure(self, pending: PendingFetch) -> None:
        """The request got no answer (connection lost, timeout): resync with a full request.

        We cannot tell whether the broker applied it, so neither epoch is safe to use.
        """
        if pending.is_close:
            return
        self.reset(close_existing=True)

    def _restart(self, broker_session_id: int) -> None:
        """The next request is full and retires ``broker_session_id`` (0: none to retire)."""
        self.session_id = broker_session_id
        self.next_epoch = INITIAL_EPOCH
        self.partitions = {}

    def reset(self, *, close_existing: bool) -> None:
        """Make the next request full; with ``close_existing`` it also retires the old id."""
        if not close_existing:
            self.session_id = INVALID_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self.partitions = {}

    def _check(self, pending: PendingFetch,
               partitions: list[tuple[TopicPartition, PartitionData]]) -> str | None:
        returned = {tp for tp, _ in partitions}
        if len(returned) < len(partitions):
            # A broker lists each partition once; a second entry (a damaged partition index)
            # may hold another partition's records: believe neither and fetch again.
            twice = sorted({str(tp) for tp, _ in partitions
                            if sum(other == tp for other, _ in partitions) > 1})
            return f"response lists {', '.join(twice)} more than once"
        extra = returned - pending.next_partitions.keys()
        if extra:
            names = ", ".join(sorted(str(tp) for tp in extra))
            return f"response holds partitions the session does not: {names}"
        if pending.is_full:
            omitted = pending.next_partitions.keys() - returned
            if omitted:
                names = ", ".join(sorted(str(tp) for tp in omitted))
                return f"full response omits requested partitions: {names}"
        return None


def _topics(sent: Mapping[TopicPartition, PartitionFetch], use_ids: bool) -> list[FetchTopic]:
    by_topic: dict[str, FetchTopic] = {}
    for tp, state in sent.items():
        topic = by_topic.get(tp.topic)
        if topic is None:
            topic = (FetchTopic(topic_id=state.topic_id) if use_ids
                     else FetchTopic(topic=tp.topic))
            by_topic[tp.topic] = topic
        topic.partitions.append(FetchPartition(
            partition=tp.partition, current_leader_epoch=state.current_leader_epoch,
            fetch_offset=state.fetch_offset, partition_max_bytes=state.partition_max_bytes))
    return list(by_topic.values())


def _forgotten(forgotten: Iterable[TopicPartition], held: Mapping[TopicPartition, PartitionFetch],
               use_ids: bool) -> list[ForgottenTopic]:
    by_topic: dict[tuple[str, uuid.UUID], ForgottenTopic] = {}
    for tp in forgotten:
        topic_id = held[tp].topic_id if tp in held else ZERO_UUID
        key = (tp.topic, topic_id)
        entry = by_topic.get(key)
        if entry is None:
            entry = (ForgottenTopic(topic_id=topic_id) if use_ids
                     else ForgottenTopic(topic=tp.topic))
            by_topic[key] = entry
        entry.partitions.append(tp.partition)
    return list(by_topic.values())
