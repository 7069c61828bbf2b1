"""README.md stays true: its options tables name exactly the options the code reads, and the
error messages it quotes in Troubleshooting are the ones the code raises.

The code is the oracle, observed rather than restated: the source's options are the keys
``parse_source_options`` looks up (recorded on the option map it parses), the sink's are the
keys ``parse_sink_options`` reads (from its syntax tree), and each quoted message is compared
with the error the code raises for that mistake.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_ds.spark import sink_options, source_options
from kafka_ds.spark.options import KafkaOptionError

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _table(heading: str) -> list[str]:
    """The option names (first column) of the table under ``heading``."""
    section = README.split(heading, 1)[1].split("\n#", 1)[0]
    names = re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
    assert names, f"no options table under {heading!r}"
    return names


class _Recording(dict[str, str]):
    """An option map that remembers every key looked up in it."""

    looked_up: set[str]

    def get(self, key: Any, default: Any = None) -> Any:
        self.looked_up.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.looked_up.add(str(key))
        return super().__contains__(key)

    def __getitem__(self, key: str) -> str:
        self.looked_up.add(key)
        return super().__getitem__(key)


def _source_option_keys(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    looked_up: set[str] = set()
    original = source_options._lowered

    def recording(options: Any) -> dict[str, str]:
        lowered = _Recording(original(options))
        lowered.looked_up = looked_up
        return lowered

    monkeypatch.setattr(source_options, "_lowered", recording)
    base = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}
    for mode in ("stream", "batch", "any"):
        source_options.parse_source_options(base, mode)  # type: ignore[arg-type]
    return looked_up


def test_source_options_table_matches_the_options_the_code_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    documented = {name.lower() for name in _table("### Source options")}
    assert {"kafka.bootstrap.servers", "kafka.<property>"} <= documented
    read = _source_option_keys(monkeypatch)
    assert "maxoffsetspertrigger" in read  # the recording works
    # kafka.* reach the client through client_properties, not by name.
    assert documented - {"kafka.bootstrap.servers", "kafka.<property>"} == read


def _sink_option_keys() -> set[str]:
    """Keys ``parse_sink_options`` reads from its lower-cased map: ``lowered.get(K)``,
    ``option_int(lowered, K)``, ``option_bool(lowered, K)``, with K a literal, a module
    constant, or ``CONSTANT.lower()``."""
    tree = ast.parse(inspect.getsource(sink_options.parse_sink_options))

    def key(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.lower()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "lower":
            return key(node.func.value)
        if isinstance(node, ast.Name):
            return str(getattr(sink_options, node.id)).lower()
        raise AssertionError(f"unrecognised option key {ast.dump(node)}")

    keys: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" \
                and isinstance(func.value, ast.Name) and func.value.id == "lowered":
            keys.add(key(node.args[0]))
        elif isinstance(func, ast.Name) and func.id in ("option_int", "option_bool") \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "lowered":
            keys.add(key(node.args[1]))
    return keys


def test_sink_options_table_matches_the_options_the_code_reads() -> None:
    documented = {name.lower() for name in _table("### Sink options")}
    read = _sink_option_keys()
    assert {"topic", "deliveryguarantee", "maxrowspersend"} <= read  # the scan works
    assert documented - {"kafka.bootstrap.servers", "kafka.<property>"} == read


@pytest.mark.parametrize("name", [n for n in _table("### Sink options") if "<" not in n])
def test_each_documented_sink_option_changes_what_is_parsed(name: str) -> None:
    """Behaviour, not only names: a value for each documented option reaches SinkOptions."""
    base = {"kafka.bootstrap.servers": "localhost:9092"}
    values = {"kafka.bootstrap.servers": "other:9092", "kafka.transaction.timeout.ms": "60000",
              "topic": "t", "deliveryguarantee": "at-least-once",
              "transactionalidprefix": "app", "intenttopic": "app-intents",
              "failondataloss": "false", "maxrowspersend": "10", "checkpointlocation": "/c",
              "workergcfreeze": "false", "workermemoryreuse": "false"}
    with_option = sink_options.parse_sink_options(base | {name: values[name.lower()]})
    without = sink_options.parse_sink_options(base)
    assert with_option != without


def _source_error(**options: str) -> str:
    with pytest.raises(KafkaOptionError) as error:
        source_options.parse_source_options(options, "batch")
    return str(error.value)


def _sink_error(**options: str) -> str:
    with pytest.raises(KafkaOptionError) as error:
        sink_options.parse_sink_options(options)
    return str(error.value)


def _missing_value_error() -> str:
    from pyspark.sql.types import StringType, StructField, StructType

    parsed = sink_options.parse_sink_options(_BOOT | {"topic": "t"})
    with pytest.raises(KafkaOptionError) as error:
        sink_options.input_columns(StructType([StructField("key", StringType())]), parsed)
    return str(error.value)


_BOOT = {"kafka.bootstrap.servers": "localhost:9092"}
TROUBLES: dict[str, Callable[[], str]] = {
    "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer":
        lambda: _source_error(subscribe="t"),
    "option 'kafka.bootstrap.servers' is required": lambda: _sink_error(topic="t"),
    "One of the following options must be specified for Kafka source: subscribe, "
    "subscribePattern, assign.": lambda: _source_error(**_BOOT),
    "starting offset can't be latest for batch queries on Kafka":
        lambda: _source_error(**_BOOT, subscribe="t", startingOffsets="latest"),
    "Kafka option 'kafka.auto.offset.reset' is not supported: set the source option "
    "'startingOffsets'":
        lambda: _source_error(**_BOOT, subscribe="t", **{"kafka.auto.offset.reset": "x"}),
    "Required attribute 'value' not found": _missing_value_error,
}


def _overwrite_error() -> str:
    from pyspark.sql.types import StringType, StructField, StructType

    from kafka_ds.spark import sink

    schema = StructType([StructField("value", StringType())])
    with pytest.raises(KafkaOptionError) as error:
        sink.create_batch_writer(_BOOT | {"topic": "t"}, schema, overwrite=True)
    return str(error.value)


def _sink_data_loss() -> str:
    from kafka_ds.spark.sink_messages import LostTransaction, SinkDataLossError

    lost = LostTransaction("pykafka-<queryId>-3", 3, (("clicks", 0),), 500, "aborted")
    return str(SinkDataLossError("pykafka-<queryId>", 12, [lost]))


def _offset_range_lost() -> str:
    from kafka_ds.protocol.types import TopicPartition
    from kafka_ds.spark.errors import could_not_read_offset_range

    return str(could_not_read_offset_range(TopicPartition("clicks", 0), 1200, 1500, "gone"))


def _topic_not_found() -> str:
    from kafka_ds.spark.errors import TopicNotFoundError

    return str(TopicNotFoundError(["orders"], "subscribe"))


def _topic_gone() -> str:
    from kafka_ds.spark.errors import TopicGoneError

    return str(TopicGoneError(["orders"], "subscribe"))


TROUBLES.update({
    "Save mode Overwrite not allowed for Kafka": _overwrite_error,
    "topic 'orders' named by option 'subscribe' does not exist on the cluster": _topic_not_found,
    "topic 'orders' named by option 'subscribe' no longer exists on the cluster": _topic_gone,
    "data loss in the pykafka sink 'pykafka-<queryId>', batch 12: 1 transaction(s) holding 500 "
    "records were aborted by Kafka before they could be committed": _sink_data_loss,
    "[KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE] Could not read records in offset "
    "[1200, 1500) of clicks-0": _offset_range_lost,
})

# Messages raised only against a broker or inside a Spark task: the quote must be the
# message's text in the module that raises it, its placeholders filled with these values
# (in the order they appear).
TEMPLATES: dict[str, tuple[str, tuple[str, ...]]] = {
    "option 'startingTimestamp': no offset matched the timestamp 1767225610000 in clicks-0 "
    "(no record at or after it)":
        ("kafka_ds.spark.offset_reader", ("startingTimestamp", "1767225610000", "clicks-0")),
    "topic 'events-clean' (option 'topic') does not exist: create it first, the pykafka sink "
    "does not create topics": ("kafka_ds.spark.sink", ("'events-clean'",)),
    "kafka.transaction.timeout.ms=3600000 is above the broker's transaction.max.timeout.ms "
    "(900000)": ("kafka_ds.spark.sink", ("3600000", "900000")),
    "the pykafka sink's exactly-once delivery cannot run with spark.speculation=true":
        ("kafka_ds.spark.sink_task", ()),
}
# Spark's own messages, checked against Spark itself in integration/test_readme_spark.py.
SPARK_MESSAGES = (
    "Failed to find the data source: pykafka.",
    'The data source "pykafka" cannot be written in the "ErrorIfExists" mode. Please use '
    'either the "Append" or "Overwrite" mode instead.',
)


def _troubleshooting() -> str:
    troubleshooting = README.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    return " ".join(troubleshooting.split())  # README lines wrap


@pytest.mark.parametrize("message", list(TROUBLES))
def test_troubleshooting_quotes_the_errors_the_code_raises(message: str) -> None:
    assert f"`{message}" in _troubleshooting()
    assert message in TROUBLES[message]()


def _rendered_messages(module_name: str, values: tuple[str, ...]) -> list[str]:
    """Every string the module builds with ``len(values)`` placeholders, filled with
    ``values`` (adjacent literals and f-strings are one node after parsing)."""
    import importlib

    tree = ast.parse(inspect.getsource(importlib.import_module(module_name)))
    rendered = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not values:
            rendered.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            placeholders = [part for part in node.values
                            if isinstance(part, ast.FormattedValue)]
            if len(placeholders) != len(values):
                continue
            filled = iter(values)
            rendered.append("".join(next(filled) if isinstance(part, ast.FormattedValue)
                                    else str(part.value)  # type: ignore[attr-defined]
                                    for part in node.values))
    return rendered


@pytest.mark.parametrize("message", list(TEMPLATES))
def test_troubleshooting_quotes_the_messages_written_in_the_code(message: str) -> None:
    assert f"`{message}" in _troubleshooting()
    module_name, values = TEMPLATES[message]
    rendered = _rendered_messages(module_name, values)
    assert rendered, f"no message with {len(values)} placeholders in {module_name}"
    assert any(text.startswith(message) for text in rendered), (
        f"{module_name} builds no message starting with {message!r}")


def test_every_quoted_message_in_troubleshooting_is_checked() -> None:
    """A message added to Troubleshooting needs a check here (or in the Spark test)."""
    quoted = re.findall(r"(?:^| )- `([^`]+)`", _troubleshooting())
    assert len(quoted) >= 15  # the extraction works
    checked = [*TROUBLES, *TEMPLATES, *SPARK_MESSAGES, "AuthenticationError"]
    unchecked = [q for q in quoted if not any(q.startswith(c) for c in checked)]
    assert unchecked == []
