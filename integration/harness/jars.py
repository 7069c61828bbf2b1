"""Fetch and cache the JVM jars the real-broker tests need, using Maven.

Why Maven: Apache Kafka and Spark's JVM Kafka connector are published on Maven Central
(the only JVM source this workplace reaches), and ``mvn dependency:copy-dependencies``
resolves their full runtime closure for us. We write a throwaway pom per jar set, let
Maven copy the closure into a staging directory, and move it into a cache that is reused
across runs::

    ${KAFKA_DS_CACHE:-~/.cache/kafka_ds}/
        kafka-<version>/server/*.jar     broker, StorageTool, log4j2 (classpath of kafka.Kafka)
        kafka-<version>/tools/*.jar      kafka-tools: FeatureCommand, perf tools, console tools
        kafka-<version>/manifest.json    written last: its presence means "complete"
        spark-kafka-<pyspark version>/   Spark's JVM connector + deps pyspark lacks

Central (as this workplace sees it) is incomplete, which shapes this module:

* ``kafka_2.13:4.4.0`` is there but ``kafka-tools`` / ``kafka-tools-api`` 4.4.0 are not. The
  tools are therefore resolved separately, at the Kafka version when Central has it, else
  at ``KAFKA_TOOLS_FALLBACK`` (pinned), into their own directory: a self-consistent
  classpath at the tools' version. They only talk to the broker over the wire.
* ``spark-sql-kafka-0-10_2.13`` stops at 4.2.0 and ``spark-token-provider-kafka-0-10_2.13``
  at 4.0.0 (plus a 4.1 preview), while pyspark is 4.3.0. The exact pyspark version is tried
  first, then the pinned ``SPARK_CONNECTOR_FALLBACK`` pair (checked to read and write
  topics on pyspark 4.3.0). ``$SPARK_KAFKA_CONNECTOR_VERSION`` forces a connector version.

Maven version ranges are not used for these fallbacks on purpose: Maven reads the POM of
every version in a range, and Central lacks some of those (e.g. spark-tags 4.0.3), so a
range fails where a pinned version resolves.

Fetching is idempotent (manifest check), safe across processes (``fcntl`` lock per jar
set) and quiet unless Maven fails, in which case its output is put in the exception.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Newest Kafka release on Maven Central when this was written; bump deliberately.
DEFAULT_KAFKA_VERSION = "4.4.0"
# Newest 3.9.x (the last line with ZooKeeper + KRaft) for compatibility runs.
COMPAT_KAFKA_VERSION = "3.9.2"
# Kafka 4.x logs through slf4j 1.7 -> log4j2; 3.9 through slf4j 1.7 as well, so one binding
# (log4j-slf4j-impl) and one log4j2 config serve both. log4j-1.2-api lets 3.9's
# Log4jController (dynamic log levels) find the log4j 1 API it expects.
LOG4J2_VERSION = "2.25.4"
# Pinned so a fresh ~/.m2 does not pull Maven 3.8's ancient default plugin version.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
# Used when Central lacks kafka-tools at the broker's version (true for 4.4.0).
KAFKA_TOOLS_FALLBACK = {"4": "4.3.1", "3": "3.9.2"}
# (connector, token provider) used when Central lacks the installed pyspark's version.
SPARK_CONNECTOR_FALLBACK = ("4.2.0", "4.0.0")
MANIFEST = "manifest.json"
_MVN_TIMEOUT_S = 900.0


Coord = tuple[str, str, str, Sequence[str]]  # groupId, artifactId, version, exclusions
Manifest = dict[str, Any]  # manifest.json: resolved versions and jar file names


class JarFetchError(RuntimeError):
    """Maven could not resolve or copy a jar set; the message carries Maven's output."""


@dataclass(frozen=True)
class KafkaJars:
    """Resolved Kafka jar sets for one Kafka version."""

    version: str
    tools_version: str  # may be lower than ``version`` (see module docstring)
    server: tuple[Path, ...]
    tools: tuple[Path, ...]

    @property
    def server_classpath(self) -> str:
        return os.pathsep.join(str(p) for p in self.server)

    @property
    def tools_classpath(self) -> str:
        return os.pathsep.join(str(p) for p in self.tools)


