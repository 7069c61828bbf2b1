"""The KIP-227 fetch session state machine, sans-IO: requests built, responses committed."""

from __future__ import annotations

import uuid

import pytest

from kafka_ds.protocol.errors import ErrorCode
from kafka_ds.protocol.fetch_session import (
    FINAL_EPOCH,
    FetchSession,
    PartitionFetch,
    PendingFetch,
)
from kafka_ds.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from kafka_ds.protocol.schema import decode_exact, encode
from kafka_ds.protocol.types import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
IDS = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}
V = 17  # a topic-id version
OPTS = {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20}


def state(tp: TopicPartition, offset: int, max_bytes: int = 1 << 20, epoch: int = -1,
          topic_id: uuid.UUID | None = None) -> PartitionFetch:
    return PartitionFetch(offset, max_bytes, topic_id or IDS[tp.topic], epoch)


def response(pending: PendingFetch, session_id: int,
             partitions: list[TopicPartition] | None = None, error: int = 0,
             names: bool = False) -> FetchResponse:
    """A broker's answer listing ``partitions`` (default: every partition the request sent)."""
    listed = list(pending.sent) if partitions is None else partitions
    topics: dict[str, FetchableTopicResponse] = {}
    for tp in listed:
        entry = topics.setdefault(tp.topic, FetchableTopicResponse(
            topic=tp.topic if names else "", topic_id=IDS[tp.topic]))
        entry.partitions.append(PartitionData(partition_index=tp.partition, error_code=0,
                                              high_watermark=10, records=b""))
    return FetchResponse(error_code=error, session_id=session_id, responses=list(topics.values()))


def sent_partitions(request: FetchRequest) -> set[tuple[uuid.UUID, int, int]]:
    return {(topic.topic_id, p.partition, p.fetch_offset)
            for topic in request.topics for p in topic.partitions}


def open_session(wanted: dict[TopicPartition, PartitionFetch]) -> FetchSession:
    session = FetchSession(node_id=1)
    pending = session.build(wanted, version=V, **OPTS)
    assert session.on_response(pending, response(pending, 77)).ok
    return session


def test_full_then_incremental_then_empty_incremental() -> None:
    session = FetchSession(node_id=1)
    wanted = {T0: state(T0, 0), T1: state(T1, 5)}
    first = session.build(wanted, version=V, **OPTS)
    assert first.is_full and first.request.session_id == 0 and first.request.session_epoch == 0
    assert sent_partitions(first.request) == {(IDS["t"], 0, 0), (IDS["t"], 1, 5)}
    outcome = session.on_response(first, response(first, 77))
    assert outcome.ok and [tp for tp, _ in outcome.partitions] == [T0, T1]
    assert session.session_id == 77 and session.next_epoch == 1

    # T0 advanced: only T0 goes out, with epoch 1.
    wanted[T0] = state(T0, 40)
    second = session.build(wanted, version=V, **OPTS)
    assert not second.is_full
    assert (second.request.session_id, second.request.session_epoch) == (77, 1)
    assert sent_partitions(second.request) == {(IDS["t"], 0, 40)}
    assert second.request.forgotten_topics_data == []
    # An incremental response may list only some partitions (here T0 had data).
    assert session.on_response(second, response(second, 77, [T0])).ok
    assert session.next_epoch == 2

    # Nothing changed: the request carries no partitions at all.
    third = session.build(wanted, version=V, **OPTS)
    assert (third.request.session_epoch, third.request.topics) == (2, [])
    assert third.request.forgotten_topics_data == []
    assert session.on_response(third, response(third, 77, [])).ok
    assert session.next_epoch == 3
    assert (session.full_requests, session.incremental_requests) == (1, 2)


def test_request_encodes_at_every_session_version() -> None:
    for version, names in ((7, True), (12, True), (13, False), (17, False)):
        session = FetchSession(node_id=1)
        pending = session.build({T0: state(T0, 3)}, version=version, **OPTS)
        raw = encode(pending.request, version)
        assert decode_exact(FetchRequest, version, raw) == pending.request
        if names:
            assert pending.request.topics[0].topic == "t"
        else:
            assert pending.request.topics[0].topic_id == IDS["t"]
        assert session.on_response(pending, response(pending, 5, names=names)).ok


def test_changed_max_bytes_or_leader_epoch_is_resent() -> None:
    session = open_session({T0: state(T0, 0), T1: state(T1, 0)})
    pending = session.build({T0: state(T0, 0, max_bytes=99), T1: state(T1, 0, epoch=4)},
                            version=V, **OPTS)
    assert {p.partition: (p.partition_max_bytes, p.current_leader_epoch)
            for p in pending.request.topics[0].partitions} == {0: (99, -1), 1: (1 << 20, 4)}


