"""The errors a read raises when it cannot go on, worded for the person who must act.

Layer: client. ``FetchLoop`` decides *when* a read stops (no progress within
``fetch.timeout.ms``, a response that does not parse); these say *why*, from what the read
knows and the broker's error does not: the partition's range and position, its high
watermark and last stable offset, the partitions and offsets a damaged response answered.
"""

from __future__ import annotations

from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetch_state import PartitionRead
from kafka_ds.client.topic_errors import UnknownTopicError
from kafka_ds.protocol.errors import DecodeError, KafkaDsError, KafkaTimeoutError
from kafka_ds.protocol.fetch_session import PendingFetch


def stalled_error(part: PartitionRead, config: FetchConfig) -> KafkaDsError:
    """The error for a partition that made no progress within ``fetch.timeout.ms``."""
    if part.topic_unknown:
        return UnknownTopicError(part.tp.topic, f": no broker knew it for "
                                 f"fetch.timeout.ms ({config.fetch_timeout_ms} ms); "
                                 "check the topic name, or raise fetch.timeout.ms if it "
                                 "is being created")
    readable = part.last_stable_offset if config.read_committed else part.high_watermark
    detail = ""
    if 0 <= readable <= part.position:
        if config.read_committed and part.high_watermark > readable:
            detail = (f"; the last stable offset is {readable}: a transaction is still "
                      "open there and read_committed cannot read past it")
        else:
            detail = (f"; the partition ends at {readable} (high watermark): the range "
                      "asks for offsets not written yet")
    elif part.last_error:
        detail = f"; last error: {part.last_error}"
    return KafkaTimeoutError(
        f"reading {part.tp} [{part.start}, {part.end}) made no progress at offset "
        f"{part.position} for {config.fetch_timeout_ms} ms{detail}. "
        "Raise fetch.timeout.ms to wait longer")


def undecodable_response(node_id: int, pending: PendingFetch, error: DecodeError) -> DecodeError:
    """A Fetch response that does not parse, naming what it answered: the decoder only knows
    byte positions and field indexes, the read knows the partitions and offsets asked for."""
    asked = sorted(pending.next_partitions.items())
    shown = ", ".join(f"{tp} at offset {state.fetch_offset}" for tp, state in asked[:8])
    more = f" and {len(asked) - 8} more partitions" if len(asked) > 8 else ""
    return DecodeError(f"the Fetch response of node {node_id} to a fetch of {shown}{more}",
                       None, f"{error}. The broker or the network damaged it: the read stops "
                             "here rather than guess")