def cache_root() -> Path:
    """The jar cache root: ``$KAFKA_DS_CACHE`` or ``~/.cache/kafka_ds``."""
    return Path(os.environ.get("KAFKA_DS_CACHE") or Path.home() / ".cache" / "kafka_ds")


def kafka_version(version: str | None = None) -> str:
    """The Kafka version to use: explicit argument, else ``$KAFKA_VERSION``, else default."""
    return version or os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION


def installed_pyspark_version() -> str:
    import pyspark  # local import: fetching Kafka jars must not need pyspark

    return pyspark.__version__


def fetch_kafka_jars(version: str | None = None) -> KafkaJars:
    """Return the cached Kafka jars for ``version``, downloading them on first use."""
    version = kafka_version(version)
    target = cache_root() / f"kafka-{version}"
    log4j: list[Coord] = [("org.apache.logging.log4j", a, LOG4J2_VERSION, [])
                          for a in ("log4j-api", "log4j-core", "log4j-slf4j-impl",
                                    "log4j-1.2-api")]
    # kafka_2.13 4.4.0 declares a runtime dependency on kafka-tools-api 4.4.0, which Central
    # lacks; the broker never loads it, so it is left out of the server set.
    server: list[Coord] = [("org.apache.kafka", "kafka_2.13", version,
                            ["org.apache.kafka:kafka-tools-api"]), *log4j]

    def tools(v: str) -> list[Coord]:
        return [("org.apache.kafka", "kafka-tools", v, []), *log4j]

    fallback = KAFKA_TOOLS_FALLBACK.get(version.split(".")[0])

    def build(staging: Path) -> Manifest:
        server_jars = _copy_dependencies(server, staging / "server")
        candidates = [tools(version)] + ([tools(fallback)] if fallback else [])
        tools_jars = _first_resolving(candidates, staging / "tools")
        tools_version = next(v for a, v, _ in tools_jars if a == "kafka-tools")
        return {"version": version, "tools_version": tools_version,
                "server": sorted(p.name for _, _, p in server_jars),
                "tools": sorted(p.name for _, _, p in tools_jars)}

    manifest = _cached(target, build)
    return KafkaJars(
        version=version,
        tools_version=str(manifest["tools_version"]),
        server=tuple(target / "server" / n for n in manifest["server"]),
        tools=tuple(target / "tools" / n for n in manifest["tools"]),
    )


def fetch_spark_kafka_jars(spark_version: str | None = None) -> list[Path]:
    """Jars to put on ``spark.jars`` so ``format("kafka")`` (Spark's JVM connector) works.

    Resolves ``spark-sql-kafka-0-10_2.13`` for the installed pyspark version (else the
    pinned fallback, see module docstring) and keeps only the jars pyspark does not already
    ship (kafka-clients, commons-pool2, the token provider and the connector itself).
    """
    spark_version = spark_version or installed_pyspark_version()
    forced = os.environ.get("SPARK_KAFKA_CONNECTOR_VERSION")
    target = cache_root() / f"spark-kafka-{forced or spark_version}"
    token_provider = "spark-token-provider-kafka-0-10_2.13"
    connector = "spark-sql-kafka-0-10_2.13"

    def coords(connector_version: str, token_version: str) -> list[Coord]:
        # The token provider is pinned on its own because Central's newest one is older
        # than its newest connector, whose own dependency on it would not resolve.
        return [("org.apache.spark", connector, connector_version,
                 [f"org.apache.spark:{token_provider}"]),
                ("org.apache.spark", token_provider, token_version, [])]

    pairs = [(forced, forced)] if forced else [(spark_version, spark_version)]
    pairs.append(SPARK_CONNECTOR_FALLBACK)
    shipped = _pyspark_jar_names()

    def build(staging: Path) -> Manifest:
        jars = _first_resolving([coords(*p) for p in pairs], staging / "jars")
        keep, resolved = [], {}
        for artifact, ver, path in jars:
            if artifact in (connector, token_provider):
                resolved[artifact] = ver
            if _shipped(artifact, shipped):
                path.unlink()  # pyspark has its own copy; two versions would clash
            else:
                keep.append(path.name)
        return {"spark_version": spark_version, "resolved": resolved, "jars": sorted(keep)}

    manifest = _cached(target, build)
    return [target / "jars" / n for n in manifest["jars"]]


