"""Bad input through Spark: corrupt segments, missing topics, oversize records, denied ACLs.

Each case runs ``format("pykafka")`` in the shared SparkSession against the real broker and
checks that the query fails with an error naming the problem (the topic, the partition, the
offset, the limit, the principal) or, where the user asked for it, goes on past it without
losing anything else. The ACL cases use the harness broker's ``StandardAuthorizer`` (KRaft)
with DENY ACLs for ``User:alice`` on the SASL_PLAIN listener, removed again at the end.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.pipeline_run import PipelineRun
from kafka_ds.client.producer import Producer

pytestmark = [pytest.mark.spark]


def _produce_batches(kafka: KafkaCluster, topic: str, batches: int, per_batch: int) -> None:
    """``batches`` record batches of ``per_batch`` records (values ``v<offset>``)."""
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "0"}) as producer:
        for batch in range(batches):
            for i in range(per_batch):
                producer.send(topic, f"v{batch * per_batch + i}".encode(), partition=0)
            producer.flush()


def _corrupt_batch(segment: Path, base_offset: int) -> None:
    """Flip a byte inside the records of the batch at ``base_offset`` (its CRC then fails)."""
    data = bytearray(segment.read_bytes())
    position = 0
    while position < len(data):
        offset, length = struct.unpack_from(">qi", data, position)
        if offset == base_offset:
            data[position + 12 + length - 2] ^= 0xFF  # in the last record, past the header
            with segment.open("r+b") as file:  # in place: the broker serves this very file
                file.seek(position + 12 + length - 2)
                file.write(bytes([data[position + 12 + length - 2]]))
            return
        position += 12 + length
    raise AssertionError(f"no batch at offset {base_offset} in {segment}")


def _read(spark: Any, kafka: KafkaCluster, topic: str, **options: str) -> Any:
    reader = (spark.read.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_corrupt_batch_in_a_segment_fails_naming_topic_partition_and_offset(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    _produce_batches(kafka, topic, batches=3, per_batch=10)
    _corrupt_batch(kafka.partition_dir(topic) / "00000000000000000000.log", base_offset=10)
    with pytest.raises(Exception) as caught:
        _read(spark, kafka, topic).collect()
    message = str(caught.value)
    assert "CRC" in message or "crc" in message, message[-3000:]
    assert topic in message and "offset 10" in message, message[-3000:]


def test_a_corrupt_batch_fails_even_under_fail_on_data_loss_false_as_in_spark(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    """Corrupt bytes are not data loss (offsets gone from the log): skipping them would hide
    a broken disk. The JVM connector (the oracle) fails here too."""
    topic = topic_factory()
    _produce_batches(kafka, topic, batches=3, per_batch=10)
    _corrupt_batch(kafka.partition_dir(topic) / "00000000000000000000.log", base_offset=10)
    for source in ("pykafka", "kafka"):
        reader = (spark.read.format(source).option("kafka.bootstrap.servers", kafka.bootstrap())
                  .option("subscribe", topic).option("failOnDataLoss", "false"))
        with pytest.raises(Exception) as caught:
            reader.load().collect()
        message = str(caught.value)
        assert "corrupt" in message.lower() or "CRC" in message, (source, message[-3000:])
        assert topic in message and "offset 10" in message, (source, message[-3000:])


def test_a_topic_that_does_not_exist_fails_read_and_write_naming_it(
        spark: Any, kafka: KafkaCluster) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception) as read:
        _read(spark, kafka, missing).collect()
    assert missing in str(read.value) and "does not exist" in str(read.value), str(read.value)
    with pytest.raises(Exception) as stream:
        (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
         .option("subscribe", missing).load().writeStream.format("console").start()
         .processAllAvailable())
    assert missing in str(stream.value), str(stream.value)
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as write:
        (frame.write.format("pykafka").option("kafka.bootstrap.servers", kafka.bootstrap())
         .option("topic", missing).mode("append").save())
    assert missing in str(write.value), str(write.value)


def test_a_record_over_the_size_limits_fails_naming_the_limit(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(config={"max.message.bytes": "20000"})
    big = spark.createDataFrame([("k", "x" * 50_000)], "key string, value string")

    def write(frame: Any, **options: str) -> str:
        writer = (frame.write.format("pykafka")
                  .option("kafka.bootstrap.servers", kafka.bootstrap()).option("topic", topic))
        for key, value in options.items():
            writer = writer.option(key, value)
        with pytest.raises(Exception) as caught:
            writer.mode("append").save()
        return str(caught.value)

    # Over the producer's own limit: refused before it is sent.
    message = write(big, **{"kafka.max.request.size": "10000"})
    assert "max.request.size" in message, message[-3000:]
    # Under it, over the topic's max.message.bytes: the broker refuses it.
    message = write(big)
    assert "MESSAGE_TOO_LARGE" in message or "max.message.bytes" in message, message[-3000:]
    assert topic in message, message[-3000:]


# --- ACLs ------------------------------------------------------------------------------------

@pytest.fixture
def deny_alice(kafka: KafkaCluster) -> Iterator[Callable[[str, str, bool], None]]:
    """``deny(resource_type, name, prefixed)``: DENY User:alice every operation on it."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap()})
    made: list[Any] = []

    def deny(resource_type: str, name: str, prefixed: bool = False) -> None:
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        binding = AclBinding(ResourceType[resource_type], name, pattern, "User:alice", "*",
                             AclOperation.ALL, AclPermissionType.DENY)
        for future in admin.create_acls([binding]).values():
            future.result(30)
        made.append(AclBindingFilter(ResourceType[resource_type], name, pattern,
                                     "User:alice", "*", AclOperation.ALL,
                                     AclPermissionType.DENY))

    yield deny
    if made:
        for future in admin.delete_acls(made).values():
            future.result(30)


