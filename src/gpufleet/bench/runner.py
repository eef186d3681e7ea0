"""The benchmark runner: run B1-B5, print their tables, write docs/performance.md and plots.

`run_benchmarks(keys, quick)` runs the chosen benchmarks in order and returns their sections;
`render_markdown(...)` turns them into the performance page, given the command line, the date
and the machine (all passed in: the CLI reads the clock and the machine at its edge);
`write_report(...)` writes the page and every figure (SVG) next to it, under `performance/`.

The page is the runner's blocks between markers (`<!-- bench:begin NAME -->` ...
`<!-- bench:end NAME -->`: the header, the Targets table, the reading notes, one per
benchmark) and hand-written sections outside them. Writing over an existing page replaces only
the blocks this run wrote (`merge_page`): a benchmark not run keeps its block, a Targets row of
a benchmark not run is kept, and every hand-written section stays where it is.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from gpufleet.bench import observe, optimum, packing, simulate, speed
from gpufleet.bench.common import Section, Table, max_rss_mib, percent

#: Benchmarks in run order: key -> (one-line title, runner taking `quick`).
BENCHMARKS: dict[str, tuple[str, Callable[[bool], Section]]] = {
    "B1": ("decision speed and scaling", speed.run),
    "B2": ("packing quality against whole-node and the optimum", packing.run),
    "B3": ("agent observe cost", observe.run),
    "B4": ("simulator speed", simulate.run_speed),
    "B5": ("misprediction in simulation", simulate.run_misprediction),
}

FIGURES_DIR = "performance"

READING = """## Reading the numbers

- **B1.** `schedule()` time follows clusters x pools and the number of placements and failed
  fits, never nodes: 100, 1,000 and 10,000 nodes per pool cost the same (B1b), because a pool
  is a histogram of at most a few buckets. It grows slowly with clusters (B1a): a placement
  does not scan the fleet (a fill index per deployment, and a cluster where a deployment of
  the same explain profile failed at the same ledger version is skipped without a fit), and a
  short deployment's verdict on a cluster is computed once per (explain profile, cluster
  version), so what remains linear in clusters is building the ledger, the diagnosis's one
  verdict per cluster and the final pool states (docs/scheduling.md, "Performance").
  Whole-node accounting is a little cheaper per call and, on this fleet (far larger than the
  demand), places the same replicas. The Targets table says which rows reach 1,000
  placements/s.
