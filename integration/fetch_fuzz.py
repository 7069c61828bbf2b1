"""Seeded damage to Fetch responses in flight, for the fuzz tests (through Spark and the client).

Each mutation class is a function ``(frame, api_version, rng) -> Mutated | None`` that the
fault proxy (``KafkaProxy.mutate_responses``) applies to a Fetch response frame: it finds the
fields with ``fetch_response_layout`` (the proxy's own walk of the frame, not kafka_ds's
decoder), damages one, fixes the frame's size prefix, and says what it did. A response that
carries no complete record batch is left alone (``None``): the damage must land on data the
read needs, not on an empty long poll.

``MUTATIONS`` pairs each class with what the reader must do about it:

* ``SAME``: a field the read does not depend on (throttle time within reason, an unknown
  tagged field, a batch's partition leader epoch, a last batch whose length runs past the
  records, which every client treats as cut off and fetches again): the rows must equal what
  the JVM connector reads from the broker directly.
* ``CORRUPT``: a record batch whose CRC no longer matches (its CRC or the bytes it covers,
  or a length that ends the batch early): ``CorruptRecordError`` naming the topic-partition
  and the batch's offset.
* ``DECODE``: the response itself does not parse (a records length or an array count past
  the end of the frame, a frame cut short): ``DecodeError`` (``cannot decode ...``).
* ``ANY_ERROR``: a few random bits flipped anywhere in the partitions' part of the response
  except the batches' base offsets, or in one partition's fields before its records (its
  index, error code, watermarks, records length): either our error or the same rows. A base
  offset is the one field where a flipped bit would change the rows silently for any Kafka
  client: the batch CRC leaves it out by design (the broker assigns offsets after the
  producer sealed the batch), so no reader can tell a damaged one from a real one.

Seeds are fixed (``CASES``), so a failing case reproduces with its name.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import NamedTuple

from integration.fetch_helpers import produce
from integration.harness.proxy import (
    FetchLayout,
    FetchPartitionLayout,
    Mutated,
    ProxiedKafkaCluster,
    fetch_response_layout,
)

SAME, CORRUPT, DECODE, ANY_ERROR = "same rows", "CorruptRecordError", "DecodeError", "any error"
# Byte positions inside a v2 record batch.
_LENGTH_AT, _LEADER_EPOCH_AT, _MAGIC_AT, _CRC_AT, _ATTRIBUTES_AT = 8, 12, 16, 17, 21

Mutator = Callable[[bytes, int, random.Random], "Mutated | None"]

# The fuzzed topic: many small batches per partition, so a response carries several.
PARTITIONS, PER_PARTITION, PER_BATCH = 2, 300, 15


def write_fuzz_topic(cluster: ProxiedKafkaCluster, topic: str) -> None:
    """Create ``topic`` and write it one flush per batch (keys, headers, varied sizes)."""
    cluster.create_topic(topic, PARTITIONS, 1)
    for start in range(0, PER_PARTITION, PER_BATCH):
        produce(cluster, topic, [
            {"partition": p, "key": b"k%d" % i, "value": b"v%d-%d" % (p, i) * (1 + i % 9),
             "headers": [("h", b"%d" % i)]}
            for p in range(PARTITIONS) for i in range(start, start + PER_BATCH)],
            **{"linger.ms": 0})


class Target(NamedTuple):
    layout: FetchLayout
    partition: FetchPartitionLayout
    batches: list[tuple[int, int]]


def _target(frame: bytes, version: int, rng: random.Random) -> Target | None:
    """A partition of the response with complete v2 batches, picked by ``rng``; None if none."""
    try:
        layout = fetch_response_layout(frame, version)
    except (struct.error, IndexError):
        return None
    candidates = [(p, [b for b in p.batches(frame) if frame[b[0] + _MAGIC_AT] == 2])
                  for p in layout.partitions]
    candidates = [(p, b) for p, b in candidates if b]
    if not candidates:
        return None
    partition, batches = rng.choice(candidates)
    return Target(layout, partition, batches)


def _splice(frame: bytes, at: int, old_length: int, new: bytes) -> bytes:
    """``frame`` with ``old_length`` bytes at ``at`` replaced by ``new``, size prefix fixed."""
    out = bytearray(frame[:at]) + new + frame[at + old_length:]
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(frame: bytes, at: int) -> tuple[int, int]:
    """(value, width in bytes) of the unsigned varint at ``at``."""
    value = shift = width = 0
    while True:
        byte = frame[at + width]
        width += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, width
        shift += 7


def _length_field(frame: bytes, at: int, flexible: bool) -> tuple[int, int]:
    """(encoded value, width) of an int32 length or a compact (uvarint) one."""
    if flexible:
        return _read_uvarint(frame, at)
    return struct.unpack_from(">i", frame, at)[0], 4


def _set_length(frame: bytes, at: int, flexible: bool, value: int) -> bytes:
    """Overwrite the length field at ``at`` with ``value`` (for a compact field: the encoded
    value, length + 1), keeping the frame's size prefix right."""
    _, width = _length_field(frame, at, flexible)
    new = _uvarint(value) if flexible else struct.pack(">i", value)
    return _splice(frame, at, width, new)


