"""The driver's topic check at query start: a missing topic, or one the principal may not see.

A topic denied by ACLs is absent from Metadata just as a missing one is; only its error code
(TOPIC_AUTHORIZATION_FAILED) tells them apart. The check must say which, naming the topic and
the principal, instead of telling the user to create a topic that exists. The cluster view is
a stand-in holding what a Metadata answer left (``topics``, ``topic_errors``); the real one is
exercised against a broker with DENY ACLs in integration/test_pipeline_bad_input.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from kafka_ds.client.topic_errors import TopicAuthorizationError, UnknownTopicError
from kafka_ds.protocol.errors import BrokerError, ErrorCode
from kafka_ds.spark.errors import TopicNotFoundError
from kafka_ds.spark.offset_reader import OffsetReader
from kafka_ds.spark.source_options import parse_source_options


class _View:
    def __init__(self, errors: dict[str, int]) -> None:
        self.topics: dict[str, Any] = {"present": object()}
        self.topic_errors = errors
        self.refreshes = 0

    def refresh(self, names: Any = None) -> None:
        self.refreshes += 1

    def topic_error(self, name: str) -> BrokerError:
        if self.topic_errors.get(name) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            return TopicAuthorizationError(name, "User:alice", "metadata")
        return UnknownTopicError(name)

    def close(self) -> None:
        pass


def _reader(topics: str, errors: dict[str, int]) -> tuple[OffsetReader, _View]:
    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": topics,
                                    "fetchOffset.retryIntervalMs": "1"}, "stream")
    reader = OffsetReader(options)
    view = _View(errors)
    reader._cluster = view  # type: ignore[assignment]
    return reader, view


def test_a_denied_topic_is_an_authorization_error_naming_topic_and_principal() -> None:
    reader, view = _reader("present,secret",
                           {"secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    with pytest.raises(TopicAuthorizationError) as caught:
        reader.check_topics_exist()
    assert caught.value.topic == "secret" and "User:alice" in str(caught.value)
    assert view.refreshes == 1  # asking again would not change an ACL's answer


def test_a_missing_topic_is_still_reported_as_missing() -> None:
    reader, _ = _reader("present,gone", {"gone": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
    with pytest.raises(TopicNotFoundError, match="'gone'"):
        reader.check_topics_exist()


def test_a_topic_denied_after_the_query_started_is_an_authorization_error() -> None:
    """Later lookups (latest offsets, partitions) do not drop a denied topic as if its
    partitions had been deleted: they say it is denied, at once (an ACL does not change by
    asking again)."""
    reader, view = _reader("secret", {"secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
    with pytest.raises(TopicAuthorizationError) as caught:
        reader.partitions()
    assert caught.value.topic == "secret"
    assert view.refreshes == 1
