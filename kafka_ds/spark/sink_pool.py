"""Producers and cluster connections kept per Python worker process between uses.

Layer: spark. Spark reuses its Python workers: for tasks on the executors, and for the
driver's commit calls (one worker serves the commits of many micro-batches). A new producer
costs a thread and several round trips (connect, ApiVersions, Metadata, FindCoordinator), so
the sink keeps them, keyed by their exact properties, as Spark's JVM sink keeps its producers
per executor. Whoever hits an error with one calls ``discard_*``: the next use starts clean.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping

from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.txn_state import TxnState

log = logging.getLogger(__name__)

_MAX_PRODUCERS = 32
Key = tuple[tuple[str, str], ...]
_producers: OrderedDict[Key, Producer] = OrderedDict()
_clusters: dict[Key, Cluster] = {}


def _key(properties: Mapping[str, str]) -> Key:
    return tuple(sorted(properties.items()))


def cluster(properties: Mapping[str, str]) -> Cluster:
    """A metadata and request connection for these client properties (kept for reuse)."""
    key = _key(properties)
    found = _clusters.get(key)
    if found is None:
        found = _clusters[key] = Cluster.connect(ClientConfig.from_properties(properties))
    return found


def discard_cluster(properties: Mapping[str, str]) -> None:
    found = _clusters.pop(_key(properties), None)
    if found is not None:
        found.close()


def producer(properties: Mapping[str, str]) -> Producer:
    """A producer for these properties, the one an earlier use left if it is still sound."""
    key = _key(properties)
    found = _producers.pop(key, None)
    if found is not None and found.transaction_state is TxnState.FATAL_ERROR:
        found.close(0)
        found = None
    if found is None:
        found = Producer(properties)
    _producers[key] = found  # most recently used last
    while len(_producers) > _MAX_PRODUCERS:
        _, oldest = _producers.popitem(last=False)
        oldest.close(0)
    return found


def retire_producer(properties: Mapping[str, str]) -> None:
    """Close a producer nobody will use again, leaving its prepared transaction open.

    A batch write's transactional ids are new for every job: kept in the pool, the producer
    would hold a sender thread (which wakes 5 times a second) and its broker connections
    until 32 later producers pushed it out. Closing does not end the transaction: the
    driver's commit ends it by its token.
    """
    found = _producers.pop(_key(properties), None)
    if found is not None:
        found.close()


def discard_producer(properties: Mapping[str, str]) -> None:
    """Drop a producer after a failure: abort its open transaction if it can, close it."""
    found = _producers.pop(_key(properties), None)
    if found is None:
        return
    try:
        if found.transaction_state in (TxnState.IN_TRANSACTION, TxnState.PREPARED,
                                       TxnState.ABORTABLE_ERROR):
            found.abort_transaction(10_000)
    except Exception as exc:  # the next InitProducerId on the id aborts it anyway
        log.info("could not abort the failed transaction (the next attempt will): %s", exc)
    finally:
        found.close(0)
