"""The sink's pieces that need no broker and no Spark session: option and column checks,
the commit intent's record format, messages and errors across pickling, the checkpoint
fallback for the query id, and the fault points' bookkeeping."""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_ds.protocol.txn_state import TransactionToken
from kafka_ds.spark import sink_faults
from kafka_ds.spark.options import KafkaOptionError
from kafka_ds.spark.sink_commit import BatchCommit, query_id_from_checkpoint
from kafka_ds.spark.sink_intent import (
    CommitIntent,
    IntentStore,
    intent_for,
    intent_transactional_id,
)
from kafka_ds.spark.sink_messages import (
    LostTransaction,
    SinkBatchAbortedError,
    SinkCommitMessage,
    SinkDataLossError,
    TaskOutcome,
)
from kafka_ds.spark.sink_options import (
    HEADERS_TYPE,
    Guarantee,
    input_columns,
    parse_sink_options,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "b:9092"}
TOKEN = TransactionToken("p-3", 7, 2, 2, (("out", 0), ("out", 5)), 1200)


def _schema(**columns: object) -> StructType:
    return StructType([StructField(name, data_type, True)  # type: ignore[arg-type]
                       for name, data_type in columns.items()])


def test_defaults_and_producer_properties() -> None:
    options = parse_sink_options({**BOOTSTRAP, "TOPIC": " out ", "kafka.linger.ms": "7",
                                  "kafka.sasl.jaas.config": "secret-thing"})
    assert options.topic == "out" and options.guarantee is Guarantee.EXACTLY_ONCE
    props = options.producer_properties("p-0", 60_000)
    assert props["transactional.id"] == "p-0" and props["transaction.timeout.ms"] == "60000"
    assert props["linger.ms"] == "7" and props["batch.size"] == "524288"
    assert "secret-thing" not in repr(options)  # secrets never in reprs or plans
    assert options.intent_topic_for("pykafka-q1") == "pykafka-q1.intent"
    at_least_once = parse_sink_options({**BOOTSTRAP, "deliveryguarantee": "AT_LEAST_ONCE"})
    assert at_least_once.guarantee is Guarantee.AT_LEAST_ONCE
    assert "transactional.id" not in at_least_once.producer_properties(None, None)


@pytest.mark.parametrize(("options", "message"), [
    ({}, "option 'kafka.bootstrap.servers' is required"),
    ({**BOOTSTRAP, "kafka.value.serializer": "x"}, "'kafka.value.serializer' is not supported"),
    ({**BOOTSTRAP, "kafka.enable.idempotence": "false"},
     "kafka.enable.idempotence=false cannot be used with deliveryGuarantee=exactly-once"),
    ({**BOOTSTRAP, "kafka.compression.type": "brotli"}, "compression.type must be one of"),
    ({**BOOTSTRAP, "kafka.transaction.timeout.ms": "soon"},
     "option 'kafka.transaction.timeout.ms' must be an integer"),
    ({**BOOTSTRAP, "topic": "  "}, "option 'topic' is empty"),
    ({**BOOTSTRAP, "transactionalIdPrefix": "a b"}, "cannot name the intent topic 'a b.intent'"),
    ({**BOOTSTRAP, "intentTopic": "no/slash"}, "option 'intentTopic' must be a valid Kafka"),
    ({**BOOTSTRAP, "failOnDataLoss": "maybe"}, "option 'failondataloss' must be 'true' or"),
    ({**BOOTSTRAP, "maxRowsPerSend": "0"}, "option 'maxrowspersend' must be at least 1"),
])
def test_option_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionError, match=message.replace("(", r"\(")):
        parse_sink_options(options)


def test_columns_are_checked_like_sparks_sink() -> None:
    options = parse_sink_options({**BOOTSTRAP, "topic": "t"})
    columns = input_columns(_schema(value=BinaryType(), key=StringType(),
                                    partition=IntegerType(), headers=HEADERS_TYPE,
                                    timestamp=LongType(), topic=StringType(),
                                    other=IntegerType()), options)
    assert (columns.key, columns.partition, columns.headers, columns.timestamp) == \
        ("key", "partition", "headers", "timestamp")
    assert columns.timestamp_is_long and columns.topic is None  # the option wins
    no_topic_option = parse_sink_options(BOOTSTRAP)
    assert input_columns(_schema(value=StringType(), topic=StringType()),
                         no_topic_option).topic == "topic"
    assert not input_columns(_schema(value=StringType(), timestamp=TimestampType()),
                             options).timestamp_is_long
    wrong_headers = ArrayType(StructType([StructField("k", StringType()),
                                          StructField("v", BinaryType())]))
    with pytest.raises(KafkaOptionError, match="headers attribute unsupported type"):
        input_columns(_schema(value=StringType(), headers=wrong_headers), options)
    with pytest.raises(KafkaOptionError, match="Required attribute 'value' not found"):
        input_columns(_schema(Value=StringType()), options)  # names are case-sensitive


