"""A request frame whose large byte fields stay where they are: the pieces to send in turn.

Layer: protocol. A Produce request carries record batches of hundreds of KiB, already encoded
(``bytes``). Writing them into the frame's ``bytearray`` copied every batch once more, and
growing that buffer copied the frame again; sent in pieces, the batches go from their own
memory to the socket. Only ``bytes`` of ``SPLICE_MIN_BYTES`` or more are kept by reference:
they cannot change before the frame is sent, and below that size the copy costs less than
one more ``send`` call.
"""

from __future__ import annotations

from typing import Any

SPLICE_MIN_BYTES = 64 * 1024


class PiecedFrame(bytearray):
    """A ``bytearray`` the schema encoder writes into as usual; ``out += value`` keeps a large
    ``bytes`` value aside (noting where it goes) instead of copying it in."""

    def __init__(self, size: int = 0) -> None:
        super().__init__(size)
        self.spliced: list[tuple[int, bytes]] = []  # (offset in self, value), in order
        self.spliced_bytes = 0

    # bytearray types += as returning bytearray: a subclass returning itself is the same.
    def __iadd__(self, value: Any) -> PiecedFrame:  # type: ignore[misc]
        if type(value) is bytes and len(value) >= SPLICE_MIN_BYTES:
            self.spliced.append((len(self), value))
            self.spliced_bytes += len(value)
            return self
        return super().__iadd__(value)

    def total_bytes(self) -> int:
        """The frame's length once its pieces are joined."""
        return len(self) + self.spliced_bytes

    def pieces(self) -> list[memoryview | bytes]:
        """The frame, in order: stretches of this buffer and the values kept aside."""
        view = memoryview(self)
        out: list[memoryview | bytes] = []
        start = 0
        for offset, value in self.spliced:
            if offset > start:
                out.append(view[start:offset])
            out.append(value)
            start = offset
        if start < len(self):
            out.append(view[start:])
        return out
