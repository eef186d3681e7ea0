"""Comparing runs of one scenario under different accounting modes, or with steering on and off
(`simulate --compare`): the numbers, the checks that differ, and how each mode makes a cluster
Ready. The terminal output and the HTML report both read them from here.

A steering comparison runs the scenario once per steering mode with every cluster's `steering`
set to it (`with_steering`); each cluster keeps its `nodeChoice` (what its own scheduler does).

A scenario's checks are written for one mode, so under `--compare` a check that holds in one
mode and not in the other is a *difference* between the modes, not a failure of a run. Only a
check that fails the same way in every mode is a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.core.model import Steering
from gpufleet.sim.run.runner import RunResult, Series
from gpufleet.sim.scenario.load import format_duration
from gpufleet.sim.scenario.model import Scenario


def with_steering(scenario: Scenario, steering: Steering) -> Scenario:
    """The scenario with every cluster's steering set to `steering`."""
    clusters = tuple(
        dataclasses.replace(c, behaviour=dataclasses.replace(c.behaviour, steering=steering))
        for c in scenario.fleet.clusters
    )
    return dataclasses.replace(
        scenario, fleet=dataclasses.replace(scenario.fleet, clusters=clusters)
    )


def steering_of(result: RunResult) -> str:
    """ "steering <mode>" of the run's clusters (modes joined by "/" when they differ)."""
    modes = sorted({str(c.behaviour.steering) for c in result.scenario.fleet.clusters})
    return "steering " + "/".join(modes)


def run_names(results: Sequence[RunResult]) -> list[str]:
    """A name per compared run: its accounting mode when those tell the runs apart, else its
    steering."""
    names = [r.accounting.value for r in results]
    if len(set(names)) == len(names):
        return names
    return [steering_of(r) for r in results]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    #: One cell per run, as text.
    values: tuple[str, ...]
    note: str = ""

    @property
    def is_different(self) -> bool:
        return len(set(self.values)) > 1


def time_to_place(series: Series, deployment: str) -> float | None:
    """Seconds from the first sample where `deployment` wants replicas to the first one where
    it wants some and every one is placed (to the sample interval); None: never (a deployment
    scaled to zero before it was placed was never placed), or never wanted."""
    asked: float | None = None
    for at_s, desired, placed in zip(
        series.times_s, series.desired[deployment], series.placed[deployment], strict=True
    ):
        if asked is None and desired > 0:
            asked = at_s
        if asked is not None and placed >= desired > 0:
            return at_s - asked
    return None


def _time_to_place_text(result: RunResult) -> str:
    times = []
    never = 0
    for dep in result.series.desired:
        if not any(result.series.desired[dep]):
            continue
        t = time_to_place(result.series, dep)
        if t is None:
            never += 1
        else:
            times.append(t)
    parts = []
    if times:
        parts.append(f"slowest {format_duration(max(times))}")
    if never:
        parts.append(f"{never} never fully placed")
    return ", ".join(parts) or "-"


def _final(values: dict[str, list[int]]) -> int:
    return sum(v[-1] for v in values.values() if v)


def metrics(results: Sequence[RunResult]) -> list[Metric]:
    """The comparison's summary: one row per number, one column per run."""
    rows = [
        Metric(
            "replicas placed / wanted (end)",
            tuple(f"{_final(r.series.placed)}/{_final(r.series.desired)}" for r in results),
        ),
        Metric(
            "replicas running (end)",
            tuple(str(_final(r.samples.replicas_running)) for r in results),
            "every pod of the replica Running",
        ),
        Metric(
            "GPUs allocated / published (end)",
            tuple(
                f"{sum(p.gpus_allocated for p in r.pools)}/{sum(p.gpus_total for p in r.pools)}"
                for r in results
            ),
            "ground truth",
        ),
        Metric(
            "peak GPUs allocated",
            tuple(str(_peak_allocated(r.series)) for r in results),
        ),
        Metric("refusals", tuple(str(len(r.refusals)) for r in results)),
        Metric(
            "time to place",
            tuple(_time_to_place_text(r) for r in results),
            "per deployment, from first asked to every replica placed, to the sample interval",
        ),
        Metric(
            "replica-time pending",
            tuple(format_duration(_pending_area(r.series)) for r in results),
            "wanted and not placed, summed over replicas",
        ),
    ]
    return rows


