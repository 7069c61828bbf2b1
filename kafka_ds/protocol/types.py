"""Small value types shared by every layer.

Layer: protocol (stdlib only). Plain named tuples: hashable, picklable across the Spark
boundary, cheap to build.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class IsolationLevel:
    """Fetch/ListOffsets isolation levels (an int on the wire)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @staticmethod
    def parse(text: str) -> int:
        """``"read_committed"`` -> 1; raises ValueError naming the accepted values."""
        normalized = text.strip().lower()
        if normalized == "read_uncommitted":
            return IsolationLevel.READ_UNCOMMITTED
        if normalized == "read_committed":
            return IsolationLevel.READ_COMMITTED
        raise ValueError(f"isolation.level must be read_uncommitted or read_committed, "
                         f"got {text!r}")
