"""Writes one benchmark run as ``report.md`` (Markdown tables) and PNG plots (matplotlib).

Layer: benchmarks. Knows nothing about Kafka or Spark: it takes ``Measurement``s (the
repetitions of one connector on one scenario), latency and memory results, and the machine
description, and lays them out. Every figure in the report is computed here from the samples
it is given (median, min, max, ratios of medians), so a table can never disagree with a plot.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Measurement:
    """The repetitions of one connector on one scenario of one case (e.g. spark-read)."""

    case: str            # "spark-read", "client-consume" ...
    scenario: str        # "batch 100 B none"
    connector: str       # "pykafka", "kafka (JVM)", "confluent-kafka" ...
    ours: bool           # kafka_ds's own figure (ratios are ours / each peer)
    samples: list[float]  # one figure per repetition, in ``unit``
    unit: str = "records/s"

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Latency:
    """End-to-end latency of one connector: produce call to the sink, per record."""

    connector: str
    ours: bool
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    rate_per_s: float


@dataclass
class MemoryTrace:
    """RSS of the Python worker(s) sampled while a Spark query read a large topic."""

    topic_bytes: int
    bound_bytes: int             # what the fetch bounds let one worker buffer
    seconds: list[float]          # sample times since the read started
    rss_mb: list[float]           # RSS of the worker that ran the task, at each sample
    baseline_mb: float            # before the read (worker idle, after a warm-up read)
    # The same without the pages of mapped files (procfs.memory_mib): what the worker itself
    # holds, comparable between machines whose page caches differ.
    anon_mb: list[float]
    anon_baseline_mb: float

    @property
    def early_peak_mb(self) -> float:
        """Peak over the first third of the read: once the buffers are full."""
        third = max(1, len(self.rss_mb) // 3)
        return max(self.rss_mb[:third])

    @property
    def peak_mb(self) -> float:
        return max(self.rss_mb)

    @property
    def anon_peak_mb(self) -> float:
        return max(self.anon_mb)


@dataclass
class Target:
    """A goal: in every scenario of ``case`` whose name contains ``scenario_has``, the best
    median among ``ours`` (our settings, as ``peers`` may hold a peer's) is at least
    ``minimum`` x the best median among ``peers``.

    ``ceiling`` names a measurement that is neither ours nor a peer: a Python connector that
    does no work of its own, whose ratio to the best peer is as far as any connector on the
    same API can go in that scenario. The table shows it beside the target, so that a
    missed target reads as ours to close or as out of a Python connector's reach."""

    case: str
    scenario_has: str
    ours: tuple[str, ...]
    peers: tuple[str, ...]
    minimum: float
    ceiling: str | None = None


@dataclass
class Report:
    mode: str
    machine: dict[str, str]
    versions: dict[str, str]
    wall_s: float = 0.0
    measurements: list[Measurement] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    memory: MemoryTrace | None = None
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _rate(value: float, unit: str) -> str:
    if not unit.startswith("records"):
        return f"{value:.3g}"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    return f"{value / 1e3:.0f} k"


def cases(measurements: Iterable[Measurement]) -> list[str]:
    return list(dict.fromkeys(m.case for m in measurements))


def ratios(rows: Sequence[Measurement]) -> dict[tuple[str, str], float]:
    """(ours, peer) -> median(ours) / median(peer), within one scenario."""
    return {(a.connector, b.connector): a.median / b.median
            for a in rows if a.ours for b in rows if not b.ours and b.median > 0}


def _case_table(case: str, measurements: list[Measurement]) -> list[str]:
    rows = [m for m in measurements if m.case == case]
    connectors = list(dict.fromkeys(m.connector for m in rows))
    scenarios = list(dict.fromkeys(m.scenario for m in rows))
    pairs = list(dict.fromkeys(pair for s in scenarios
                               for pair in ratios([m for m in rows if m.scenario == s])))
    unit = rows[0].unit
    header = ["scenario", *[f"{c} ({unit})" for c in connectors],
              *[f"{ours} / {peer}" for ours, peer in pairs]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for scenario in scenarios:
        by_connector = {m.connector: m for m in rows if m.scenario == scenario}
        cells = [scenario]
        for connector in connectors:
            m = by_connector.get(connector)
            cells.append("-" if m is None else
                         f"{_rate(m.median, unit)} ({_rate(min(m.samples), unit)}-"
                         f"{_rate(max(m.samples), unit)})")
        found = ratios(list(by_connector.values()))
        cells += [f"{found[pair]:.2f}x" if pair in found else "-" for pair in pairs]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _target_lines(targets: list[Target], measurements: list[Measurement]) -> list[str]:
    lines = ["| case | scenario | best of ours / best of | target | measured | met "
             "| ceiling / best of |",
             "|---|---|---|---|---|---|---|"]
    for target in targets:
        rows = [m for m in measurements if m.case == target.case
                and target.scenario_has in m.scenario]
        for scenario in dict.fromkeys(m.scenario for m in rows):
            by_connector = {m.connector: m for m in rows if m.scenario == scenario}
            peers = [by_connector[p].median for p in target.peers if p in by_connector]
            ours = [by_connector[o].median for o in target.ours if o in by_connector]
            if not ours or not peers:
                continue
            ratio = max(ours) / max(peers)
            ceiling = by_connector.get(target.ceiling) if target.ceiling else None
            reach = "-" if ceiling is None else f"{ceiling.median / max(peers):.2f}x"
            lines.append(f"| {target.case} | {scenario} | {', '.join(target.ours)} / "
                         f"{', '.join(target.peers)} | >= {target.minimum:.2f}x | "
                         f"{ratio:.2f}x | {'yes' if ratio >= target.minimum else 'NO'} | "
                         f"{reach} |")
    return lines if len(lines) > 2 else []


def plot_case(case: str, measurements: list[Measurement], path: Path) -> None:
    """One panel per scenario (each on its own scale: 100 B and 1 KB rates differ tenfold),
    one bar per connector at its median, whiskers from min to max; ours outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    rows = [m for m in measurements if m.case == case]
    connectors = list(dict.fromkeys(m.connector for m in rows))
    scenarios = list(dict.fromkeys(m.scenario for m in rows))
    colors = {c: f"C{i}" for i, c in enumerate(connectors)}
    columns = min(4, len(scenarios))
    lines = -(-len(scenarios) // columns)
    fig, axes = plt.subplots(lines, columns, squeeze=False,
                             figsize=(1.0 + columns * (0.55 * len(connectors) + 1.2),
                                      0.8 + 3.2 * lines))
    for ax, scenario in zip(axes.flat, scenarios, strict=False):
        found = [m for c in connectors for m in rows
                 if m.scenario == scenario and m.connector == c]
        ax.bar(range(len(found)), [m.median for m in found],
               yerr=[[m.median - min(m.samples) for m in found],
                     [max(m.samples) - m.median for m in found]],
               capsize=3, color=[colors[m.connector] for m in found],
               edgecolor=["black" if m.ours else "none" for m in found], linewidth=1.2)
        ax.set_xticks([])
        ax.set_title(scenario, fontsize=9)
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[len(scenarios):]:
        ax.axis("off")
    axes[0][0].set_ylabel(rows[0].unit)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[c]) for c in connectors]
    fig.legend(handles, connectors, loc="lower center", ncol=min(len(connectors), 3),
               fontsize=8, frameon=False)
    fig.suptitle(f"{case}: median of the repetitions, whiskers min-max (ours outlined)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * (len(connectors) > 3), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_memory(trace: MemoryTrace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(trace.seconds, trace.rss_mb, label="RSS of the Python worker that ran the task")
    ax.plot(trace.seconds, trace.anon_mb, label="of which anonymous (not mapped files)")
    ax.axhline(trace.baseline_mb, linestyle=":", color="grey", label="before the read")
    ax.set_xlabel("seconds into the read")
    ax.set_ylabel("MB")
    ax.set_ylim(bottom=0)
    ax.set_title(f"memory: reading {trace.topic_bytes / 1e6:.0f} MB, fetch bounds "
                 f"~{trace.bound_bytes / 1e6:.0f} MB")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(latencies: list[Latency], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(latencies))
    ax.bar([x - 0.2 for x in xs], [lat.p50_ms for lat in latencies], 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [lat.p99_ms for lat in latencies], 0.4, label="p99")
    ax.set_xticks(list(xs), [lat.connector for lat in latencies])
    ax.set_ylabel("ms, produce to sink")
    ax.set_title(f"latency at {latencies[0].rate_per_s / 1e3:.0f} k records/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _slug(case: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in case)


def _python_speed_line(measurements: list[Measurement]) -> list[str]:
    """The machine's speed at our kind of work, to compare runs by: this VM's Python speed
    varied 4x between runs (the one-core decode at 100 B: 5.13 M records/s on 2026-11-24,
    1.24 M on 2026-11-28), and ratios against C or JVM peers moved with it."""
    for m in measurements:
        if (m.case == "decode (one core, CPU time)" and m.scenario == "100 B none"
                and m.ours):
            return [f"- Python speed (one core decoding 100 B records, the decode case): "
                    f"{_rate(m.median, m.unit)}; ratios against C and JVM peers move with it, "
                    "so compare runs at a like speed"]
    return []


def write_report(report: Report, out_dir: Path) -> Path:
    """report.md and one PNG per case (plus memory and latency) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# kafka_ds benchmarks ({report.mode} mode)", "",
             "Medians of the repetitions, with (min-max); ratios are of medians, ours / peer, "
             "all measured in this one run against the same broker. The machine is shared: "
             "compare ratios, not absolute rates.", "",
             f"Wall time of the run: {report.wall_s / 60:.1f} min.", "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in report.machine.items()]
    lines += _python_speed_line(report.measurements)
    lines += ["", "## Versions", ""]
    lines += [f"- {key}: {value}" for key, value in report.versions.items()]
    targets = _target_lines(report.targets, report.measurements)
    if targets:
        lines += ["", "## Targets", "", *targets]
        if any(t.ceiling for t in report.targets):
            lines += ["", "\"ceiling / best of\": where the case measured one, a Python "
                      "connector doing no work of its own (see the notes) over the same peers: "
                      "as far as any connector on Spark's Python DataSource API went in that "
                      "scenario. A target above it is out of a Python connector's reach here."]
    for case in cases(report.measurements):
        png = f"{_slug(case)}.png"
        plot_case(case, report.measurements, out_dir / png)
        lines += ["", f"## {case}", "", *_case_table(case, report.measurements), "",
                  f"![{case}]({png})"]
    if report.latencies:
        plot_latency(report.latencies, out_dir / "latency.png")
        lines += ["", "## latency", "",
                  "| connector | records | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
        lines += [f"| {lat.connector} | {lat.records} | {lat.p50_ms:.0f} | {lat.p99_ms:.0f} | "
                  f"{lat.max_ms:.0f} |" for lat in report.latencies]
        lines += ["", "![latency](latency.png)"]
    if report.memory is not None:
        trace = report.memory
        plot_memory(trace, out_dir / "memory.png")
        lines += ["", "## memory", "",
                  f"Python worker RSS while one Spark task read {trace.topic_bytes / 1e6:.0f} MB "
                  f"({trace.topic_bytes / trace.bound_bytes:.0f}x what the fetch bounds let it "
                  f"buffer, ~{trace.bound_bytes / 1e6:.0f} MB): {trace.baseline_mb:.0f} MB "
                  f"before, peak {trace.early_peak_mb:.0f} MB in the first third of the read, "
                  f"{trace.peak_mb:.0f} MB over the whole read "
                  f"({len(trace.rss_mb)} samples). Of that, anonymous memory (the worker's "
                  f"own, without the pages of the libraries it maps, which depend on the page "
                  f"cache): {trace.anon_baseline_mb:.0f} MB before, peak "
                  f"{trace.anon_peak_mb:.0f} MB.", "", "![memory](memory.png)"]
    if report.notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in report.notes]]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def summary(report: Report) -> dict[str, Any]:
    """Ratios per case and scenario, for the console and for a JSON dump."""
    out: dict[str, Any] = {}
    for case in cases(report.measurements):
        rows = [m for m in report.measurements if m.case == case]
        for scenario in dict.fromkeys(m.scenario for m in rows):
            found = ratios([m for m in rows if m.scenario == scenario])
            out[f"{case}: {scenario}"] = {f"{a}/{b}": round(r, 2) for (a, b), r in found.items()}
    return out
