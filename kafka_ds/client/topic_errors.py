"""Why a topic cannot be read: not authorised, not known (yet), or deleted while being read.

Layer: client. Three distinct errors, because each calls for a different answer (grant an
ACL; check the name or wait; decide with ``fail.on.data.loss``), and a Spark task ships them
to the driver: each pickles with its fields intact.

* ``TopicAuthorizationError``: Metadata or Fetch answered TOPIC_AUTHORIZATION_FAILED (an ACL
  denies this principal). Never retried and never taken for data loss: the records are
  still there, we may only not read them.
* ``UnknownTopicError``: the broker asked does not know the topic. Retriable: a broker whose
  metadata lags (a topic created a moment ago) says the same as for a topic that never
  existed. Raised once the caller's patience (``fetch.timeout.ms``) runs out.
* ``TopicDeletedError``: the topic was seen earlier in the same read and no broker knows it
  any more, or it came back with another topic id (deleted and recreated). Data loss:
  ``fail.on.data.loss`` decides.
"""

from __future__ import annotations

from kafka_ds.protocol.errors import BrokerError, DataLossError, ErrorCode


class TopicAuthorizationError(BrokerError):
    """The principal may not read (or describe) ``topic``: TOPIC_AUTHORIZATION_FAILED."""

    def __init__(self, topic: str, principal: str | None = None, context: str = "") -> None:
        who = principal or "this client"
        super().__init__(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            f"{context + ': ' if context else ''}{who} is not authorized to read topic "
            f"{topic!r}; an ACL must allow {who} READ and DESCRIBE on it")
        self.topic = topic
        self.principal = principal
        self.where = context

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (TopicAuthorizationError, (self.topic, self.principal, self.where))


class UnknownTopicError(BrokerError):
    """A topic the cluster does not know (UNKNOWN_TOPIC_OR_PARTITION): it does not exist, or
    not yet as far as the broker asked can tell. ``detail`` says how long we waited."""

    def __init__(self, topic: str, detail: str = "") -> None:
        super().__init__(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"topic {topic!r} does not exist{detail}")
        self.topic = topic
        self.detail = detail

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (UnknownTopicError, (self.topic, self.detail))


class TopicDeletedError(DataLossError):
    """``topic`` was deleted (or deleted and recreated) while ``[requested, ...)`` of
    ``partition`` was being read: the rest of the range is gone."""

    def __init__(self, topic: str, partition: int, requested_offset: int,
                 available_offset: int = -1, reason: str = "the topic was deleted",
                 hint: str = "") -> None:
        super().__init__(topic, partition, requested_offset, available_offset, reason, hint)

    def __str__(self) -> str:
        return (f"data loss in {self.topic}-{self.partition}: {self.reason} while offset "
                f"{self.requested_offset} was being read" + (f". {self.hint}" if self.hint else ""))

    def with_hint(self, hint: str) -> TopicDeletedError:
        return TopicDeletedError(self.topic, self.partition, self.requested_offset,
                                 self.available_offset, self.reason, hint)