def _alice(kafka: KafkaCluster) -> dict[str, str]:
    return {f"kafka.{key}": value
            for key, value in kafka.java_config("SASL_PLAIN", username="alice").items()}


def _eventually_denied(action: Callable[[], Any], timeout_s: float = 30) -> str:
    """ACLs reach the broker through the metadata log: retry until the denial shows."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            action()
        except Exception as error:  # Spark wraps ours: the text is what the test checks
            if "AUTHORIZATION_FAILED" in str(error) or time.monotonic() > deadline:
                return str(error)
        else:
            assert time.monotonic() < deadline, "the DENY ACL never took effect"
        time.sleep(0.5)


def test_denied_topics_and_transactional_ids_name_the_resource_and_principal(
        spark: Any, kafka: KafkaCluster, topic_factory: Callable[..., str],
        deny_alice: Callable[..., None]) -> None:
    read_topic, write_topic, open_topic = topic_factory(), topic_factory(), topic_factory()
    _produce_batches(kafka, read_topic, batches=1, per_batch=5)
    deny_alice("TOPIC", read_topic)
    deny_alice("TOPIC", write_topic)
    prefix = f"denied-{uuid.uuid4().hex[:8]}"
    deny_alice("TRANSACTIONAL_ID", prefix, True)
    alice = _alice(kafka)

    def read() -> Any:
        reader = spark.read.format("pykafka").option("subscribe", read_topic)
        for key, value in alice.items():
            reader = reader.option(key, value)
        return reader.load().collect()

    message = _eventually_denied(read)
    assert "TOPIC_AUTHORIZATION_FAILED" in message, message[-3000:]
    assert read_topic in message and "User:alice" in message, message[-3000:]

    frame = spark.createDataFrame([("k", "v")], "key string, value string")

    def write(topic: str, **extra: str) -> Callable[[], Any]:
        def run() -> Any:
            writer = frame.write.format("pykafka").option("topic", topic)
            for key, value in {**alice, **extra}.items():
                writer = writer.option(key, value)
            return writer.mode("append").save()
        return run

    message = _eventually_denied(write(write_topic))
    assert "TOPIC_AUTHORIZATION_FAILED" in message, message[-3000:]
    assert write_topic in message and "User:alice" in message, message[-3000:]

    message = _eventually_denied(write(open_topic, transactionalIdPrefix=prefix))
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in message, message[-3000:]
    assert prefix in message and "User:alice" in message, message[-3000:]


@pytest.mark.long
def test_a_denied_group_for_commit_offsets_to_group_warns_naming_group_and_principal(
        kafka: KafkaCluster, tmp_path: Path, deny_alice: Callable[..., None]) -> None:
    pipe = PipelineRun(kafka, tmp_path, f"pipe-group-{tmp_path.name[-12:]}", rows=1_000,
                       batch_rows=500)
    group = f"denied-group-{uuid.uuid4().hex[:8]}"
    deny_alice("GROUP", group)
    alice = {key: value for key, value in _alice(kafka).items()
             if key != "kafka.bootstrap.servers"}
    result = pipe.run(source_bootstrap=kafka.bootstrap("SASL_PLAIN"),
                      source_options={**alice, "commitOffsetsToGroup": group})
    # The group is only a mirror for lag tools: the query goes on, and says why it is empty.
    assert result.returncode == 0, result.stderr[-3000:]
    assert pipe.assert_exactly_once() == 1_000
    assert "GROUP_AUTHORIZATION_FAILED" in result.stderr, result.stderr[-3000:]
    assert group in result.stderr and "User:alice" in result.stderr, result.stderr[-3000:]
