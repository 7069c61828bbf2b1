"""How many bytes decompression may still produce: one budget per partition per response, and
optionally one over the whole response.

Layer: protocol (sans-IO).

A compressed batch (v2) or wrapper message (magic 0/1) inflates by any factor its sender
chose: about 9 KB of gzip can become 8 MiB. A cap per batch does not bound anything, because a
buffer holds as many batches as fit in it. So every batch decompressed from one partition's
buffer draws on one ``DecompressionBudget``, whatever its message format, and the budgets of a
response's partitions can draw on a parent budget for the response as a whole (the fetcher
gives one), so that many partitions cannot add up to the same excess.

Decoding threads may share a parent budget; the caller then passes a lock (any context
manager, e.g. ``threading.Lock()``) so that two threads never spend the same bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from kafka_ds.protocol.compression import (
    Buffer,
    Compression,
    decompress,
    decompress_lz4_blocks_into,
    decompress_lz4_into,
    decompress_zstd_into,
)
from kafka_ds.protocol.errors import DecodeError

# First output size tried for an LZ4 or zstd batch whose decompressed size is not known: this
# or four times its compressed size, whichever is larger (doubled while it does not fit).
_FIRST_GUESS_BYTES = 256 * 1024


class DecompressionBudget:
    """At most ``limit_bytes`` of decompressed data, spent by ``decompress`` calls.

    ``name`` is what the error names as the setting to raise; ``parent`` is a wider budget
    (the response's) charged with everything charged here.
    """

    __slots__ = ("_lock", "limit_bytes", "name", "parent", "spent_bytes")

    def __init__(self, limit_bytes: int, *, name: str = "max_decompressed_bytes",
                 parent: DecompressionBudget | None = None,
                 lock: AbstractContextManager[Any] | None = None) -> None:
        if limit_bytes < 0:
            raise ValueError(f"a decompression budget cannot be negative ({limit_bytes})")
        self.limit_bytes = limit_bytes
        self.name = name
        self.parent = parent
        self.spent_bytes = 0
        self._lock: AbstractContextManager[Any] = lock or contextlib.nullcontext()

    def __repr__(self) -> str:
        return (f"DecompressionBudget({self.spent_bytes} of {self.limit_bytes} bytes spent, "
                f"{self.name})")

    def remaining(self) -> int:
        own = self.limit_bytes - self.spent_bytes
        return own if self.parent is None else min(own, self.parent.remaining())

    def charge(self, produced_bytes: int) -> None:
        """Spend ``produced_bytes`` here and in the parents; ``DecodeError`` if that exceeds a
        limit.

        The check is made again here, under the lock, because threads sharing a parent each
        decompress within what ``remaining()`` said before any of them charged: without it,
        two could each spend the same remaining bytes. The bytes one call produces are bounded
        by that earlier ``remaining()``, so memory stays bounded while the total is exact.
        """
        with self._lock:
            if self.spent_bytes + produced_bytes > self.limit_bytes:
                raise DecodeError("compressed data", None, self._exhausted(produced_bytes))
            self.spent_bytes += produced_bytes
        if self.parent is not None:
            self.parent.charge(produced_bytes)

    def decompress(self, codec: Compression | int, data: Buffer, *,
                   legacy_lz4_header: bool = False) -> bytes:
        """``compression.decompress`` within what is left; raises ``DecodeError`` beyond it."""
        allowed = self.remaining()
        try:
            out = decompress(codec, data, allowed, legacy_lz4_header=legacy_lz4_header)
        except DecodeError as exc:
            if not exc.detail.startswith("decompressed size exceeds"):
                raise
            raise DecodeError(exc.what, exc.position, self._exhausted()) from None
        self.charge(len(out))
        return out

    def decompress_into(self, codec: Compression | int, data: Buffer,
                        reserve: Callable[[int], memoryview]) -> int:
        """Decompress into memory the caller hands out, within what is left; the bytes written.

        ``reserve(size)`` returns a writable view of ``size`` bytes where the output goes (asked
        again, larger, when the output did not fit: earlier views are then abandoned). LZ4 and
        zstd are decompressed in place; other codecs are decompressed as by ``decompress`` and
        copied.
        """
        if codec == Compression.ZSTD:
            allowed = self.remaining()
            try:
                produced = decompress_zstd_into(
                    data, reserve, allowed, max(_FIRST_GUESS_BYTES, 4 * len(data)))
            except DecodeError as exc:
                if not exc.detail.startswith("decompressed size exceeds"):
                    raise
                raise DecodeError(exc.what, exc.position, self._exhausted()) from None
            self.charge(produced)
            return produced
        if codec != Compression.LZ4:
            out = self.decompress(codec, data)
            reserve(len(out))[:] = out
            return len(out)
        allowed = self.remaining()
        written = decompress_lz4_blocks_into(data, reserve, allowed)
        if written is not None:  # Java's frame layout, within the budget: the common case
            self.charge(written)
            return written
        size = min(allowed + 1, max(_FIRST_GUESS_BYTES, 4 * len(data)))
        while True:
            written = decompress_lz4_into(data, reserve(size))
            if written is not None and written <= allowed:
                break
            if written is not None or size > allowed:  # allowed + 1 bytes did not suffice
                raise DecodeError("LZ4 compressed data", None, self._exhausted())
            size = min(2 * size, allowed + 1)
        self.charge(written)
        return written

    def _exhausted(self, produced_bytes: int = 0) -> str:
        chain: list[DecompressionBudget] = []
        budget: DecompressionBudget | None = self
        while budget is not None:
            chain.append(budget)
            budget = budget.parent
        # Name the budget that ran out: this one or a parent.
        exhausted = (self if produced_bytes else
                     min(chain, key=lambda item: item.limit_bytes - item.spent_bytes))
        return (f"decompressed data would exceed {exhausted.limit_bytes} bytes "
                f"({exhausted.name}; {exhausted.spent_bytes} already used): a decompression "
                "bomb, or batches larger than the cap allows")
