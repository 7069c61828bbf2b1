"""Time, behind a small interface so that state machines and tests can use a fake clock.

Layer: net. The protocol layer never reads the clock: callers pass ``now_ms`` in.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds from an arbitrary origin; never goes backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch (record timestamps)."""
        ...

    def sleep_ms(self, duration_ms: int) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep_ms(self, duration_ms: int) -> None:
        if duration_ms > 0:
            time.sleep(duration_ms / 1000)


SYSTEM_CLOCK = SystemClock()
