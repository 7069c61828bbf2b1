"""send()'s view of a topic's sticky partition, and the lane its common records take.

Layer: client. The producer keeps one per topic (``Producer._sticky_fast``): it counts the
bytes send() gives the sticky partition, so the partitioner is asked only to switch, and while
a lane is open, records of the common shape join the open batch it points at without an
accumulator call. Every method is called under the producer's lock.
"""

from __future__ import annotations

from kafka_ds.protocol.accumulator import ProducerBatch


class StickyLane:
    """send()'s view of a topic's sticky partition, and its fast lane.

    The partitioner is asked only to switch partitions: send() counts the bytes. While
    ``batch`` is set, records of the common shape join it without other bookkeeping (the
    lane): the bytes they add to the batch count against the sticky partition too.
    """

    __slots__ = ("base_bytes", "batch", "counted", "known", "partition", "stop_bytes")

    def __init__(self, partition: int, counted: int, known: int) -> None:
        self.partition = partition
        self.counted = counted  # bytes sent to it, but for the lane's (see counted_bytes)
        self.known = known  # bytes the partitioner has counted
        self.batch: ProducerBatch | None = None  # the open batch the lane appends to
        self.base_bytes = 0  # batch.size_bytes when the lane opened
        # The lane takes a record that keeps batch.size_bytes within stop_bytes: the batch's
        # room, the largest record send() accepts, and the run's bytes for the partition.
        # The record that would not fit goes to _send(), which switches partitions.
        self.stop_bytes = -1

    def counted_bytes(self) -> int:
        """Bytes sent to the partition, the lane's included."""
        batch = self.batch
        return self.counted if batch is None else \
            self.counted + batch.size_bytes - self.base_bytes

    def close_lane(self) -> None:
        self.counted = self.counted_bytes()
        self.batch = None
        self.stop_bytes = -1

    def open_lane(self, batch: ProducerBatch, run_bytes: int, size_limit: int) -> None:
        """(Under the producer's lock) appends of the lane go to ``batch`` from now on, up
        to ``run_bytes`` for the partition's run (the batch's limit)."""
        self.batch = batch
        self.base_bytes = batch.size_bytes
        self.stop_bytes = min(batch.limit_bytes, size_limit,
                              batch.size_bytes + run_bytes - self.counted)
