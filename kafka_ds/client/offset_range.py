"""``OffsetRange``: what a read asks for, ``[start, end)`` of one partition.

Layer: client. A module of its own so that code which only plans reads (the Spark source's
driver side, in a Python process Spark starts for every streaming query) does not import the
fetch engine, numpy and the decoders with it.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka_ds.protocol.types import TopicPartition


class OffsetRange(NamedTuple):
    """``[start, end)`` of one partition: ``start`` is read, ``end`` is not."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
