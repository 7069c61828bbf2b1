"""Option handling shared by the source and the sink.

Spark hands a Python DataSource its options as a case-insensitive map of strings (keys
lower-cased). Kafka client settings travel as ``kafka.<property>``, exactly as with
``format("kafka")``: the prefix is stripped and the rest goes to our client unchanged, so
Java property names (``kafka.security.protocol``, ``kafka.sasl.jaas.config``...) work as they
are.

Errors name the option and what it accepts, and never echo a secret's value.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_ds.client.config import is_sensitive
from kafka_ds.protocol.errors import ConfigError

KAFKA_PREFIX = "kafka."


class KafkaOptionError(ConfigError):
    """An option of ``format("pykafka")`` is missing, malformed or not allowed.

    A ``ValueError`` (through ConfigError), raised on the driver when the query starts.
    """


def client_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options with the prefix removed: the client's Java-style properties."""
    return {key[len(KAFKA_PREFIX):]: str(value) for key, value in options.items()
            if key.lower().startswith(KAFKA_PREFIX) and len(key) > len(KAFKA_PREFIX)}


def is_secret(option: str) -> bool:
    """True for options whose values must never be logged or shown in an error or plan."""
    name = option.lower()
    if name.startswith(KAFKA_PREFIX):
        name = name[len(KAFKA_PREFIX):]
    return is_sensitive(name)


def shown(option: str, value: object) -> str:
    """``value`` as an error message may show it: secrets become ``[redacted]``."""
    return "[redacted]" if is_secret(option) else repr(value)


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """A ``true``/``false`` option (case-insensitive, as Spark parses booleans)."""
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise KafkaOptionError(f"option '{name}' must be 'true' or 'false', got {shown(name, raw)}")


def option_int(options: Mapping[str, str], name: str, *, minimum: int | None = None,
               default: int | None = None) -> int | None:
    """An integer option (a Java long's range), ``default`` when absent."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KafkaOptionError(f"option '{name}' must be an integer, got {shown(name, raw)}"
                               ) from None
    if not -(2**63) <= value < 2**63:
        raise KafkaOptionError(f"option '{name}' is out of a long's range: {value}")
    if minimum is not None and value < minimum:
        raise KafkaOptionError(f"option '{name}' must be at least {minimum}, got {value}")
    return value
