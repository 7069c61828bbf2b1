"""KIP-392: which replica a partition's fetches go to, the leader or one it names.

Layer: client. With ``client.rack`` set and brokers running a rack-aware
``replica.selector.class``, a Fetch response may name a replica in our rack
(``preferred_read_replica``). The partition then reads from it until ``metadata.max.age.ms``
passes, and from the leader again when that replica errs, falls behind or leaves the metadata,
as Java's ``AbstractFetch`` does. ``FetchLoop`` calls these three; the state lives on
``PartitionRead`` (``preferred_node``, ``preferred_until_ms``).
"""

from __future__ import annotations

import logging

from kafka_ds.client.cluster import Cluster
from kafka_ds.client.fetch_config import FetchMetrics
from kafka_ds.client.fetch_state import PartitionRead

log = logging.getLogger(__name__)


def prefer(part: PartitionRead, node_id: int, now_ms: int, metadata_max_age_ms: int) -> None:
    """The leader names ``node_id``: read from it until ``metadata.max.age.ms`` passes, then
    ask the leader again, so a better replica (or the leader itself) is picked up."""
    log.debug("%s: reading from replica %s, as leader %s prefers", part.tp, node_id,
              part.node_id)
    part.preferred_node = part.node_id = node_id
    part.preferred_until_ms = now_ms + metadata_max_age_ms


def fall_back_to_leader(part: PartitionRead, metrics: FetchMetrics, why: str) -> None:
    log.info("%s: reading from the leader instead of replica %s (%s)", part.tp,
             part.preferred_node, why)
    metrics.preferred_replica_fallbacks += 1
    part.preferred_node = part.node_id = -1


def select(part: PartitionRead, leader_id: int, now_ms: int, cluster: Cluster,
           metrics: FetchMetrics) -> int:
    """The preferred replica while it holds and is a live broker, else the leader
    (Java's ``AbstractFetch.selectReadReplica``)."""
    preferred = part.preferred_node
    if preferred < 0:
        return leader_id
    if now_ms >= part.preferred_until_ms:
        part.preferred_node = -1  # expired: the leader says again where to read
        return leader_id
    if preferred not in cluster.brokers:
        fall_back_to_leader(part, metrics, "not a live broker in the metadata")
        cluster.invalidate()
        return leader_id
    return preferred
