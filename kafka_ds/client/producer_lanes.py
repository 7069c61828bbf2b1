"""send()'s lanes for records whose partition is known before they are appended.

Layer: client. A keyed record (partition ``(murmur2(key) & 0x7fffffff) % partitions``, as
Java's default partitioner picks it) or one sent with an explicit partition goes to the open
tail batch of that partition. ``Producer._send`` appends the first record of each batch in
full and records the batch here; later records of the partition join it through the lane in
``Producer.send`` while it stays open (not full, not drained). The lanes of a topic hold the
sender's metadata map they were built from (``Sender.topic_meta``, replaced whole on every
refresh): once the sender publishes new metadata (a partition may have been added), they no
longer match and the next record takes the full path, which builds new ones.

``KeyHashes`` caches the positive murmur2 of recently seen keys: in pure Python the hash costs
more than the rest of send() for a short key, and keys (user ids, device ids) repeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_ds.protocol.accumulator import ProducerBatch
from kafka_ds.protocol.partitioner import murmur2


class PartitionLanes:
    """The open batch of each partition of one topic (None: no lane), and the metadata it
    was built from. Read by send() without the lock; written under it."""

    __slots__ = ("batches", "partition_count", "topic_meta")

    def __init__(self, topic_meta: Mapping[str, Any], partition_count: int) -> None:
        # The sender's map of every topic's TopicMeta: send() checks it is still the current
        # one (an identity test, cheaper than looking the topic up).
        self.topic_meta = topic_meta
        self.partition_count = partition_count
        self.batches: list[ProducerBatch | None] = [None] * self.partition_count

    def close(self) -> None:
        self.batches = [None] * self.partition_count


class KeyHashes(dict[bytes, int]):
    """key -> ``murmur2(key) & 0x7fffffff``, for at most ``capacity`` keys.

    A dict subclass, so that send() reads it with one ``.get`` (a hit costs ~50 ns; the hash
    of a 10-byte key ~800 ns). When full it starts over: an LRU's bookkeeping would cost every
    hit, and keys that repeat come back within a few thousand records.
    """

    __slots__ = ("capacity",)

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def positive(self, key: bytes) -> int:
        """The hash of ``key``, remembered or computed (send()'s lane inlines this: ``.get``,
        then ``positive_hash`` on a miss)."""
        hashed = self.get(key)
        return self.positive_hash(key) if hashed is None else hashed

    def positive_hash(self, key: bytes) -> int:
        """The hash of ``key``, computed and remembered (call after ``.get`` missed)."""
        if len(self) >= self.capacity:
            self.clear()
        hashed = self[key] = murmur2(key) & 0x7FFFFFFF
        return hashed
