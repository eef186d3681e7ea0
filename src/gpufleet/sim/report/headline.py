"""The headline of a report: what happened and why, with the numbers, in a few sentences at
the top of the page (the charts and tables below are the evidence).

One run: how the fleet ended (replicas placed and running, GPUs allocated), then each
deployment that waited, with the reason and numbers of its refusal (the core's top reason:
"best node has 5 free"), and whether and when it was placed; then the checks.

A comparison: how the runs ended side by side, then why they differ: the refusals one run
has and another does not, with their numbers; then the checks, where a run under an
accounting the scenario was not written for is expected to miss some (said as one sentence
with counts, not a line per check).

Plain text: the page escapes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpufleet.sim.run.compare import run_names, time_to_place
from gpufleet.sim.run.results import Refusal, RunResult
from gpufleet.sim.scenario.load import format_duration

#: At most this many deployments are named in a headline; the rest are counted.
MAX_NAMED = 3


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _final(values: dict[str, list[int]]) -> int:
    return sum(v[-1] for v in values.values() if v)


def outcome(result: RunResult) -> str:
    """How the run ended: replicas placed and running, GPUs allocated."""
    s = result.series
    wanted, placed = _final(s.desired), _final(s.placed)
    running = _final(result.samples.replicas_running)
    allocated = sum(p.gpus_allocated for p in result.pools)
    total = sum(p.gpus_total for p in result.pools)
    clusters = {c for d in result.deployments for c in d.clusters}
    where = f" on {_plural(len(clusters), 'cluster')}" if clusters else ""
    return (
        f"{placed} of {wanted} wanted replicas placed{where} and {running} running at the end "
        f"({format_duration(result.scenario.end_s)}); {allocated} of {total} GPUs allocated."
    )


def refusal_text(refusal: Refusal) -> str:
    """A refusal's reason with its numbers: "InsufficientGPU: 1 pod requests 8 devices ...;
    best node has 5 free (cluster gke, pool h100)"."""
    code = refusal.detail_code or refusal.reason
    detail = refusal.detail or refusal.message
    where = f" ({refusal.where})" if refusal.where else ""
    return f"{code}: {detail}{where}"


def waits(result: RunResult) -> list[str]:
    """One sentence for each deployment that was refused: its reason and numbers (its last
    refusal's), and when it was placed, or that it was still short at the end."""
    by_deployment: dict[str, list[Refusal]] = {}
    for r in result.refusals:
        by_deployment.setdefault(r.deployment, []).append(r)
    short = {d.name for d in result.deployments if d.placed < d.desired}
    # Deployments still short at the end first: they are what a reader looks for.
    names = sorted(by_deployment, key=lambda n: (n not in short, n))
    out = []
    for name in names[:MAX_NAMED]:
        refusals = by_deployment[name]
        last = refusals[-1]
        times = f" ({_plural(len(refusals), 'refusal')})" if len(refusals) > 1 else ""
        if name in short:
            d = next(d for d in result.deployments if d.name == name)
            out.append(
                f"{name} was still short at the end, {d.placed} of {d.desired} placed"
                f"{times}: {refusal_text(last)}."
            )
            continue
        placed_after = time_to_place(result.series, name)
        after = f" after {format_duration(placed_after)}" if placed_after else ""
        out.append(f"{name} waited{times}: {refusal_text(last)}; it was placed{after}.")
    if len(names) > MAX_NAMED:
        out.append(f"{_plural(len(names) - MAX_NAMED, 'more deployment')} refused (see Refusals).")
    return out


def checks_text(result: RunResult) -> str:
    n, failures = result.checks_run, result.failures
    if not n:
        return "The scenario has no checks."
    if not failures:
        return f"All {_plural(n, 'check')} hold."
    paths = sorted({f.path for f in failures})
    first = failures[0]
    return (
        f"{len(paths)} of {_plural(n, 'check')} fail; the first at "
        f"{format_duration(first.at_s)}: {first.what}: expected {first.expected}, got "
        f"{first.got}."
    )


def run_headline(result: RunResult) -> list[str]:
    """The headline of one run."""
    return [outcome(result), *waits(result), checks_text(result)]


def _is_written_for(result: RunResult) -> bool:
    return result.accounting is result.scenario.controller.accounting


def failure_kinds(result: RunResult) -> str:
    """The failures of a run counted by what they check: "4 placements, 1 running pods"."""
    kinds = Counter(
        f.what.split(" of ")[0].split(" in ")[0].split(" (")[0] for f in result.failures
    )
    return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def expected_misses(results: Sequence[RunResult], names: Sequence[str]) -> list[str]:
    """A sentence per run whose accounting the scenario was not written for and that misses
    checks: that is the difference the comparison shows, not a fault of the run."""
    out = []
    written = results[0].scenario.controller.accounting.value
    for r, name in zip(results, names, strict=True):
        if _is_written_for(r) or not r.failures:
            continue
        paths = len({f.path for f in r.failures})
        out.append(
            f"{name} misses {paths} of {_plural(r.checks_run, 'check')} written for {written} "
            f"accounting, as expected ({_plural(len(r.failures), 'failed expectation')}: "
            f"{failure_kinds(r)})."
        )
    return out


def differences(results: Sequence[RunResult], names: Sequence[str]) -> list[str]:
    """Why the runs end differently: each deployment short at the end of one run and whole at
    the end of another, with the reason and numbers of its last refusal in the short run."""
    short = [{d.name: d for d in r.deployments if d.placed < d.desired} for r in results]
    out: list[str] = []
    for result, name, mine in zip(results, names, short, strict=True):
        # Deployments short for the same reason with the same numbers are one sentence.
        by_reason: dict[tuple[str, str], list[str]] = {}
        for dep in sorted(mine):
            if all(dep in other for other in short):
                continue
            d = mine[dep]
            refused = [r for r in result.refusals if r.deployment == dep]
            why = f": {refusal_text(refused[-1])}" if refused else ""
            by_reason.setdefault((f"{d.placed} of {d.desired} placed", why), []).append(dep)
        for (counts, why), deps in list(by_reason.items())[:MAX_NAMED]:
            who = deps[0] if len(deps) == 1 else ", ".join(deps[:-1]) + " and " + deps[-1]
            verb = "is" if len(deps) == 1 else "are"
            each = "" if len(deps) == 1 else " each"
            out.append(f"Why: under {name}, {who} {verb} short at the end ({counts}{each}){why}.")
        if len(by_reason) > MAX_NAMED:
            more = len(by_reason) - MAX_NAMED
            out.append(f"Under {name}, {_plural(more, 'more reason')} for deployments short.")
    return out


def comparison_headline(results: Sequence[RunResult]) -> list[str]:
    """The headline of a comparison of runs of one scenario."""
    names = run_names(results)
    out = [f"{name}: {outcome(r)}" for r, name in zip(results, names, strict=True)]
    out += differences(results, names)
    out += expected_misses(results, names)
    for r, name in zip(results, names, strict=True):
        if _is_written_for(r):
            out.append(f"{name}: {checks_text(r)}")
    return out