def test_forgotten_partitions() -> None:
    session = open_session({T0: state(T0, 0), T1: state(T1, 0), U0: state(U0, 0)})
    pending = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    assert pending.request.topics == []
    forgotten = {(f.topic_id, tuple(f.partitions)) for f in pending.request.forgotten_topics_data}
    assert forgotten == {(IDS["t"], (1,)), (IDS["u"], (0,))}
    assert session.on_response(pending, response(pending, 77, [])).ok
    assert set(session.partitions) == {T0}
    # A forgotten partition that comes back is sent again as new.
    again = session.build({T0: state(T0, 0), T1: state(T1, 0)}, version=V, **OPTS)
    assert sent_partitions(again.request) == {(IDS["t"], 1, 0)}


def test_forgotten_by_name_before_v13() -> None:
    session = FetchSession(node_id=1)
    first = session.build({T0: state(T0, 0), T1: state(T1, 0)}, version=12, **OPTS)
    assert session.on_response(first, response(first, 9, names=True)).ok
    pending = session.build({T0: state(T0, 0)}, version=12, **OPTS)
    assert [(f.topic, f.partitions) for f in pending.request.forgotten_topics_data] == [("t", [1])]


def test_state_not_advanced_when_the_request_fails() -> None:
    session = open_session({T0: state(T0, 0)})
    pending = session.build({T0: state(T0, 50)}, version=V, **OPTS)
    session.on_failure(pending)
    # Not committed: the next request is full, retiring the old session id.
    assert session.partitions == {} and session.next_is_full
    retry = session.build({T0: state(T0, 50)}, version=V, **OPTS)
    assert retry.is_full and (retry.request.session_id, retry.request.session_epoch) == (77, 0)
    assert sent_partitions(retry.request) == {(IDS["t"], 0, 50)}
    assert session.on_response(retry, response(retry, 78)).ok
    assert (session.session_id, session.next_epoch) == (78, 1)


@pytest.mark.parametrize(("error", "expected_id"), [
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0),
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 77),
])
def test_session_errors_reset_to_a_full_fetch(error: int, expected_id: int) -> None:
    session = open_session({T0: state(T0, 0)})
    pending = session.build({T0: state(T0, 10)}, version=V, **OPTS)
    outcome = session.on_response(pending, response(pending, 0, [], error=error))
    assert not outcome.ok and outcome.error_code == error
    retry = session.build({T0: state(T0, 10)}, version=V, **OPTS)
    assert retry.is_full
    assert (retry.request.session_id, retry.request.session_epoch) == (expected_id, 0)


def test_response_not_matching_the_session_is_refused() -> None:
    session = open_session({T0: state(T0, 0)})
    pending = session.build({T0: state(T0, 1)}, version=V, **OPTS)
    outcome = session.on_response(pending, response(pending, 77, [T0, T1]))
    assert not outcome.ok and "t-1" in (outcome.problem or "")
    assert session.next_is_full
    # A full response must list every partition it was asked for.
    full = session.build({T0: state(T0, 1), T1: state(T1, 0)}, version=V, **OPTS)
    outcome = session.on_response(full, response(full, 77, [T0]))
    assert not outcome.ok and "omits" in (outcome.problem or "")


def test_a_response_listing_a_partition_twice_is_refused() -> None:
    """A damaged partition index can turn t-0's entry into a second t-1: taken as it came,
    t-0's records would be handed out as t-1's when both sit at the same offset."""
    session = open_session({T0: state(T0, 0), T1: state(T1, 0)})
    pending = session.build({T0: state(T0, 0), T1: state(T1, 0)}, version=V, **OPTS)
    assert not pending.is_full
    outcome = session.on_response(pending, response(pending, 77, [T1, T1]))
    assert not outcome.ok and "t-1 more than once" in (outcome.problem or "")
    assert outcome.partitions == [] and session.next_is_full


def test_broker_without_session_room_keeps_full_requests() -> None:
    session = FetchSession(node_id=1)
    first = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    assert session.on_response(first, response(first, 0)).ok
    again = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    assert again.is_full and (again.request.session_id, again.request.session_epoch) == (0, 0)
    assert sent_partitions(again.request) == {(IDS["t"], 0, 0)}


def test_incremental_response_with_session_id_zero_means_closed_by_broker() -> None:
    session = open_session({T0: state(T0, 0)})
    pending = session.build({T0: state(T0, 3)}, version=V, **OPTS)
    assert session.on_response(pending, response(pending, 0, [T0])).ok
    nxt = session.build({T0: state(T0, 3)}, version=V, **OPTS)
    assert nxt.is_full and nxt.request.session_id == 0


