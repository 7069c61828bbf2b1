"""Run every benchmark in turn (``make bench``): records codec, producer, fetcher, Spark source.

Each script starts its own single-node broker where it needs one and prints its own table
(medians and ratios against the other clients measured in the same run). Extra arguments are
not passed through: run a script directly to narrow it (see each script's docstring).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["integration.benchmarks.bench_records", "integration.benchmarks.bench_producer",
           "integration.benchmarks.bench_fetcher", "integration.benchmarks.bench_spark_source"]


def main() -> int:
    failed = []
    for module in SCRIPTS:
        print(f"\n=== {module} ===", flush=True)
        if subprocess.call([sys.executable, "-m", module], cwd=ROOT) != 0:
            failed.append(module)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
