"""``KafkaCluster``: a real Apache Kafka cluster (KRaft) on 127.0.0.1 for tests.

Each node is one JVM running ``kafka.Kafka`` with ``process.roles=broker,controller`` (a
combined node, as a small production cluster would run), from the jars ``jars.py`` caches.
Per cluster a temporary directory holds the TLS material, each node's ``server.properties``,
its data and its ``server.log`` (stdout+stderr + log4j2 output).

Start-up: pick free ports, write configs, format every node's storage with
``kafka.tools.StorageTool`` (cluster id, SCRAM users, optional feature levels), start the
JVMs, then poll until every node answers a Metadata request listing all nodes as live
brokers (a broker is listed only once registered and unfenced) and every listener port
accepts connections. A failure raises ``ClusterError`` with each node's log tail.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from . import kdc as kerberos_kdc
from . import listeners, nodeconf, procs, tls, wire
from .jars import KafkaJars, fetch_kafka_jars

# proxy.py imports the port picker from here; it now lives in nodeconf (same function).
_free_ports = nodeconf.free_ports


class ClusterError(RuntimeError):
    """The cluster could not be started, or did not become ready; carries log tails."""


def _port_open(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


_WORK_PREFIX = "kafka_ds-cluster-"
# Client-compiler-only JIT + serial GC: one-shot tools start ~40% faster.
_QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
_OWNER_FILE = "owner.pid"


def _sweep_stale_work_dirs() -> None:
    """Remove work dirs left by harness processes that died without cleanup (kill -9).

    Only dirs whose recorded owner pid is gone are removed: other test runs on the same
    machine keep theirs, and dirs kept on purpose (failed start, keep_work_dir) have no
    owner file.
    """
    for path in Path(tempfile.gettempdir()).glob(f"{_WORK_PREFIX}*"):
        try:
            pid = int((path / _OWNER_FILE).read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, ValueError):
            continue  # no/unreadable owner file, or pid alive but not ours: leave it


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ClusterError("no `java` found: install a JDK 17+ or set JAVA_HOME")
    return java


class KafkaCluster:
    """N combined broker+controller nodes (ids 1..N) on 127.0.0.1; a context manager.

    ``kerberos`` adds an MIT KDC (``kdc.py``) and the SASL_GSSAPI listener; where no KDC can
    run here, the cluster starts without them and ``kerberos_unavailable`` says why.
    ``features`` are finalized at format time (``{"transaction.version": 1}``);
    ``broker_properties`` are added to / override every node's server.properties;
    ``heap_mb`` defaults to 512 (one node) / 384 (per node of several); ``work_dir`` (default:
    a fresh temp dir) is deleted by ``stop()`` unless ``keep_work_dir`` or
    ``$KAFKA_DS_KEEP_LOGS`` is set. A failed start keeps it and names it in the error.
    """

    def __init__(self, nodes: int = 1, version: str | None = None, *,
                 features: dict[str, int] | None = None,
                 broker_properties: dict[str, Any] | None = None,
                 heap_mb: int | None = None, work_dir: Path | None = None,
                 keep_work_dir: bool = False, startup_timeout_s: float = 120.0,
                 kerberos: bool = False) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.node_ids = list(range(1, nodes + 1))
        self.requested_version = version
        self.features = dict(features or {})
        self.extra_properties = {k: str(v) for k, v in (broker_properties or {}).items()}
        self.heap_mb = heap_mb or (512 if nodes == 1 else 384)
        self.keep_work_dir = keep_work_dir or bool(os.environ.get("KAFKA_DS_KEEP_LOGS"))
        self.startup_timeout_s = startup_timeout_s
        self._work_dir_arg = work_dir
        self.work_dir: Path | None = None
        self.jars: KafkaJars | None = None
        self.tls: tls.TlsMaterial | None = None
        self.cluster_id = nodeconf.new_cluster_id()
        self.ports: dict[int, dict[str, int]] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self.kerberos = kerberos
        self.kdc: kerberos_kdc.Kdc | None = None
        self.kerberos_unavailable: str | None = None if kerberos else "not requested"

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def version(self) -> str:
        assert self.jars is not None, "start() first"
        return self.jars.version

    def start(self) -> KafkaCluster:
        """Fetch jars (cached), make TLS material, format storage, start nodes, wait ready."""
        self.jars = fetch_kafka_jars(self.requested_version)
        if self._work_dir_arg is None:
            _sweep_stale_work_dirs()
        self.work_dir = self._work_dir_arg or Path(tempfile.mkdtemp(prefix=_WORK_PREFIX))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / _OWNER_FILE).write_text(str(os.getpid()))
        try:
            self.tls = tls.generate(self.work_dir / "tls")
            if self.kerberos:
                try:
                    self.kdc = kerberos_kdc.start_kdc(self.work_dir / "kdc")
                except kerberos_kdc.KdcUnavailable as exc:
                    self.kerberos_unavailable = str(exc)
            names = listeners.all_listeners(self.kdc is not None)
            free = iter(nodeconf.free_ports(len(names) * len(self.node_ids)))
            self.ports = {n: {name: next(free) for name in names} for n in self.node_ids}
            (self.work_dir / "log4j2.properties").write_text(nodeconf.BROKER_LOG4J2)
            (self.work_dir / "tool-log4j2.properties").write_text(nodeconf.TOOL_LOG4J2)
            for node_id in self.node_ids:
                self._node_dir(node_id).mkdir(exist_ok=True)
                self._write_properties(node_id)
            self._format_all()
            for node_id in self.node_ids:
                self._launch(node_id)
            self.wait_ready(self.startup_timeout_s)
        except Exception:
            self._kill_all()
            if self.kdc is not None:
                self.kdc.stop()
            # Keep the work dir (logs) for inspection; without an owner file the next
            # harness start will not sweep it away.
            (self.work_dir / _OWNER_FILE).unlink(missing_ok=True)
            raise
        except BaseException:  # Ctrl-C / SIGTERM while starting: nothing to inspect
            self._kill_all()
            if self.kdc is not None:
                self.kdc.stop()
            shutil.rmtree(self.work_dir, ignore_errors=True)
            raise
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        """Graceful stop (SIGTERM to all nodes at once; SIGKILL after ``timeout_s``)."""
        procs.terminate(list(self._procs.values()), timeout_s)
        self._procs.clear()
        if self.kdc is not None:
            self.kdc.stop()
        if self.work_dir is None:
            return
        if self.keep_work_dir:
            (self.work_dir / _OWNER_FILE).unlink(missing_ok=True)  # kept: never swept
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def wait_ready(self, timeout_s: float = 60.0, node_ids: list[int] | None = None) -> None:
        """Block until each running node serves Metadata listing all running nodes as live."""
        expected = set(node_ids or [n for n in self.node_ids if self.is_running(n)])
        deadline = time.monotonic() + timeout_s
        pending = set(expected)
        last_problem = "not checked yet"
        while True:
            for node_id in sorted(pending):
                proc = self._procs.get(node_id)
                if proc is None or proc.poll() is not None:
                    code = None if proc is None else proc.returncode
                    raise self._error(f"node {node_id} is not running (exit code {code})")
                problem = self._node_problem(node_id, expected)
                if problem is None:
                    pending.discard(node_id)
                else:
                    last_problem = problem
            if not pending:
                return
            if time.monotonic() > deadline:
                raise self._error(f"cluster not ready after {timeout_s:.0f}s: nodes "
                                  f"{sorted(pending)} pending; last check: {last_problem}")
            time.sleep(0.2)

    def pid(self, node_id: int) -> int:
        """The process id of a running node (for CPU and GC measurements)."""
        proc = self._procs.get(node_id)
        if proc is None or proc.poll() is not None:
            raise self._error(f"node {node_id} is not running")
        return proc.pid

    def is_running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def kill(self, node_id: int) -> None:
        """kill -9 one node (no controlled shutdown: as if the machine died)."""
        procs.kill(self._take_running(node_id))

    def stop_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        """Controlled shutdown of one node (SIGTERM; SIGKILL after ``timeout_s``)."""
        procs.terminate([self._take_running(node_id)], timeout_s)

    def restart_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Start a stopped/killed node again (same ports and data) and wait until it is live."""
        if self.is_running(node_id):
            self.stop_node(node_id)
        self._launch(node_id)
        self.wait_ready(timeout_s)

    # --- addresses and client settings ------------------------------------------------------

    def port(self, node_id: int, listener: str = "PLAINTEXT") -> int:
        return self.ports[node_id][listener.upper()]

    def bootstrap(self, listener: str = "PLAINTEXT", node_ids: list[int] | None = None) -> str:
        """``"127.0.0.1:port,..."`` for ``listener`` on the given (default: all) nodes."""
        ids = node_ids or self.node_ids
        return ",".join(f"127.0.0.1:{self.port(n, listener)}" for n in ids)

    def client_config(self, listener: str = "PLAINTEXT", **kwargs: Any) -> dict[str, Any]:
        """Neutral connection facts for ``listener`` (see ``listeners.client_config``)."""
        assert self.tls is not None, "start() first"
        return listeners.client_config(listener, self.bootstrap(listener), self.tls,
                                       kdc=self.kdc, **kwargs)

    def librdkafka_config(self, listener: str = "PLAINTEXT", **kwargs: Any) -> dict[str, Any]:
        return listeners.to_librdkafka(self.client_config(listener, **kwargs))

    def java_config(self, listener: str = "PLAINTEXT", **kwargs: Any) -> dict[str, str]:
        return listeners.to_java(self.client_config(listener, **kwargs))

    def kafka_python_config(self, listener: str = "PLAINTEXT", **kwargs: Any) -> dict[str, Any]:
        return listeners.to_kafka_python(self.client_config(listener, **kwargs))

    # --- metadata, topics, tools ------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, node_id: int | None = None
                 ) -> wire.Metadata:
        """Metadata v4 from ``node_id`` (default: the first running node)."""
        node_id = node_id or next(n for n in self.node_ids if self.is_running(n))
        return wire.metadata("127.0.0.1", self.port(node_id), topics)

    def partitions(self, topic: str, node_id: int | None = None) -> list[wire.PartitionInfo]:
        md = self.metadata([topic], node_id)
        if topic not in md.topics:
            raise KeyError(f"topic {topic!r}: error {md.topic_errors.get(topic)}")
        return md.topics[topic]

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict[str, Any] | None = None, timeout_s: float = 30.0) -> None:
        """Create a topic and wait until every running node knows a leader per partition."""
        node = next(n for n in self.node_ids if self.is_running(n))
        wire.create_topic("127.0.0.1", self.port(node), name, partitions, replication_factor,
                          {k: str(v) for k, v in (config or {}).items()}, timeout_s)
        deadline = time.monotonic() + timeout_s
        for node_id in [n for n in self.node_ids if self.is_running(n)]:
            while True:
                md = self.metadata([name], node_id)
                parts = md.topics.get(name, [])
                if len(parts) == partitions and all(p.leader >= 0 for p in parts):
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"topic {name!r} has no leaders on node {node_id} "
                                       f"after {timeout_s:.0f}s: {parts or md.topic_errors}")
                time.sleep(0.05)

    def run_tool(self, main_class: str, *args: str, timeout_s: float = 120.0,
                 check: bool = True, heap_mb: int = 256, quick_start: bool = False
                 ) -> subprocess.CompletedProcess[str]:
        """Run a Kafka CLI class (``org.apache.kafka.tools.*``) from the cached tools jars.

        Example: ``run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", t, ...)``.
        Log4j output goes to stderr at WARN. ``check`` raises ClusterError on non-zero exit.
        ``quick_start`` trades peak speed for ~1 s less JVM start: for one-shot admin
        commands, never for the perf tools (benchmarks need the optimizing JIT).
        """
        assert self.jars is not None and self.work_dir is not None, "start() first"
        cmd = [java_executable(), f"-Xmx{heap_mb}m", *(_QUICK_JVM if quick_start else ()),
               f"-Dlog4j2.configurationFile={self.work_dir / 'tool-log4j2.properties'}",
               "-cp", self.jars.tools_classpath, main_class, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if check and proc.returncode != 0:
            raise ClusterError(f"{main_class} {' '.join(args)} exited {proc.returncode}\n"
                               f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
        return proc

    def describe_features(self) -> dict[str, int | str]:
        """Finalized feature levels, e.g. ``{"transaction.version": 2, "group.version": 1}``.

        Numeric levels are ints; metadata.version is its release name ("4.3-IV3"), or an int
        when the tools predate the broker and print "UNKNOWN <level>".
        """
        out = self.run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                            self.bootstrap(), "describe", quick_start=True).stdout
        levels: dict[str, int | str] = {}
        for m in re.finditer(r"Feature:\s*(\S+).*?FinalizedVersionLevel:\s*(UNKNOWN \d+|\S+)",
                             out):
            level = m.group(2).removeprefix("UNKNOWN ")
            levels[m.group(1)] = int(level) if level.isdigit() else level
        return levels

    def set_feature(self, name: str, level: int) -> None:
        """Upgrade or downgrade a finalized feature at runtime (e.g. transaction.version)."""
        current = int(self.describe_features().get(name, 0))
        if current == level:
            return
        action = "upgrade" if level > current else "downgrade"
        self.run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                      self.bootstrap(), action, "--feature", f"{name}={level}", quick_start=True)

    def partition_dir(self, topic: str, partition: int = 0, node_id: int = 1) -> Path:
        """The broker's log directory of one partition replica (segment files, indexes)."""
        return self._node_dir(node_id) / "data" / f"{topic}-{partition}"

    def log_tail(self, node_id: int, lines: int = 50) -> str:
        path = self._node_dir(node_id) / "server.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    # --- internals ---------------------------------------------------------------------------

    def _node_dir(self, node_id: int) -> Path:
        assert self.work_dir is not None
        return self.work_dir / f"node-{node_id}"

    def _write_properties(self, node_id: int) -> None:
        assert self.tls is not None
        text = nodeconf.server_properties(node_id, self.ports, self._node_dir(node_id) / "data",
                                          self.tls, self.extra_properties, self.kdc)
        (self._node_dir(node_id) / "server.properties").write_text(text)

    def _format_all(self) -> None:
        assert self.jars is not None and self.work_dir is not None
        args = nodeconf.storage_format_args(self.cluster_id, self.features)
        running = []
        for node_id in self.node_ids:  # format in parallel: each is a 2-3 s JVM start
            cmd = [java_executable(), "-Xmx256m", *_QUICK_JVM,
                   f"-Dlog4j2.configurationFile={self.work_dir / 'tool-log4j2.properties'}",
                   "-cp", self.jars.server_classpath, "kafka.tools.StorageTool", *args,
                   "-c", str(self._node_dir(node_id) / "server.properties")]
            running.append((node_id, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True)))
        for node_id, proc in running:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise ClusterError(f"formatting node {node_id} failed (exit {proc.returncode}):"
                                   f"\n{out}\nwork dir kept: {self.work_dir}")

    def _launch(self, node_id: int) -> None:
        assert self.jars is not None and self.work_dir is not None
        node_dir = self._node_dir(node_id)
        cmd = [java_executable(), f"-Xmx{self.heap_mb}m", "-Xms128m", "-XX:+UseG1GC",
               "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
               f"-Dkafka.logs.dir={node_dir}",
               *([f"-Djava.security.krb5.conf={self.kdc.krb5_conf}"] if self.kdc else []),
               "-cp", self.jars.server_classpath, "kafka.Kafka",
               str(node_dir / "server.properties")]
        self._procs[node_id] = procs.spawn(cmd, node_dir / "server.log", cwd=node_dir)

    def _node_problem(self, node_id: int, expected: set[int]) -> str | None:
        """None when ``node_id`` is ready, else what is still missing."""
        try:
            live = set(wire.metadata("127.0.0.1", self.port(node_id), timeout_s=2.0).brokers)
        except (OSError, ValueError, struct.error) as exc:  # not up yet / mid-start-up
            return f"node {node_id}: metadata request failed: {exc!r}"
        if not expected <= live:
            return f"node {node_id} sees live brokers {sorted(live)}, want {sorted(expected)}"
        for name in listeners.client_listeners(self.kdc is not None):
            if not _port_open(self.port(node_id, name)):
                return f"node {node_id}: {name} port {self.port(node_id, name)} not accepting"
        return None

    def _take_running(self, node_id: int) -> subprocess.Popen[bytes]:
        if node_id not in self.node_ids:
            raise ValueError(f"no node {node_id}; node ids are {self.node_ids}")
        if not self.is_running(node_id):
            raise ClusterError(f"node {node_id} is not running (restart_node({node_id}) "
                               "starts it again)")
        return self._procs.pop(node_id)

    def _kill_all(self) -> None:
        for proc in self._procs.values():
            procs.kill(proc)
        self._procs.clear()

    def first_errors(self, node_id: int) -> str:
        """The first ERROR/FATAL log entry of a node: message, exception and its "Caused by"
        chain (the root cause; the log tail after a failed start is shutdown noise)."""
        path = self._node_dir(node_id) / "server.log"
        try:
            log = path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        for i, line in enumerate(log):
            if " ERROR " in line or " FATAL " in line:
                entry = log[i:i + 2]
                for follow in log[i + 2:]:
                    if follow.startswith("["):  # the next log entry
                        break
                    if follow.startswith("Caused by:"):
                        entry.append(follow)
                return "\n".join(entry)
        return ""

    def _error(self, message: str) -> ClusterError:
        parts = [message, f"work dir (kept for inspection): {self.work_dir}"]
        for n in self.node_ids:
            errors = self.first_errors(n)
            if errors:
                parts.append(f"--- node {n}: first error ---\n{errors}")
            parts.append(f"--- node {n}: log tail ({self._node_dir(n) / 'server.log'}) ---\n"
                         f"{self.log_tail(n, 30)}")
        return ClusterError("\n".join(parts))