def _peak_allocated(series: Series) -> int:
    columns = list(series.pool_allocated.values())
    return max((sum(col[i] for col in columns) for i in range(len(series.times_s))), default=0)


def _pending_area(series: Series) -> float:
    total = 0.0
    for i in range(len(series.times_s) - 1):
        total += series.pending[i] * (series.times_s[i + 1] - series.times_s[i])
    return total


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """One check (or timeline action) by its path, and what each run said of it: an empty
    tuple when it held, else its failures as "what: expected X, got Y"."""

    path: str
    at_s: float
    per_run: tuple[tuple[str, ...], ...]

    @property
    def is_different(self) -> bool:
        return len(set(self.per_run)) > 1


def check_outcomes(results: Sequence[RunResult]) -> list[CheckOutcome]:
    """Every check that failed in at least one run, in time order."""
    paths: dict[str, float] = {}
    for r in results:
        for f in r.failures:
            paths.setdefault(f.path, f.at_s)
    out = []
    for path, at_s in sorted(paths.items(), key=lambda kv: (kv[1], _path_order(kv[0]))):
        per_run = tuple(
            tuple(
                f"{f.what}: expected {f.expected}, got {f.got}"
                for f in r.failures
                if f.path == path
            )
            for r in results
        )
        out.append(CheckOutcome(path, at_s, per_run))
    return out


def _path_order(path: str) -> tuple[str, int]:
    head, _, rest = path.partition("[")
    index = rest.split("]")[0]
    return head, int(index) if index.isdigit() else 0


@dataclass(frozen=True, slots=True)
class ReadyStory:
    """How a run's clusters were Ready: per (status, reason) the clusters and first time."""

    mode: str
    #: (status, reason, first time, clusters), in order of first time.
    states: tuple[tuple[str, str, float, tuple[str, ...]], ...]

    def text(self) -> str:
        parts = []
        for status, reason, at_s, clusters in self.states:
            who = ", ".join(clusters)
            parts.append(
                f"Ready={status} ({reason or 'no reason'}) from {format_duration(at_s)} on {who}"
            )
        return "; ".join(parts) or "no Ready condition"

    @property
    def reasons(self) -> frozenset[tuple[str, str]]:
        return frozenset((s, r) for s, r, _, _ in self.states)


def ready_story(result: RunResult, name: str = "") -> ReadyStory:
    first: dict[tuple[str, str], tuple[float, list[str]]] = {}
    samples = result.samples
    for cluster in sorted(samples.ready):
        seen: set[tuple[str, str]] = set()
        for at_s, state in zip(samples.times_s, samples.ready[cluster], strict=True):
            if state in seen:
                continue
            seen.add(state)
            at, clusters = first.setdefault(state, (at_s, []))
            first[state] = (min(at, at_s), clusters)
            clusters.append(cluster)
    states = tuple(
        (s, r, at, tuple(clusters))
        for (s, r), (at, clusters) in sorted(first.items(), key=lambda kv: (kv[1][0], kv[0]))
    )
    return ReadyStory(name or result.accounting.value, states)


#: What each known `Ready` reason means, for the comparison's note.
READY_MEANING = {
    "PlatformReady": "set by the simulator, standing in for the platform team: whole-node "
    "accounting has no agent reports to go by, so the cluster is Ready from the start and "
    "stays Ready whatever its agent does",
    "AgentReporting": "set by the controller while the cluster's agent reports",
    "AgentNotReporting": "set by the controller while no agent report has arrived",
    "AgentExpired": "set by the controller when the agent's reports expire",
}


def ready_differs(stories: Sequence[ReadyStory]) -> bool:
    return len({s.reasons for s in stories}) > 1
