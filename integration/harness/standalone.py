"""A local Spark standalone cluster: one master and N workers, from pyspark's own scripts.

Tests that need the driver, the executors and the Python workers in separate processes (as
on a real cluster) use it: ``pyspark/bin/spark-class org.apache.spark.deploy.master.Master``
and ``...worker.Worker`` start the daemons on 127.0.0.1 with free ports, and ``submit`` runs
an application with ``spark-submit --master spark://...`` (client deploy mode: the driver is
the submitting process). Every JVM is started through ``procs.spawn``, so none outlives the
test run; ``executor_pids`` finds the executor JVMs (``CoarseGrainedExecutorBackend``) so a
test can kill one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from . import nodeconf, procfs, procs

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"
_EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """``with StandaloneCluster(workers=2) as cluster: cluster.submit([...])``."""

    def __init__(self, workers: int = 2, cores_per_worker: int = 1,
                 memory_per_worker: str = "1g", conf_dir: Path | None = None,
                 startup_timeout_s: float = 120.0) -> None:
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.conf_dir = conf_dir
        self.startup_timeout_s = startup_timeout_s
        self.work_dir = Path(tempfile.mkdtemp(prefix="kafka_ds-standalone-"))
        self.port, self.web_port, *self._worker_ports = nodeconf.free_ports(2 + 2 * workers)
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        if self.conf_dir is not None:
            env["SPARK_CONF_DIR"] = str(self.conf_dir)
        return env

    def _spark_class(self, main: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
        command = [str(spark_home() / "bin" / "spark-class"), main, *args]
        process = procs.spawn(command, log, cwd=self.work_dir, env=self._env())
        self._procs.append(process)
        return process

    def start(self) -> StandaloneCluster:
        try:
            self._spark_class(_MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                              "--webui-port", str(self.web_port),
                              log=self.work_dir / "master.log")
            self._wait_for(lambda: self._alive_workers() is not None, "the master to start")
            for index in range(self.workers):
                worker_dir = self.work_dir / f"worker-{index}"
                worker_dir.mkdir()
                port, web_port = self._worker_ports[2 * index:2 * index + 2]
                self._spark_class(
                    _WORKER, "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", str(web_port), "--cores", str(self.cores_per_worker),
                    "--memory", self.memory_per_worker, "--work-dir", str(worker_dir),
                    self.url, log=self.work_dir / f"worker-{index}.log")
            self._wait_for(lambda: self._alive_workers() == self.workers,
                           f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def _alive_workers(self) -> int | None:
        """Workers the master lists as ALIVE (its web UI's JSON), None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/",
                                        timeout=2) as response:
                return int(json.load(response).get("aliveworkers", 0))
        except (OSError, ValueError):
            return None

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            if any(process.poll() is not None for process in self._procs):
                break
            time.sleep(0.5)
        logs = "\n".join(f"{log.name}: {log.read_text(errors='replace')[-1500:]}"
                         for log in sorted(self.work_dir.glob("*.log")))
        raise RuntimeError(f"standalone cluster: gave up waiting for {what}\n{logs}")

    def submit(self, app: Sequence[str], *, conf: dict[str, str] | None = None,
               jars: Sequence[str] = (), env: dict[str, str] | None = None,
               options: Sequence[str] = (), timeout_s: float = 600
               ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master <url>`` an application (a .py file and its arguments);
        ``options`` are more spark-submit options (e.g. ``--properties-file``: its
        ``spark.master`` yields to this cluster's, given on the command line)."""
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.url,
                   "--deploy-mode", "client", *options]
        if jars:
            command += ["--jars", ",".join(jars)]
        for key, value in (conf or {}).items():
            command += ["--conf", f"{key}={value}"]
        command += list(app)
        return subprocess.run(command, env={**self._env(), **(env or {})}, capture_output=True,
                              text=True, timeout=timeout_s, cwd=self.work_dir)

    def executor_pids(self) -> list[int]:
        """Process ids of the executor JVMs this cluster's workers run now."""
        workers = [f"127.0.0.1:{port}" for port in self._worker_ports[0::2]]
        return sorted(pid for pid in procfs.pids()
                      if _EXECUTOR in (line := procfs.cmdline(pid))
                      and any(worker in line for worker in workers))

    def executor_of(self, pid: int) -> int | None:
        """The executor JVM that ``pid`` (e.g. one of its Python workers) descends from."""
        executors = set(self.executor_pids())
        while pid > 1 and pid not in executors:
            parent = procfs.parent_of(pid)
            if parent is None:
                return None
            pid = parent
        return pid if pid in executors else None

    def stop(self) -> None:
        procs.terminate(self._procs, timeout_s=20.0)
        self._procs.clear()
        shutil.rmtree(self.work_dir, ignore_errors=True)

