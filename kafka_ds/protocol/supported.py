"""Every message class this library declares, and the version range it speaks for each API.

Layer: protocol. Importing this module imports every message schema, which is why it is
separate from ``api_keys`` (which the schemas themselves import). Connections negotiate with
the plain table in ``supported_versions`` instead; tests hold the two equal.
"""

from __future__ import annotations

import importlib
import pkgutil

import kafka_ds.protocol.messages as _messages
from kafka_ds.protocol.schema import ApiMessage, Request


def message_classes() -> list[type[ApiMessage]]:
    """Every request and response class in ``kafka_ds.protocol.messages``, by name."""
    found: list[type[ApiMessage]] = []
    for module_info in pkgutil.iter_modules(_messages.__path__):
        module = importlib.import_module(f"{_messages.__name__}.{module_info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, ApiMessage)
                    and value.__module__ == module.__name__ and hasattr(value, "API_KEY")):
                found.append(value)
    return sorted(found, key=lambda cls: cls.__name__)


def declared_versions() -> dict[int, tuple[int, int]]:
    """The version range of every request class, by API key: what the schemas declare."""
    return {int(cls.API_KEY): cls.VALID_VERSIONS
            for cls in message_classes() if issubclass(cls, Request)}
