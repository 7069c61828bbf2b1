"""What the files of a harness node say: server.properties, log4j2 configs, cluster id, ports.

Pure functions with no process handling, so the broker settings chosen for tests sit in
one place and can be read (and reviewed) on their own; ``cluster.py`` writes them to disk.
"""

from __future__ import annotations

import base64
import random
import socket
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import listeners
from .tls import TlsMaterial

if TYPE_CHECKING:
    from .kdc import Kdc

# Broker JVMs log INFO to stdout, which the harness redirects into node-N/server.log.
BROKER_LOG4J2 = """\
status = warn
# Kafka logs its own shutdown; log4j2's shutdown hook would close the appender first.
shutdownHook = disable
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
# One line per request at INFO/DEBUG would drown the useful lines.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""
# CLI tools (StorageTool, FeatureCommand, perf tools): warnings only, on stderr, so their
# stdout stays parseable.
TOOL_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c{1})%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1, outside the kernel's ephemeral range.

    A port is chosen here, released, and bound by the broker seconds later. Ports the kernel
    hands out for outgoing connections and ``bind(0)`` (every client, proxy and JVM on this
    shared machine) come from the ephemeral range, so one chosen there can be taken in the
    meantime and the broker dies with "Address already in use". Outside it, only another
    harness choosing at random could collide.
    """
    low, high = _UNASSIGNED_PORTS
    rng = random.SystemRandom()
    # Hold every socket until all are chosen so that one port is never handed out twice.
    socks: list[socket.socket] = []
    try:
        for _ in range(count * 50 if low <= high else 0):
            if len(socks) == count:
                break
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", rng.randint(low, high)))
            except OSError:  # in use, or lingering in TIME_WAIT
                probe.close()
                continue
            socks.append(probe)
        while len(socks) < count:  # a crowded range: fall back to the kernel's choice
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            socks.append(probe)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ports_outside_ephemeral() -> tuple[int, int]:
    """A port range the kernel does not hand out by itself (empty if it hands out all)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        ephemeral_low, ephemeral_high = int(text[0]), int(text[1])
    except (OSError, ValueError, IndexError):
        ephemeral_low, ephemeral_high = 32_768, 60_999  # Linux's defaults
    if ephemeral_low > 12_000:
        return 10_000, ephemeral_low - 1
    if ephemeral_high < 63_000:
        return ephemeral_high + 1, 65_535
    return 1, 0  # nothing outside it: free_ports falls back to the kernel's choice


_UNASSIGNED_PORTS = _ports_outside_ephemeral()


def new_cluster_id() -> str:
    """A random cluster id in Kafka's Uuid text form (22 chars, URL-safe base64)."""
    # Kafka itself never hands out ids starting with "-" (they look like CLI flags).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def server_properties(node_id: int, ports: Mapping[int, Mapping[str, int]], log_dir: Path,
                      tls: TlsMaterial, extra: Mapping[str, str], kdc: Kdc | None = None
                      ) -> str:
    """server.properties text for ``node_id``; ``ports`` maps every node to its listeners."""
    n = len(ports)
    voters = ",".join(f"{i}@127.0.0.1:{p['CONTROLLER']}" for i, p in sorted(ports.items()))
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        # Static quorum: understood by 3.9 and 4.x, no --standalone/--initial-controllers.
        "controller.quorum.voters": voters,
        "log.dirs": str(log_dir),
        **listeners.broker_listener_properties(dict(ports[node_id]), tls, kdc),
        "offsets.topic.replication.factor": str(min(3, n)),
        "transaction.state.log.replication.factor": str(min(3, n)),
        "transaction.state.log.min.isr": str(min(2, n)),
        "share.coordinator.state.topic.replication.factor": str(min(3, n)),
        "share.coordinator.state.topic.min.isr": str(min(2, n)),
        # Fewer internal partitions than the default 50: the first group/transaction
        # creates them, which is most of a fresh cluster's first-use latency.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        # Abort timed-out transactions within ~1 s instead of the default minute.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "num.partitions": "1",
        # Small thread pools: the machine has 2 cores shared with Spark and 3 nodes.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        # ACLs for authorisation tests: a resource without ACLs stays open to everyone, and
        # ANONYMOUS (PLAINTEXT, the brokers and controllers themselves) is never denied.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": "User:ANONYMOUS",
        **_rack_properties(node_id, n),
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def rack(node_id: int) -> str:
    """The rack of a node in a multi-node cluster (each node has its own)."""
    return f"rack-{node_id}"


def _rack_properties(node_id: int, nodes: int) -> dict[str, str]:
    """Several nodes: one rack each, and leaders that send a consumer with ``client.rack`` to
    the in-sync replica in its rack (KIP-392). A consumer without it reads from the leader."""
    if nodes < 2:
        return {}
    return {"broker.rack": rack(node_id),
            "replica.selector.class":
                "org.apache.kafka.common.replica.RackAwareReplicaSelector"}


def storage_format_args(cluster_id: str, features: Mapping[str, int]) -> Sequence[str]:
    """``kafka.tools.StorageTool`` arguments (before ``-c <properties>``)."""
    args = ["format", "-t", cluster_id, *listeners.scram_format_args()]
    for name, level in features.items():
        args += ["--feature", f"{name}={level}"]
    return args
