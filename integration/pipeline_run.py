"""Run the whole pipeline (``pipeline_app``: pykafka -> upper(value) -> pykafka) as drivers.

``PipelineRun`` is a ``CrashRun`` (input and output topics, checkpoint, fault file, counting
read-back) whose driver program is ``integration.pipeline_app``. Beyond ``run()`` (start and
wait), ``start()`` returns the running driver so a test can break the broker meanwhile, and
``wait_fired(n)`` waits until ``n`` faults fired (the test's cue to act).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from integration.sink_crash import REPO, CrashRun


class PipelineRun(CrashRun):
    APP = "integration.pipeline_app"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One read task per input partition (the source would merge small ranges into one
        # task): each batch then writes in two transactions, as a real batch would.
        self.config["source_options"] = {"minPartitions": "2"}

    def expected(self) -> set[str]:
        """The transform upper-cases every value."""
        return {f"ROW-{i}" for i in range(self.rows)}

    def start(self, **overrides: Any) -> tuple[subprocess.Popen[str], float]:
        """Start one driver program; ``finish()`` waits for it."""
        path = self.config_file(**overrides)
        process = subprocess.Popen([sys.executable, "-m", self.APP, str(path)], cwd=REPO,
                                   env=self.env(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        return process, time.monotonic()

    def finish(self, running: tuple[subprocess.Popen[str], float], *,
               timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        process, started = running
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            self.record(subprocess.CompletedProcess(process.args, -1, stdout, stderr), started)
            raise
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        self.record(result, started)
        return result

    def wait_fired(self, count: int, running: tuple[subprocess.Popen[str], float], *,
                   timeout_s: float = 300) -> list[dict[str, Any]]:
        """Poll the fault log until ``count`` faults fired; fail if the driver ends first."""
        process, _ = running
        deadline = time.monotonic() + timeout_s
        while len(self.fired()) < count:
            if process.poll() is not None:
                result = self.finish(running)
                raise AssertionError(f"the driver ended (exit {result.returncode}) before "
                                     f"fault {count} fired:\n{result.stderr[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"fault {count} did not fire in {timeout_s:.0f} s")
            time.sleep(0.3)
        return self.fired()

    def run_until_done(self, *, attempts: int = 3,
                       **overrides: Any) -> list[subprocess.CompletedProcess[str]]:
        """Restart the query from its checkpoint until a run ends cleanly; all runs' results."""
        results = []
        for _ in range(attempts):
            results.append(self.run(**overrides))
            if results[-1].returncode == 0:
                return results
        raise AssertionError(f"no clean run in {attempts} attempts:\n"
                             f"{results[-1].stderr[-3000:]}")

    def assert_exactly_once(self) -> int:
        """Every transformed row once at read_committed, nothing else; returns the count."""
        counts = self.counts(self.output())
        assert set(counts) == self.expected(), (
            f"missing {len(self.expected() - set(counts))}, "
            f"unexpected {len(set(counts) - self.expected())}")
        assert [row for row, count in counts.items() if count != 1] == []
        assert self.open_transactions() == []
        return sum(counts.values())
