"""The error hierarchy: traits from one table, unknown codes kept, everything picklable."""

from __future__ import annotations

import pickle

import pytest

from kafka_ds.client.cluster import UnknownTopicError
from kafka_ds.protocol.errors import (
    BrokerError,
    CorruptRecordError,
    DataLossError,
    DecodeError,
    ErrorCode,
    KafkaDsError,
    is_invalid_metadata,
    is_retriable,
    raise_for_code,
)
from kafka_ds.protocol.txn_state import ProducerFencedError, TransactionLostError


def test_traits_come_from_the_table() -> None:
    assert BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER).retriable
    assert BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER).invalid_metadata
    assert BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS).retriable
    assert not BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS).invalid_metadata
    assert not BrokerError(ErrorCode.PRODUCER_FENCED).retriable
    assert is_retriable(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert is_invalid_metadata(ErrorCode.FENCED_LEADER_EPOCH)
    assert not is_retriable(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def test_unknown_codes_are_kept_not_crashed_on() -> None:
    error = BrokerError(4242, "produce to t-0")
    assert error.code == 4242 and error.error_code is None
    assert error.name == "UNKNOWN_CODE_4242" and not error.retriable
    assert str(error) == "produce to t-0: UNKNOWN_CODE_4242 (4242)"


def test_raise_for_code() -> None:
    raise_for_code(0)
    with pytest.raises(BrokerError, match="fetching t-3: OFFSET_OUT_OF_RANGE") as caught:
        raise_for_code(1, "fetching t-3", None)
    assert isinstance(caught.value, KafkaDsError)


def test_decode_error_names_the_field_path() -> None:
    error = DecodeError("int32", 12, "buffer ends early")
    error.field_path += ["leader_id", "[3]", "partitions", "MetadataResponse v12:"]
    assert str(error) == ("cannot decode int32 in MetadataResponse v12: partitions[3].leader_id "
                          "at byte 12: buffer ends early")


@pytest.mark.parametrize("error", [
    BrokerError(6, "producing to t-1", "not the leader"),
    BrokerError(9999),
    DecodeError("records", 5, "bad"),
    CorruptRecordError("record batch at offset 7", 17, "CRC mismatch"),
    DataLossError("t", 2, 10, 40, "deleted"),
    DataLossError("t", 2, 10, 40, "deleted").with_hint("Set fail.on.data.loss=false"),
    UnknownTopicError("missing"),
    ProducerFencedError("fenced by a newer producer"),
    TransactionLostError("transaction lost"),
], ids=lambda e: type(e).__name__)
def test_errors_survive_pickling_with_their_fields(error: Exception) -> None:
    # Spark ships task failures between processes.
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)
