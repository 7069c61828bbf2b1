"""The source's errors, with the JVM connector's error-class names in front of each message.

A user who greps logs or alerts for ``KAFKA_DATA_LOSS.PARTITIONS_DELETED`` or
``LOST_TOPIC_PARTITIONS_IN_END_OFFSET_WITH_TRIGGER_AVAILABLENOW`` finds ours too. The messages
are our own words: what happened, to which partitions and offsets, and what to change.

Data loss is reported through ``report_data_loss``: with ``failOnDataLoss=true`` it raises,
otherwise it logs a warning and the caller skips what is gone, as Spark does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.types import TopicPartition
from kafka_ds.spark.offsets_json import describe
from kafka_ds.spark.options import KafkaOptionError

log = logging.getLogger(__name__)

_FAIL_TRUE_ADVICE = (
    "Some data may have been lost: it is no longer in Kafka (aged out by retention, deleted, or "
    "the topic was deleted or recreated) before the query read it. If the query should go on "
    "and skip what is missing, set the source option failOnDataLoss to false.")
_FAIL_FALSE_ADVICE = (
    "Some data may have been lost and was skipped (failOnDataLoss=false). If the query should "
    "stop instead, set the source option failOnDataLoss to true.")


class KafkaSourceError(KafkaDsError):
    """An error of ``format("pykafka")`` carrying a Spark Kafka error-class name."""

    def __init__(self, error_class: str, message: str) -> None:
        self.error_class = error_class
        self.detail = message
        super().__init__(f"[{error_class}] {message}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.error_class, self.detail))


class KafkaDataLossError(KafkaSourceError):
    """``KAFKA_DATA_LOSS.*``: offsets the query must read are gone."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(error_class, message)


def _named(topics: list[str]) -> tuple[str, bool]:
    """``'a', 'b'`` and whether there are several, for "topic(s) ... named by option"."""
    return ", ".join(repr(t) for t in topics), len(topics) > 1


class TopicGoneError(KafkaDsError):
    """A topic named by ``subscribe`` or ``assign`` that the query read is missing from the
    cluster's metadata. Retried as any lookup (a broker that restarted a moment ago can still
    answer without it); if it stays missing, the query fails, as the JVM connector's does
    (its describeTopics raises UnknownTopicOrPartitionException)."""

    def __init__(self, topics: Iterable[str], option: str) -> None:
        self.topics = sorted(topics)
        self.option = option
        names, several = _named(self.topics)
        super().__init__(
            f"{'topics' if several else 'topic'} {names} named by option '{option}' no longer "
            f"{'exist' if several else 'exists'} on the cluster (deleted, or not yet known to "
            "the broker that answered): recreate it, or remove it from option "
            f"'{option}' and restart the query (its checkpoint then reports the topic's "
            "partitions as deleted: set failOnDataLoss=false to go on without them)")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.topics, self.option))


class TopicNotFoundError(KafkaOptionError):
    """A topic named by ``subscribe`` or ``assign`` does not exist on the cluster."""

    def __init__(self, topics: Iterable[str], option: str) -> None:
        self.topics = sorted(topics)
        self.option = option
        names, several = _named(self.topics)
        super().__init__(f"{'topics' if several else 'topic'} {names} named by option "
                         f"'{option}' {'do' if several else 'does'} not exist on the "
                         "cluster: create it, or correct the name (check "
                         "kafka.bootstrap.servers points at the right cluster)")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.topics, self.option))


def report_data_loss(fail_on_data_loss: bool, error: KafkaDataLossError) -> None:
    """Raise ``error`` (failOnDataLoss=true) or log it as a warning (false)."""
    if fail_on_data_loss:
        raise KafkaDataLossError(error.error_class, f"{error.detail} {_FAIL_TRUE_ADVICE}")
    log.warning("%s %s", error, _FAIL_FALSE_ADVICE)


def partitions_deleted(partitions: Iterable[TopicPartition],
                       custom_group_id: bool) -> KafkaDataLossError:
    text = (f"Partitions {describe(partitions)} have been deleted (the topic or partitions "
            "are gone).")
    if custom_group_id:
        return KafkaDataLossError(
            "KAFKA_DATA_LOSS.PARTITIONS_DELETED_AND_GROUP_ID_CONFIG_PRESENT",
            f"{text} Option 'kafka.group.id' is set on this query: another query or consumer "
            "sharing that group does not change what this query reads, but check no one "
            "deleted the topic on purpose for it.")
    return KafkaDataLossError("KAFKA_DATA_LOSS.PARTITIONS_DELETED", text)


def partition_offset_changed(tp: TopicPartition, previous: int, new: int) -> KafkaDataLossError:
    return KafkaDataLossError(
        "KAFKA_DATA_LOSS.PARTITION_OFFSET_CHANGED",
        f"Partition {tp}'s offset went back from {previous} to {new}: either the start offset "
        "was set beyond the available offsets when the query started, or the topic-partition "
        "was deleted and recreated.")


def added_partition_not_from_zero(tp: TopicPartition, start: int) -> KafkaDataLossError:
    return KafkaDataLossError(
        "KAFKA_DATA_LOSS.ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO",
        f"Added partition {tp} starts at offset {start} instead of 0: records written to it "
        "before the query saw it were deleted.")


def initial_offsets_not_found(partitions: Iterable[TopicPartition]) -> KafkaDataLossError:
    return KafkaDataLossError(
        "KAFKA_DATA_LOSS.INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS",
        f"Cannot find initial offsets for new partitions {describe(partitions)}: they were "
        "deleted right after they appeared.")


def could_not_read_offset_range(tp: TopicPartition, start: int, end: int,
                                cause: str) -> KafkaDataLossError:
    return KafkaDataLossError(
        "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE",
        f"Could not read records in offset [{start}, {end}) of {tp}: {cause}.")


def start_offsets_do_not_match(option: str, specified: Iterable[TopicPartition],
                               assigned: Iterable[TopicPartition], *,
                               timestamps: bool) -> KafkaOptionError:
    error_class = ("KAFKA_TIMESTAMP_OFFSET_DOES_NOT_MATCH_ASSIGNED" if timestamps
                   else "KAFKA_START_OFFSET_DOES_NOT_MATCH_ASSIGNED")
    advice = ("give a timestamp for every partition" if timestamps else
              "give an offset for every partition (-1 for latest, -2 for earliest), or "
              "'earliest'/'latest' for a whole topic")
    return KafkaOptionError(
        f"[{error_class}] option '{option}' must list exactly the partitions the query reads: "
        f"{advice}. Specified: {describe(specified)}. Assigned: {describe(assigned)}")


def available_now_error(error_class: str, what: str, first_name: str,
                        first: Mapping[TopicPartition, int] | Iterable[TopicPartition],
                        end: Mapping[TopicPartition, int] | Iterable[TopicPartition]
                        ) -> KafkaSourceError:
    def text(value: Mapping[TopicPartition, int] | Iterable[TopicPartition]) -> str:
        if isinstance(value, Mapping):
            return ", ".join(f"{tp}: {value[tp]}" for tp in sorted(value)) or "(none)"
        return describe(value)

    return KafkaSourceError(
        error_class,
        f"{what} with Trigger.AvailableNow. This may be transient: restart the query, and "
        f"report it if it happens again. {first_name}: {text(first)}; end offset: {text(end)}")