def test_close() -> None:
    session = FetchSession(node_id=1)
    assert session.close_request(version=V) is None  # nothing open
    session = open_session({T0: state(T0, 0)})
    close = session.close_request(version=V)
    assert close is not None and close.is_close
    assert (close.request.session_id, close.request.session_epoch) == (77, FINAL_EPOCH)
    assert close.request.topics == [] and close.request.forgotten_topics_data == []
    encode(close.request, V)
    assert not session.is_open and session.next_is_full
    assert session.on_response(close, FetchResponse(session_id=0)).ok


def test_epoch_wraps_to_one() -> None:
    session = open_session({T0: state(T0, 0)})
    session.next_epoch = 2**31 - 1
    pending = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    assert session.on_response(pending, response(pending, 77, [])).ok
    assert session.next_epoch == 1


def test_recreated_topic_restarts_the_session() -> None:
    session = open_session({T0: state(T0, 0)})
    pending = session.build({T0: state(T0, 0, topic_id=uuid.UUID(int=9))}, version=V, **OPTS)
    assert pending.is_full and pending.request.session_epoch == 0


def test_topic_ids_required_from_v13() -> None:
    session = FetchSession(node_id=1)
    with pytest.raises(ValueError, match="topic id"):
        session.build({T0: PartitionFetch(0, 1)}, version=13, **OPTS)
    # v12 names topics, so a missing id is fine there.
    session.build({T0: PartitionFetch(0, 1)}, version=12, **OPTS)


# --- issue 14: a bad *full* response retires the session the broker just opened ----------

def test_a_bad_full_response_retires_the_session_it_opened_not_the_old_one() -> None:
    """The full request (77, 0) already retired 77, and the broker answered with session 88
    but left a partition out. The next request must name 88 (retire it; the broker would
    otherwise keep it until it expires) rather than 77, which the broker no longer knows
    (FETCH_SESSION_ID_NOT_FOUND: a second, spurious reset)."""
    session = open_session({T0: state(T0, 0)})
    session.on_failure(session.build({T0: state(T0, 5)}, version=V, **OPTS))  # resync: (77, 0)
    full = session.build({T0: state(T0, 5), T1: state(T1, 0)}, version=V, **OPTS)
    assert full.is_full and (full.request.session_id, full.request.session_epoch) == (77, 0)
    outcome = session.on_response(full, response(full, 88, [T0]))
    assert not outcome.ok and "omits" in (outcome.problem or "")
    retry = session.build({T0: state(T0, 5), T1: state(T1, 0)}, version=V, **OPTS)
    assert retry.is_full and (retry.request.session_id, retry.request.session_epoch) == (88, 0)


def test_a_bad_full_response_without_a_session_goes_back_to_initial() -> None:
    session = open_session({T0: state(T0, 0)})
    session.on_failure(session.build({T0: state(T0, 5)}, version=V, **OPTS))
    full = session.build({T0: state(T0, 5), T1: state(T1, 0)}, version=V, **OPTS)
    assert not session.on_response(full, response(full, 0, [T0])).ok
    retry = session.build({T0: state(T0, 5)}, version=V, **OPTS)
    assert (retry.request.session_id, retry.request.session_epoch) == (0, 0)


def test_an_empty_throttled_full_response_is_not_a_broken_session() -> None:
    """KIP-219: the broker throttles a full request with an empty answer."""
    session = FetchSession(node_id=1)
    full = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    throttled = response(full, 0, [])
    throttled.throttle_time_ms = 500
    outcome = session.on_response(full, throttled)
    assert not outcome.ok and outcome.throttled and outcome.problem is None
    again = session.build({T0: state(T0, 0)}, version=V, **OPTS)
    assert again.is_full and (again.request.session_id, again.request.session_epoch) == (0, 0)


def test_a_sessionless_session_sends_full_requests_outside_any_session() -> None:
    """(0, -1): the broker answers the partitions and opens no session, so a one-off read
    needs no close request; the answer's data is used (it is not a close)."""
    session = FetchSession(node_id=1, sessionless=True)
    wanted = {T0: state(T0, 9)}
    for offset in (9, 10):
        wanted[T0] = state(T0, offset)
        pending = session.build(wanted, version=V, **OPTS)
        assert (pending.request.session_id, pending.request.session_epoch) == (0, FINAL_EPOCH)
        assert pending.is_full and not pending.is_close
        assert sent_partitions(pending.request) == {(IDS["t"], 0, offset)}
        outcome = session.on_response(pending, response(pending, 0))
        assert outcome.ok and [tp for tp, _ in outcome.partitions] == [T0]
        assert not session.is_open and session.close_request(version=V) is None
    # The wire form round-trips as the broker reads it.
    assert decode_exact(FetchRequest, V, encode(pending.request, V)) == pending.request