- **B2.** With exact prediction (the cluster binds where the fit says), free-GPU accounting with
  Pack prediction packs as well as the exact optimum on every static instance, and keeps
  1.7-2x whole-node's GPUs busy on the dynamic traces. Spread, the default because
  kube-scheduler spreads DRA pods, is *not* within 5% of the optimum: it puts each small pod on
  the emptiest node, so by the time an 8-GPU pod or a gang arrives no node is empty; at the
  first refusal it holds little more than whole-node does. It does keep admitting small
  replicas after that ("all offered"). The fleet predicts, it does not choose: a Spread
  cluster fragments whatever the fleet predicts, so Spread's column is the price of the
  cluster's scheduler, and packing clusters (a Pack scoring profile for DRA, or a bin-packing
  scheduler) are what recovers the optimum. **Steering** (issue 14) recovers it on a spreading
  cluster: the agent chooses each pod's node by best fit and steers the default-profile
  scheduler there (the *free-GPU steered, Spread cluster* rows, where the cluster model is the
  emulated scheduler's scoring, not the prediction): 100% of the optimum at the first refusal
  on 8- and 4-GPU pools (was 49% / 54%), and 89.6% / 90.4% of capacity busy on the dynamic
  traces (was 60% / 62%), the same as an exact Pack prediction; no placed replica was left
  unbound.
- **B3.** `observe()` is linear in objects and under 1 s at 5,000 nodes / 40,000 claims /
  40,000 pods on this machine.
- **B4.** The whole target day is run, not extrapolated (see the Targets table), and it
  runs in under a minute. Each step costs what changed since the last one (docs/simulator.md,
  "Speed"): stores with ordered keys, label indexes and views kept as objects change (a new
  version takes its old one's place); emulated components fed by work queues from the change
  log; agents that look only at the replicas, pods, claims and workloads that came or went,
  and re-send their report while nothing they read changed; a controller that keeps what it
  derived by object identity, finds the unchanged runs of each listing again, applies and
  publishes by blocks of what changed, and takes *quiet* steps (only heartbeats and its own
  status writes since a step it could repeat: about 60% of the steps that run); and a core
  memo that keeps each pool's ledger and the charges of pools whose views did not change. A
  full controller step (after a placement, a histogram change or a new deployment; ~3,600 a
  day) still touches every deployment once, in the controller and in the core: reconciling
  only what the change feed names is what would take the day further.
- **B5.** Misprediction is rare while reports are fresh: the fleet re-reads the real histogram
  every report, so a wrong guess only matters for placements made between two reports, and
  then only when the pool is nearly full. The matched diagonal is the control; what shows up
  off it is a Pack prediction on a Spread cluster, which admits a large pod onto a node the
  cluster has meanwhile filled with small ones. With steering on (Preferred or Required) the
  hub predicts Pack and the agent steers the pods there: 0.0% stuck on Spread and Pack clusters
  alike.
"""


class UnknownBenchmark(ValueError):
    pass


def parse_only(text: str | None) -> list[str]:
    """`"B1,b3"` -> `["B1", "B3"]` in run order; None or "" -> every benchmark."""
    if not text:
        return list(BENCHMARKS)
    wanted = [part.strip().upper() for part in text.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in BENCHMARKS]
    if unknown:
        raise UnknownBenchmark(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}"
        )
    return [k for k in BENCHMARKS if k in wanted]


@dataclass(frozen=True, slots=True)
class Machine:
    cores: int
    python: str
    system: str
    cpu: str

    @classmethod
    def current(cls) -> Machine:
        cpu = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return cls(
            cores=os.cpu_count() or 1,
            python=platform.python_version(),
            system=f"{platform.system()} {platform.release()}",
            cpu=cpu,
        )

    def describe(self) -> str:
        return f"{self.cores} cores ({self.cpu}), Python {self.python}, {self.system}"


@contextmanager
def _quiet_controller() -> Iterator[None]:
    """The simulated controller logs every failed status write as a warning; keep the
    benchmark's output to its tables."""
    logger = logging.getLogger("gpufleet")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_benchmarks(
    keys: Sequence[str],
    quick: bool = False,
    on_section: Callable[[Section], None] | None = None,
) -> list[Section]:
    sections = []
    for key in keys:
        _, runner = BENCHMARKS[key]
        started = time.perf_counter()
        with _quiet_controller():
            section = runner(quick)
        section = replace(section, wall_s=time.perf_counter() - started)
        sections.append(section)
        if on_section is not None:
            on_section(section)
    return sections


def plain_text(section: Section) -> str:
    parts = [f"== {section.title} ({section.wall_s:,.1f} s)"]
    parts += [t.plain() for t in section.tables]
    parts += [f"note: {n}" for n in section.notes]
    return "\n\n".join(parts)


def _prose(docstring: str) -> str:
    """A module docstring as markdown, without its first line (the section heading says it)."""
    lines = docstring.strip().splitlines()
    if lines and not lines[0].startswith("**"):
        lines = lines[1:]
    return "\n".join(lines).strip()


def targets(sections: Sequence[Section]) -> Table:
    """The issue's targets against what this run measured (only for benchmarks that ran)."""
    by_key = {s.key: s.numbers for s in sections}
    rows: list[tuple[str, str, str, str]] = []

    def row(what: str, target: str, value: str, met: bool | None) -> None:
        rows.append((what, target, value, "-" if met is None else ("yes" if met else "NO")))

    b1 = by_key.get("B1", {})
    for key in sorted(k for k in b1 if k.startswith("free-GPU/") and k.endswith("/seconds")):
        base = key.removesuffix("/seconds")
        rate = b1[f"{base}/placed"] / b1[key] if b1[key] else 0.0
        row(
            f"B1 placements/s, free-GPU, {base.split('/', 1)[1].replace('/', ' x ')}",
            ">= 1,000/s (anchors.md section 2)",
            f"{rate:,.0f}/s",
            rate >= 1000,
        )
    if "flatness/ratio" in b1:
        ratio = b1["flatness/ratio"]
        row(
            "B1 flatness: call on 3,000 clusters / on 1,000, demand fixed (B1c)",
            "<= 1.3x (issue 24)",
            f"{ratio:.2f}x",
            ratio <= 1.3,
        )
    b2 = by_key.get("B2", {})
    for g in (8, 4):
        best = b2.get(f"static/{g}/optimum/first")
        for policy in packing.POLICIES:
            got = b2.get(f"static/{g}/{policy}/first")
            if got is None:
                continue
            if best:
                ratio = got / best
                met = ratio >= 0.95 if policy != packing.WHOLE_NODE else None
                row(
                    f"B2 GPUs at 1st refusal, {g}-GPU nodes, {policy}",
                    "within 5% of optimum" if met is not None else "(baseline)",
                    percent(ratio) + " of optimum",
                    met,
                )
            else:
                row(
                    f"B2 GPUs at 1st refusal, {g}-GPU nodes, {policy}",
                    "within 5% of optimum",
                    f"{got:,.1f} GPUs (no solver)",
                    None,
                )
        share = b2.get(f"dynamic/{g}/{packing.STEERED}/share")
        if share is not None:  # issue 14: steering keeps a spreading cluster busy
            row(
                f"B2 dynamic, avg GPUs busy, {g}-GPU nodes, {packing.STEERED}",
                ">= 85% of capacity",
                percent(share),
                share >= 0.85,
            )
    b3 = by_key.get("B3", {})
    if "5000/seconds" in b3:
        row(
            "B3 observe, 5,000 nodes / 40,000 claims / 40,000 pods",
            "< 1 s",
            f"{b3['5000/seconds']:.3f} s",
            b3["5000/seconds"] < 1.0,
        )
    b4 = by_key.get("B4", {})
    for key, wall in sorted(b4.items()):
        if key.endswith("/day_s"):
            fleet, deployments, _ = key.split("/")
            row(
                f"B4 simulate 24 h, {int(deployments):,} deployments, fleet {fleet}",
                "< 60 s",
                f"{wall:,.1f} s",
                wall < 60,
            )
    b5 = by_key.get("B5", {})
    for key, share in sorted(b5.items()):
        if key.endswith("/share"):
            *steering, predicted, cluster, _ = key.split("/")
            if steering:  # steering on: at or under 1% in every cell (issue 14)
                row(
                    f"B5 replicas Pending > 60 s, {steering[0]}, cluster {cluster}",
                    "<= 1%",
                    percent(share),
                    share <= 0.01,
                )
                continue
            row(
                f"B5 replicas Pending > 60 s, predict {predicted}, cluster {cluster}",
                "(measured)",
                percent(share),
                None,
            )
    return Table("Targets", ("what", "target", "measured", "met"), tuple(rows))


def render_markdown(
    sections: Sequence[Section],
    *,
    command: str,
    date: str,
    machine: Machine,
    quick: bool,
    total_s: float,
    commentary: str = "",
) -> str:
    out = [
        "# Performance",
        "",
        "<!-- The blocks between bench:begin and bench:end markers are written by "
        "`gpufleet bench --write docs/performance.md` (edit the runner, src/gpufleet/bench/, "
        "for them); everything outside them is hand-written and kept. -->",
        "",
        "Fleet-scale speed and packing quality of gpufleet, measured by the benchmark runner "
        "`gpufleet bench` (`make bench`). Benchmarks are not tests: nothing here is asserted.",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{command}` |",
        f"| date | {date} |",
        f"| machine | {machine.describe()} |",
        f"| sizes | {'quick (tiny sizes, for the test suite)' if quick else 'full'} |",
        f"| optimum solver | {optimum.solver_version() or 'not installed (highspy)'} |",
        f"| total wall time | {total_s:,.0f} s; process max RSS {max_rss_mib():,.0f} MiB |",
        "",
        "Every time has a peak memory beside it: tracemalloc's peak over one more run of the "
        "measured call (Python allocations made by that call, not its inputs), or, for the "
        "simulator, the max RSS of the child process that ran it.",
        "",
    ]
    out = [begin("header"), *out, end("header"), ""]
    summary = targets(sections)
    if summary.rows:
        out += [begin("targets"), "## Targets", "", summary.markdown(), end("targets"), ""]
    if commentary:
        out += [commentary.strip(), ""]
    out += [begin("reading"), READING, end("reading"), ""]
    for section in sections:
        out += [begin(section.key), f"## {section.title}", "", _prose(section.intro), ""]
        for table in section.tables:
            out += [f"**{table.title}**", "", table.markdown(), ""]
        for figure in section.figures:
            out += [f"![{figure.caption}]({FIGURES_DIR}/{figure.name})", ""]
        for note in section.notes:
            out += [f"> {note}", ""]
        out += [f"_Ran in {section.wall_s:,.1f} s._", end(section.key), ""]
    return "\n".join(out).rstrip() + "\n"


def begin(name: str) -> str:
    """The marker opening a block the runner writes (module docstring)."""
    return f"<!-- bench:begin {name} -->"


def end(name: str) -> str:
    """The marker closing a block the runner writes."""
    return f"<!-- bench:end {name} -->"


_BLOCK = re.compile(r"<!-- bench:begin (\S+) -->\n(.*?)<!-- bench:end \1 -->", re.DOTALL)


def blocks(page: str) -> dict[str, str]:
    """The runner's blocks of a page, by name (their text between the markers)."""
    return {m.group(1): m.group(2) for m in _BLOCK.finditer(page)}


def merge_page(old: str, new: str) -> str:
    """`old` with each block of `new` in place of the block of that name (module docstring).
    Targets rows of benchmarks `new` did not run are kept; a block `old` lacks is appended.
    A page with no blocks at all is replaced whole (it was not written with markers)."""
    fresh = blocks(new)
    kept = blocks(old)
    if not kept:
        return new
    if "targets" in fresh and "targets" in kept:
        fresh["targets"] = _merge_targets(kept["targets"], fresh["targets"], set(blocks(new)))

    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        body = fresh.pop(name, match.group(2))
        return f"{begin(name)}\n{body}{end(name)}"

    merged = _BLOCK.sub(swap, old)
    for name, body in fresh.items():
        merged = merged.rstrip() + f"\n\n{begin(name)}\n{body}{end(name)}\n"
    return merged


def _merge_targets(old: str, new: str, ran: set[str]) -> str:
    """The new Targets table, with the old rows of benchmarks not run (in benchmark order)."""
    head, rows = _table_rows(new)
    _, old_rows = _table_rows(old)
    keep = [r for r in old_rows if _row_key(r) not in ran]
    order = list(BENCHMARKS)
    merged = sorted(
        [*keep, *rows], key=lambda r: order.index(k) if (k := _row_key(r)) in order else len(order)
    )
    return "\n".join([*head, *merged]) + "\n"


def _table_rows(block: str) -> tuple[list[str], list[str]]:
    """A Targets block as (the lines up to the table's separator row, its body rows)."""
    lines = block.rstrip("\n").split("\n")
    sep = next((i for i, line in enumerate(lines) if line.startswith("|---")), len(lines) - 1)
    return lines[: sep + 1], [line for line in lines[sep + 1 :] if line.startswith("|")]


def _row_key(row: str) -> str:
    """The benchmark a Targets row measures: its first cell's first word ("B1", ...)."""
    return row.strip("| ").split(" ", 1)[0]


def write_report(path: Path, markdown: str, sections: Sequence[Section]) -> list[Path]:
    """Write the page and its figures; returns every path written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = [path]
    figures = path.parent / FIGURES_DIR
    for section in sections:
        for figure in section.figures:
            figures.mkdir(parents=True, exist_ok=True)
            target = figures / figure.name
            target.write_text(figure.svg, encoding="utf-8")
            written.append(target)
    if path.exists():
        markdown = merge_page(path.read_text(encoding="utf-8"), markdown)
    path.write_text(markdown, encoding="utf-8")
    return written
