"""Start JVM child processes that cannot outlive the Python process that started them.

A broker left running after an interrupted pytest run holds ports and memory and makes the
next run flaky, so every JVM the harness starts is:

* in its own session / process group (``setsid``): Ctrl-C in the terminal reaches pytest,
  which then stops the brokers in order, instead of killing the JVMs mid-test;
* armed with the parent-death signal SIGKILL (``setpriv --pdeathsig KILL``, util-linux,
  present on every Debian; preferred over a ``preexec_fn`` because forking Python code is
  unsafe once py4j/Spark threads exist): if the Python process dies without cleaning up
  (SIGKILL, crash), the kernel kills the JVM. Caveat: the signal fires when the *thread*
  that started the JVM exits, so start clusters from a long-lived thread (the main thread,
  as pytest fixtures and the CLI do);
* registered for an ``atexit`` sweep that kills whatever is still running (SIGTERM to the
  process group, SIGKILL after a grace period).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_SETPRIV = shutil.which("setpriv")
_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


def spawn(cmd: Sequence[str], log_path: Path, cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout+stderr appended to ``log_path``; tracked until reaped."""
    argv = list(cmd)
    if _SETPRIV:
        argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                start_new_session=True)
    with _lock:
        _live.add(proc)
    return proc


def terminate(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """SIGTERM each process group, wait up to ``timeout_s`` in total, then SIGKILL."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill(proc)
        _forget(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group and reap it."""
    _signal_group(proc, signal.SIGKILL)
    proc.wait()
    _forget(proc)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):  # exited since poll()
        os.killpg(proc.pid, sig)  # pid == pgid thanks to start_new_session


def _forget(proc: subprocess.Popen[bytes]) -> None:
    with _lock:
        _live.discard(proc)


@atexit.register
def _sweep() -> None:
    with _lock:
        leftovers = list(_live)
    if leftovers:
        terminate(leftovers, timeout_s=10.0)