def spark_kafka_manifest(spark_version: str | None = None) -> Manifest:
    """Which connector versions were resolved for ``spark_version`` (fetches if needed)."""
    jars = fetch_spark_kafka_jars(spark_version)
    manifest: Manifest = json.loads((jars[0].parent.parent / MANIFEST).read_text())
    return manifest


# --- internals -----------------------------------------------------------------------------


def _pyspark_jar_names() -> set[str]:
    import pyspark

    return {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def _shipped(artifact: str, shipped: set[str]) -> bool:
    prefix = artifact + "-"
    return any(n.startswith(prefix) and n[len(prefix):][:1].isdigit() for n in shipped)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # blocks while another process fetches the same set
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_manifest(target: Path) -> Manifest | None:
    try:
        manifest: Manifest = json.loads((target / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    # A manifest whose jars were deleted by hand is as good as none. Each jar list is
    # stored under the name of the subdirectory holding it.
    for sub in ("server", "tools", "jars"):
        if not all((target / sub / name).is_file() for name in manifest.get(sub, [])):
            return None
    return manifest


def _cached(target: Path, build: Callable[[Path], Manifest]) -> Manifest:
    manifest = _read_manifest(target)
    if manifest is not None:
        return manifest
    with _locked(target.parent / f".{target.name}.lock"):
        manifest = _read_manifest(target)  # another process may have finished meanwhile
        if manifest is not None:
            return manifest
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            manifest = build(staging)
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            if target.exists():
                shutil.rmtree(target)  # an incomplete earlier attempt
            staging.rename(target)  # atomic: readers see all of it or nothing
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return manifest


def _pom(coords: Sequence[Coord]) -> str:
    deps = []
    for group, artifact, version, exclusions in coords:
        excl = "".join(
            "<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(
                *e.split(":")) for e in exclusions)
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version><exclusions>{excl}</exclusions></dependency>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>kafka-ds.harness</groupId><artifactId>jar-fetch</artifactId>"
            "<version>0</version><packaging>pom</packaging>"
            f"<dependencies>{''.join(deps)}</dependencies></project>\n")


def _first_resolving(candidates: Sequence[Sequence[Coord]], out_dir: Path
                     ) -> list[tuple[str, str, Path]]:
    """Copy the first candidate set Maven can resolve; raise with every failure if none."""
    errors = []
    for coords in candidates:
        try:
            return _copy_dependencies(coords, out_dir)
        except JarFetchError as exc:
            shutil.rmtree(out_dir, ignore_errors=True)
            errors.append(str(exc))
    raise JarFetchError("no candidate resolved:\n\n" + "\n\n".join(errors))


def _copy_dependencies(coords: Sequence[Coord], out_dir: Path) -> list[tuple[str, str, Path]]:
    """Run Maven over a throwaway pom; return (artifactId, version, path) per copied jar."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarFetchError("`mvn` is not on PATH; install Maven (apt-get install maven).")
    with tempfile.TemporaryDirectory(prefix="kafka_ds-pom-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(coords))
        layout = Path(work) / "layout"
        cmd = [mvn, "-B", "-q", "-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={layout}",
               # Repository layout (group/artifact/version/) tells us artifact and version
               # without guessing them from file names like spark-sql-kafka-0-10_2.13-4.2.0.
               "-Dmdep.useRepositoryLayout=true"]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=_MVN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(f"mvn timed out after {_MVN_TIMEOUT_S:.0f}s: {' '.join(cmd)}"
                                ) from exc
        if proc.returncode != 0:
            raise JarFetchError(
                f"mvn failed (exit {proc.returncode}) resolving "
                f"{', '.join(f'{g}:{a}:{v}' for g, a, v, _ in coords)}.\n"
                "Check that Maven Central is reachable and the versions exist there.\n"
                f"command: {' '.join(cmd)}\npom:\n{pom.read_text()}\n--- mvn output ---\n"
                + proc.stdout[-8000:])
        out_dir.mkdir(parents=True, exist_ok=True)
        result = []
        for jar in sorted(layout.rglob("*.jar")):
            version_dir = jar.parent
            artifact, version = version_dir.parent.name, version_dir.name
            dest = out_dir / jar.name
            shutil.move(str(jar), dest)
            result.append((artifact, version, dest))
        if not result:
            raise JarFetchError(f"mvn copied no jars for {coords}")
        return result
