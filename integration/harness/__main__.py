"""Command line for the harness (run from the repository root).

    python -m integration.harness start [--nodes 3] [--version 3.9.2]
                                        [--feature transaction.version=1] [--property k=v]
        Start a cluster in the foreground, print each listener's bootstrap servers and
        client settings (JSON), stop cleanly on Ctrl-C or SIGTERM.

    python -m integration.harness fetch-jars [--versions 4.4.0 3.9.2] [--no-spark]
        Warm the jar cache (CI does this once): Kafka default + 3.9, Spark's connector.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from . import jars, listeners
from .cluster import KafkaCluster


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--{what} expects key=value, got {item!r}")
        out[key] = value
    return out


def _start(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    features = {k: int(v) for k, v in _pairs(args.feature, "feature").items()}
    t0 = time.monotonic()
    cluster = KafkaCluster(nodes=args.nodes, version=args.version, features=features,
                           broker_properties=_pairs(args.property, "property"),
                           keep_work_dir=args.keep)
    with cluster:
        print(f"Kafka {cluster.version} ({args.nodes} node(s)) ready in "
              f"{time.monotonic() - t0:.1f}s; work dir {cluster.work_dir}", flush=True)
        for name in listeners.CLIENT_LISTENERS:
            print(f"  {name:<11} {cluster.bootstrap(name)}")
        configs = {name: cluster.client_config(name) for name in listeners.CLIENT_LISTENERS}
        configs["SASL_SCRAM (SCRAM-SHA-512)"] = cluster.client_config(
            "SASL_SCRAM", mechanism="SCRAM-SHA-512")
        print("client_config per listener:")
        print(json.dumps(configs, indent=2), flush=True)
        print("Ctrl-C (or SIGTERM) stops the cluster.", flush=True)
        while not stop.wait(1.0):
            dead = [n for n in cluster.node_ids if not cluster.is_running(n)]
            if dead:
                print(f"node(s) {dead} exited; log tail:\n{cluster.log_tail(dead[0], 30)}",
                      file=sys.stderr)
                return 1
        print("stopping...", flush=True)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    for version in args.versions:
        t0 = time.monotonic()
        kafka = jars.fetch_kafka_jars(version)
        print(f"kafka {kafka.version}: {len(kafka.server)} server jars, {len(kafka.tools)} "
              f"tools jars (kafka-tools {kafka.tools_version}) in {time.monotonic() - t0:.1f}s")
    if not args.no_spark:
        t0 = time.monotonic()
        spark_jars = jars.fetch_spark_kafka_jars()
        manifest = jars.spark_kafka_manifest()
        print(f"spark connector for pyspark {manifest['spark_version']}: "
              f"{manifest['resolved']} -> {len(spark_jars)} jars in {time.monotonic() - t0:.1f}s")
    print(f"cache: {jars.cache_root()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.harness")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run a cluster in the foreground")
    start.add_argument("--nodes", type=int, default=1)
    start.add_argument("--version", default=None, help="Kafka version (default: "
                       f"$KAFKA_VERSION or {jars.DEFAULT_KAFKA_VERSION})")
    start.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                       help="feature level at format time, e.g. transaction.version=1")
    start.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                       help="extra broker property for every node")
    start.add_argument("--keep", action="store_true", help="keep the work dir (logs) on exit")
    start.set_defaults(func=_start)
    fetch = sub.add_parser("fetch-jars", help="pre-fetch Kafka and Spark connector jars")
    fetch.add_argument("--versions", nargs="+",
                       default=[jars.kafka_version(), jars.COMPAT_KAFKA_VERSION])
    fetch.add_argument("--no-spark", action="store_true",
                       help="skip Spark's JVM connector (needs pyspark installed)")
    fetch.set_defaults(func=_fetch)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
