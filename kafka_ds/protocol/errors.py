"""The kafka_ds exception hierarchy and the broker error-code table.

Layer: protocol (stdlib only). Every exception kafka_ds raises derives from ``KafkaDsError``,
so a user can catch one type. The tree::

    KafkaDsError
      ProtocolError            the peer broke the protocol (raised at the edge, in one place)
        DecodeError            bytes that do not parse: says what was decoded and where
          CorruptRecordError   a record batch whose CRC does not match
      EncodeError              a value that cannot be put on the wire at the chosen version
      BrokerError              a broker answered with an error code (see ``ErrorCode``)
      NetworkError             a connection could not be made or broke (wraps the OSError)
      AuthenticationError      SASL or TLS refused us: a configuration problem, never retried
      KafkaTimeoutError        a deadline passed
      ConfigError              bad client configuration, raised before any I/O
      DataLossError            requested offsets are gone from the log (``failOnDataLoss``)

``BrokerError`` carries ``retriable`` and ``invalid_metadata`` flags from one table, so retry
logic asks the error rather than keeping its own lists (the Java client's RetriableException /
InvalidMetadataException split). Codes this table does not know are kept, not crashed on.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class KafkaDsError(Exception):
    """Root of every error kafka_ds raises."""


class ProtocolError(KafkaDsError):
    """The peer sent something the Kafka protocol does not allow."""


class DecodeError(ProtocolError):
    """Bytes that do not decode.

    The message names what was being decoded (``what``), the byte position, and, when raised
    inside a message schema, the field path (``FetchResponse v16: responses[].partitions[]``),
    so a report from the field points at the broken field rather than at a ``struct.error``.
    """

    def __init__(self, what: str, position: int | None = None, detail: str = "") -> None:
        self.what = what
        self.position = position
        self.detail = detail
        # Field names, innermost first; schema readers append as the error travels outwards.
        self.field_path: list[str] = []
        super().__init__(what, position, detail)

    def __str__(self) -> str:
        where = f" at byte {self.position}" if self.position is not None else ""
        field = f" in {self._path_text()}" if self.field_path else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"cannot decode {self.what}{field}{where}{detail}"

    def _path_text(self) -> str:
        # Outermost first: "MetadataResponse v12: topics[0].partitions[3].leader_id".
        text = ""
        for part in reversed(self.field_path):
            if part.endswith(":") or not text or part.startswith("["):
                text += part
            elif text.endswith(":"):
                text += " " + part
            else:
                text += "." + part
        return text


class CorruptRecordError(DecodeError):
    """A record batch failed its CRC check or is otherwise damaged."""


class EncodeError(KafkaDsError, ValueError):
    """A value cannot be encoded (out of range, or set on a field the version lacks)."""


class NetworkError(KafkaDsError):
    """A connection could not be opened, or it failed while in use.

    The OSError (refused, reset, TLS failure) is kept as ``__cause__``.
    """


class AuthenticationError(KafkaDsError):
    """The broker refused our credentials or our TLS identity. Retrying will not help.

    Not a ``NetworkError``: callers retry network errors until their timeout, and a wrong
    password, an untrusted certificate or a refused client certificate must fail at once
    (the Java client's ``AuthenticationException`` is not retriable either).
    """


class KafkaTimeoutError(KafkaDsError, TimeoutError):
    """An operation did not finish before its deadline."""


class ConfigError(KafkaDsError, ValueError):
    """Invalid configuration; the message names the option and how to fix it."""


class DataLossError(KafkaDsError):
    """Offsets that were asked for are no longer in the log (deleted, compacted, or reset).

    Attributes name the partition and both offsets so that the caller (the Spark source with
    ``failOnDataLoss``) can decide to fail or to skip ahead.
    """

    def __init__(self, topic: str, partition: int, requested_offset: int,
                 available_offset: int, reason: str, hint: str = "") -> None:
        self.topic = topic
        self.partition = partition
        self.requested_offset = requested_offset
        self.available_offset = available_offset
        self.reason = reason
        self.hint = hint  # what the caller can change, e.g. the option that skips instead
        super().__init__(
            f"data loss in {topic}-{partition}: requested offset {requested_offset} is not "
            f"in the log ({reason})"
            + (f". {hint}" if hint else "")
        )

    def with_hint(self, hint: str) -> DataLossError:
        """The same loss, with advice for whoever reads the message."""
        return DataLossError(self.topic, self.partition, self.requested_offset,
                             self.available_offset, self.reason, hint)

    def __reduce__(self) -> tuple[type[DataLossError], tuple[str, int, int, int, str, str]]:
        # Spark ships task errors between processes: keep the fields, not just the text.
        return (type(self), (self.topic, self.partition, self.requested_offset,
                             self.available_offset, self.reason, self.hint))


class ErrorCode(IntEnum):
    """Kafka protocol error codes (the ``ErrorCode`` fields of responses)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133


class _Traits(NamedTuple):
    retriable: bool
    # The error says our view of the cluster is stale: refresh metadata before retrying.
    invalid_metadata: bool


_E = ErrorCode
# Codes missing from this table are neither retriable nor metadata errors. The flags follow
# the Java client's exception classes (RetriableException / InvalidMetadataException).
_TRAITS: dict[int, _Traits] = {
    _E.CORRUPT_MESSAGE: _Traits(True, False),
    _E.UNKNOWN_TOPIC_OR_PARTITION: _Traits(True, True),
    _E.LEADER_NOT_AVAILABLE: _Traits(True, True),
    _E.NOT_LEADER_OR_FOLLOWER: _Traits(True, True),
    _E.REQUEST_TIMED_OUT: _Traits(True, False),
    _E.REPLICA_NOT_AVAILABLE: _Traits(True, True),
    _E.NETWORK_EXCEPTION: _Traits(True, True),
    _E.COORDINATOR_LOAD_IN_PROGRESS: _Traits(True, False),
    _E.COORDINATOR_NOT_AVAILABLE: _Traits(True, False),
    _E.NOT_COORDINATOR: _Traits(True, False),
    _E.NOT_ENOUGH_REPLICAS: _Traits(True, False),
    _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: _Traits(True, False),
    _E.NOT_CONTROLLER: _Traits(True, False),
    _E.CONCURRENT_TRANSACTIONS: _Traits(True, False),
    _E.KAFKA_STORAGE_ERROR: _Traits(True, True),
    _E.FETCH_SESSION_ID_NOT_FOUND: _Traits(True, False),
    _E.INVALID_FETCH_SESSION_EPOCH: _Traits(True, False),
    _E.LISTENER_NOT_FOUND: _Traits(True, True),
    _E.FENCED_LEADER_EPOCH: _Traits(True, True),
    _E.UNKNOWN_LEADER_EPOCH: _Traits(True, False),
    _E.OFFSET_NOT_AVAILABLE: _Traits(True, False),
    _E.PREFERRED_LEADER_NOT_AVAILABLE: _Traits(True, False),
    _E.ELIGIBLE_LEADERS_NOT_AVAILABLE: _Traits(True, False),
    _E.ELECTION_NOT_NEEDED: _Traits(True, False),
    _E.UNSTABLE_OFFSET_COMMIT: _Traits(True, False),
    _E.THROTTLING_QUOTA_EXCEEDED: _Traits(True, False),
    _E.UNKNOWN_TOPIC_ID: _Traits(True, True),
    _E.INCONSISTENT_TOPIC_ID: _Traits(True, True),
    _E.FETCH_SESSION_TOPIC_ID_ERROR: _Traits(True, False),
    _E.SHARE_SESSION_NOT_FOUND: _Traits(True, False),
    _E.INVALID_SHARE_SESSION_EPOCH: _Traits(True, False),
    _E.SHARE_SESSION_LIMIT_REACHED: _Traits(True, False),
}
_NOT_RETRIABLE = _Traits(False, False)


class BrokerError(KafkaDsError):
    """A broker answered with a non-zero error code.

    ``code`` is the raw int (kept even when this version of kafka_ds does not know it),
    ``name`` the protocol name (``UNKNOWN_CODE_<n>`` for unknown codes), and ``context`` what
    we were doing (the API, topic-partition or transactional id), so the message is actionable.
    """

    def __init__(self, code: int, context: str = "", broker_message: str | None = None) -> None:
        self.code = code
        self.context = context
        self.broker_message = broker_message
        text = f"{self.name} ({code})"
        if context:
            text = f"{context}: {text}"
        if broker_message:
            text += f": {broker_message}"
        super().__init__(text)

    @property
    def error_code(self) -> ErrorCode | None:
        """The code as an ``ErrorCode``, or None when this version does not know it."""
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None

    @property
    def name(self) -> str:
        known = self.error_code
        return known.name if known is not None else f"UNKNOWN_CODE_{self.code}"

    @property
    def retriable(self) -> bool:
        return _TRAITS.get(self.code, _NOT_RETRIABLE).retriable

    @property
    def invalid_metadata(self) -> bool:
        return _TRAITS.get(self.code, _NOT_RETRIABLE).invalid_metadata

    def __reduce__(self) -> tuple[type[BrokerError], tuple[int, str, str | None]]:
        # Keeps the error picklable across the Spark boundary with its fields intact.
        return (type(self), (self.code, self.context, self.broker_message))


def is_retriable(code: int) -> bool:
    """True when a request that failed with ``code`` may succeed if sent again."""
    return _TRAITS.get(code, _NOT_RETRIABLE).retriable


def is_invalid_metadata(code: int) -> bool:
    """True when ``code`` means our metadata is stale and must be refreshed before a retry."""
    return _TRAITS.get(code, _NOT_RETRIABLE).invalid_metadata


def raise_for_code(code: int, context: str = "", broker_message: str | None = None) -> None:
    """Raise ``BrokerError`` for a non-zero ``code``; do nothing for 0 (NONE)."""
    if code:
        raise BrokerError(code, context, broker_message)