def test_intent_record_round_trips_and_keeps_the_partition_high_water_mark() -> None:
    first = intent_for("p", "q", "run-1", 4, 6, None, [TOKEN])
    second = intent_for("p", "q", "run-2", 5, 3, first, [TOKEN])
    assert second.max_spark_partitions == 6 and second.spark_partitions == 3
    decoded = CommitIntent.from_json(second.to_json(), "p.intent")
    assert decoded == second
    assert decoded.transactions[0].partitions == (("out", 0), ("out", 5))
    with pytest.raises(KafkaOptionError, match="must be dedicated to one sink"):
        CommitIntent.from_json(b'{"something": "else"}', "shared")


def test_messages_and_errors_survive_pickling() -> None:
    message = SinkCommitMessage(TaskOutcome.PREPARED, "p", 3, 1, 9, "q", "r", 1200, TOKEN,
                                (("init", 12), ("send", 40)))
    assert pickle.loads(pickle.dumps(message)) == message
    lost = [LostTransaction("p-3", 3, TOKEN.partitions, 1200, "EndTxn(commit) answered "
                                                             "INVALID_TXN_STATE")]
    for error_type in (SinkDataLossError, SinkBatchAbortedError):
        error = pickle.loads(pickle.dumps(error_type("p", 9, lost)))
        assert isinstance(error, error_type) and error.lost == tuple(lost)
        assert "batch 9" in str(error) and "Spark partition 3" in str(error)
        assert "out partitions [0, 5]" in str(error)


def test_query_id_from_a_local_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text('{"id":"2a5d2f61-0b59"}\n')
    assert query_id_from_checkpoint(str(tmp_path)) == "2a5d2f61-0b59"
    assert query_id_from_checkpoint(f"file:{tmp_path}") == "2a5d2f61-0b59"
    assert query_id_from_checkpoint("s3a://bucket/checkpoint") is None
    assert query_id_from_checkpoint(str(tmp_path / "missing")) is None
    assert query_id_from_checkpoint(None) is None


def test_fault_points_fire_once_and_are_logged(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    sink_faults.fault_point("commit:start", batch_id=1)  # inert without the variable
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"point": "commit:start", "batch": 2, "action": "raise"}]))
    monkeypatch.setenv(sink_faults.ENV, str(faults))
    assert sink_faults.armed("commit:start") and not sink_faults.armed("commit:end")
    sink_faults.fault_point("commit:start", batch_id=1)  # another batch: nothing
    with pytest.raises(RuntimeError, match="injected fault at commit:start"):
        sink_faults.fault_point("commit:start", batch_id=2)
    sink_faults.fault_point("commit:start", batch_id=2)  # fired already: nothing
    log = [json.loads(line) for line in Path(f"{faults}.log").read_text().splitlines()]
    assert [(entry["point"], entry["batch"]) for entry in log] == [("commit:start", 2)]
    assert not sink_faults.armed("commit:start")


def test_a_batch_older_than_the_decided_intent_writes_nothing_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """Spark replays only its last batch: an intent for a later one means the checkpoint was
    restored or cut back. The batch writes nothing (its offsets' rows were written by the run
    that got that far), which used to happen without a word."""
    options = parse_sink_options({**BOOTSTRAP, "topic": "out"})
    commit = BatchCommit(options, [], 5, "p", 60_000)
    later = intent_for("p", "q", "run-1", 7, 2, None, [TOKEN])
    with caplog.at_level(logging.WARNING, logger="kafka_ds.spark.sink_commit"):
        commit._roll_forward(None, later, [])  # type: ignore[arg-type]  # no broker call
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "batch 5 is older than batch 7" in warnings[0]
    assert "new checkpoint location" in warnings[0]


@pytest.mark.parametrize(("sink_timeout_ms", "expected_ms"),
                         [(None, 60_000), (20_000, 20_000), (900_000, 60_000)])
def test_the_intent_transaction_times_out_within_the_sinks_own_timeout(
        sink_timeout_ms: int | None, expected_ms: int) -> None:
    """A dead driver's intent write holds readers back one minute at most, and never asks
    for more than the sink's timeout (already checked against transaction.max.timeout.ms)."""
    store = IntentStore(None, {"bootstrap.servers": "b:9092", "transactional.id": "user",  # type: ignore[arg-type]
                               "transaction.timeout.ms": "1"}, "p.intent", "p",
                        sink_timeout_ms)
    props = store._producer_properties()
    assert props["transaction.timeout.ms"] == str(expected_ms)
    assert props["transactional.id"] == "p-intent" == intent_transactional_id("p")
    assert props["acks"] == "all" and props["bootstrap.servers"] == "b:9092"
