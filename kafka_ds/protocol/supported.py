"""The version range this library speaks for each API, gathered from the message classes.

Layer: protocol. Importing this module imports every message schema, which is why it is
separate from ``api_keys`` (which the schemas themselves import).
"""

from __future__ import annotations

import importlib
import pkgutil

import kafka_ds.protocol.messages as _messages
from kafka_ds.protocol.schema import Request


def _collect() -> dict[int, tuple[int, int]]:
    ranges: dict[int, tuple[int, int]] = {}
    for module_info in pkgutil.iter_modules(_messages.__path__):
        module = importlib.import_module(f"{_messages.__name__}.{module_info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Request)
                    and value.__module__ == module.__name__):
                ranges[int(value.API_KEY)] = value.VALID_VERSIONS
    return ranges


SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = _collect()