def _batch_text(frame: bytes, target: Target, batch: tuple[int, int]) -> str:
    """How a description names a batch: the test reads the partition and offset back."""
    offset = struct.unpack_from(">q", frame, batch[0])[0]
    return f"the batch at offset {offset} of partition {target.partition.partition}"


def throttle_time(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    millis = rng.randint(1, 400)
    out = bytearray(frame)
    struct.pack_into(">i", out, target.layout.throttle_at, millis)
    return Mutated(bytes(out), f"throttle_time_ms set to {millis}")


def unknown_tagged_field(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None or not target.layout.flexible:
        return None
    at = target.layout.tags_at
    count, width = _read_uvarint(frame, at)
    # Tags go in ascending order: one above any the schema defines, after the others.
    tag = rng.randint(1000, 5000)
    payload = rng.randbytes(rng.randint(0, 40))
    entry = _uvarint(tag) + _uvarint(len(payload)) + payload
    with_count = _splice(frame, at, width, _uvarint(count + 1))
    at_end = len(with_count)
    out = _splice(with_count, at_end, 0, entry)
    return Mutated(out, f"unknown tagged field {tag} ({len(payload)} bytes) appended")


def leader_epoch_of_a_batch(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    batch = rng.choice(target.batches)
    out = bytearray(frame)
    epoch = rng.randrange(2**31)
    struct.pack_into(">i", out, batch[0] + _LEADER_EPOCH_AT, epoch)
    return Mutated(bytes(out), f"partition leader epoch of {_batch_text(frame, target, batch)} "
                               f"set to {epoch}")


def batch_length_overrun(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    start, end = target.batches[-1]
    if end != target.partition.records_end:
        return None  # a batch cut off by the broker follows: overrunning it changes nothing
    length = struct.unpack_from(">i", frame, start + _LENGTH_AT)[0]
    longer = length + rng.randint(1, 1 << 20)
    out = bytearray(frame)
    struct.pack_into(">i", out, start + _LENGTH_AT, longer)
    return Mutated(bytes(out), f"length of {_batch_text(frame, target, (start, end))} (the last) "
                               f"{length} -> {longer}")


def batch_crc(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    batch = rng.choice(target.batches)
    out = bytearray(frame)
    out[batch[0] + _CRC_AT + rng.randrange(4)] ^= 1 << rng.randrange(8)
    return Mutated(bytes(out), f"CRC of {_batch_text(frame, target, batch)} bit-flipped")


def batch_payload_bits(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    batch = rng.choice(target.batches)
    out = bytearray(frame)
    flips = rng.randint(1, 3)
    for _ in range(flips):
        out[rng.randrange(batch[0] + _ATTRIBUTES_AT, batch[1])] ^= 1 << rng.randrange(8)
    return Mutated(bytes(out), f"{flips} bit(s) flipped under the CRC of "
                               f"{_batch_text(frame, target, batch)}")


def batch_length_short(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    batch = rng.choice(target.batches)
    length = struct.unpack_from(">i", frame, batch[0] + _LENGTH_AT)[0]
    if length <= 61:
        return None
    shorter = rng.randint(61 - 12, length - 1)  # still a whole header: the CRC judges it
    out = bytearray(frame)
    struct.pack_into(">i", out, batch[0] + _LENGTH_AT, shorter)
    return Mutated(bytes(out), f"length of {_batch_text(frame, target, batch)} "
                               f"{length} -> {shorter}")


def records_length_overrun(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    part, flexible = target.partition, target.layout.flexible
    encoded, _ = _length_field(frame, part.records_length_at, flexible)
    beyond = len(frame) - part.records_at + rng.randint(1, 1 << 16)
    out = _set_length(frame, part.records_length_at, flexible, beyond + (1 if flexible else 0))
    return Mutated(out, f"records length of partition {part.partition} "
                        f"{encoded - (1 if flexible else 0)} -> {beyond} (past the frame)")


def array_count_overrun(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    layout, flexible = target.layout, target.layout.flexible
    at = rng.choice([layout.topics_count_at, *layout.partitions_count_at])
    count = rng.choice([1000, 65_536, 2**31 - 2, rng.randint(10, 1 << 24)])
    out = _set_length(frame, at, flexible, count + (1 if flexible else 0))
    which = "topics" if at == layout.topics_count_at else "partitions"
    return Mutated(out, f"{which} count set to {count}")


def truncated(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    cut_at = rng.randrange(target.partition.partition_at, len(frame))
    return Mutated(_splice(frame, cut_at, len(frame) - cut_at, b""),
                   f"frame cut to {cut_at} of {len(frame)} bytes (size prefix fixed)")


def random_bits(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    target = _target(frame, version, rng)
    if target is None:
        return None
    layout = target.layout
    protected: set[int] = set()
    for part in layout.partitions:
        for start, _ in part.batches(frame):
            protected.update(range(start, start + 8))  # base offsets: see the module doc
    first = min(p.partition_at for p in layout.partitions)
    positions = [i for i in range(first, len(frame)) if i not in protected]
    out = bytearray(frame)
    flipped = []
    for _ in range(rng.randint(1, 4)):
        at = rng.choice(positions)
        out[at] ^= 1 << rng.randrange(8)
        flipped.append(at)
    return Mutated(bytes(out), f"bits flipped at bytes {sorted(flipped)} of {len(frame)}")


def partition_header_bits(frame: bytes, version: int, rng: random.Random) -> Mutated | None:
    """Bits flipped in one partition's fields before its records: index, error code,
    watermarks, aborted transactions, preferred replica, the records' length."""
    target = _target(frame, version, rng)
    if target is None:
        return None
    part = target.partition
    out = bytearray(frame)
    flipped = []
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(part.partition_at, part.records_at)
        out[at] ^= 1 << rng.randrange(8)
        flipped.append(at - part.partition_at)
    return Mutated(bytes(out), f"bits flipped in the fields of partition {part.partition} at "
                               f"bytes {sorted(flipped)} of its header")


MUTATIONS: dict[str, tuple[str, Mutator]] = {
    "throttle_time": (SAME, throttle_time),
    "unknown_tagged_field": (SAME, unknown_tagged_field),
    "leader_epoch_of_a_batch": (SAME, leader_epoch_of_a_batch),
    "batch_length_overrun": (SAME, batch_length_overrun),
    "batch_crc": (CORRUPT, batch_crc),
    "batch_payload_bits": (CORRUPT, batch_payload_bits),
    "batch_length_short": (CORRUPT, batch_length_short),
    "records_length_overrun": (DECODE, records_length_overrun),
    "array_count_overrun": (DECODE, array_count_overrun),
    "truncated": (DECODE, truncated),
    "random_bits": (ANY_ERROR, random_bits),
    "partition_header_bits": (ANY_ERROR, partition_header_bits),
}


def seeded(mutator: Mutator, seed: int) -> Callable[[bytes, int], Mutated | None]:
    """The proxy's mutator for one case: ``mutator`` with its own ``Random(seed)``."""
    rng = random.Random(seed)
    return lambda frame, version: mutator(frame, version, rng)


def after(responses: int, mutator: Callable[[bytes, int], Mutated | None]
          ) -> Callable[[bytes, int], Mutated | None]:
    """``mutator``, once ``responses`` Fetch responses carrying batches have gone by untouched
    (to damage a later micro-batch of a stream than its first)."""
    passed = 0

    def mutate(frame: bytes, version: int) -> Mutated | None:
        nonlocal passed
        if passed < responses:
            if _target(frame, version, random.Random(0)) is not None:
                passed += 1
            return None
        return mutator(frame, version)

    return mutate


def cases(seeds_per_class: int, first_seed: int = 0) -> list[tuple[str, int]]:
    """(class name, seed) for every class, ``seeds_per_class`` seeds each."""
    return [(name, first_seed + i) for name in MUTATIONS for i in range(seeds_per_class)]
