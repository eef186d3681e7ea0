"""Evaluating a scenario's checks against one read of the fleet (`FleetState`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from gpufleet.sim.run.results import CheckFailure
from gpufleet.sim.run.state import FleetState, observed_histogram
from gpufleet.sim.scenario.model import Check, CheckMode, HubVsActual

#: Records one way a check does not hold: what, expected, got.
Fail = Callable[[str, object, object], None]


def evaluate(check: Check, state: FleetState, at_s: float | None = None) -> list[CheckFailure]:
    """Every way `check`'s expectations do not hold in `state` (read at `at_s`, by default
    the check's own time)."""
    out: list[CheckFailure] = []
    when = check.at_s if at_s is None else at_s

    def fail(what: str, expected: object, got: object) -> None:
        out.append(CheckFailure(when, check.path, what, expected, got))

    for evaluator in _EVALUATORS:
        evaluator(check, state, fail)
    return out


def _placements(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want in sorted(check.placements.items()):
        got_clusters = dict(state.replicas.get(dep, Counter()))
        got = sum(got_clusters.values())
        if want.count is not None and got != want.count:
            fail(f"placements of {dep}", want.count, f"{got} {_clusters_text(got_clusters)}")
        if want.clusters is not None and got_clusters != dict(want.clusters):
            fail(f"placements of {dep} by cluster", dict(want.clusters), got_clusters)


def _pending(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_n in sorted((check.pending or {}).items()):
        if dep == "":
            got_n = sum(state.pending(d) for d in state.deployments)
            label = "pending replicas (fleet)"
        else:
            got_n, label = state.pending(dep), f"pending replicas of {dep}"
        if got_n != want_n:
            fail(label, want_n, got_n)


def _pods_running(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_n in sorted((check.pods_running or {}).items()):
        got_n = sum(state.running.values()) if dep == "" else state.running.get(dep, 0)
        if got_n != want_n:
            fail("running pods" + (f" of {dep}" if dep else " (fleet)"), want_n, got_n)


def _gpus(check: Check, state: FleetState, fail: Fail) -> None:
    for (c, p), want_n in sorted(check.pools.free_gpus.items()):
        truth = state.truth(c)[p]
        got_n = truth.total - truth.allocated
        if got_n != want_n:
            fail(f"free GPUs in {c}/{p} (actual)", want_n, got_n)
    for (c, p), want_n in sorted(check.pools.allocated_gpus.items()):
        got_n = state.truth(c)[p].allocated
        if got_n != want_n:
            fail(f"allocated GPUs in {c}/{p} (actual)", want_n, got_n)
    for (c, p), want_n in sorted(check.pools.observed_free_gpus.items()):
        hist = observed_histogram(state.fleet.hub, c, p)
        got_obs = None if hist is None else sum(k * v for k, v in hist.items())
        if got_obs != want_n:
            fail(f"free GPUs in {c}/{p} (agent-observed)", want_n, got_obs)


def _pools(check: Check, state: FleetState, fail: Fail) -> None:
    for (c, p), want_h in sorted(check.pools.histogram.items()):
        got_h = observed_histogram(state.fleet.hub, c, p)
        if got_h != dict(want_h):
            fail(f"observed histogram of {c}/{p} {{free: nodes}}", dict(want_h), got_h)
    for (c, p), want_n in sorted(check.pools.nodes.items()):
        got_n = state.truth(c)[p].nodes
        if got_n != want_n:
            fail(f"nodes in {c}/{p}", want_n, got_n)
    for (c, p), want_s in sorted(check.pools.pool_state.items()):
        got_s = state.pool_state(c, p)
        if got_s != want_s:
            fail(f"observation state of {c}/{p}", want_s, got_s)


def _conditions(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_c in sorted(check.conditions.items()):
        got_c = state.condition(dep, want_c.type)
        if got_c is None:
            fail(f"{want_c.type} of {dep}", _condition_text(want_c), "no such condition")
            continue
        is_ok = (
            (want_c.status is None or got_c.get("status") == want_c.status)
            and (want_c.reason is None or got_c.get("reason") == want_c.reason)
            and (want_c.message is None or want_c.message in str(got_c.get("message", "")))
        )
        if not is_ok:
            got_text = f"{got_c.get('status')}/{got_c.get('reason')}: {got_c.get('message', '')}"
            fail(f"{want_c.type} of {dep}", _condition_text(want_c), got_text)


def _pods(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want in sorted(check.pods.items()):
        got = state.pod_states.get(dep, Counter())
        for name in ("running", "pending", "unschedulable"):
            want_n = getattr(want, name)
            if want_n is not None and got[name] != want_n:
                fail(f"{name} pods of {dep}", want_n, got[name])


def _pods_scheduled(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want in sorted(check.pods_scheduled.items()):
        found = state.replica_conditions(dep, "ModelPodsScheduled")
        matching = sum(
            1
            for c in found
            if c is not None
            and (want.status is None or c.get("status") == want.status)
            and (want.reason is None or c.get("reason") == want.reason)
        )
        text = _condition_text(want)
        if want.count is None and (not found or matching != len(found)):
            got = Counter(
                "none" if c is None else f"{c.get('status')}/{c.get('reason')}" for c in found
            )
            fail(f"ModelPodsScheduled of every replica of {dep}", text, dict(got) or "no replicas")
        elif want.count is not None and matching != want.count:
            fail(f"replicas of {dep} with ModelPodsScheduled {text}", want.count, matching)


def _ready_replicas(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_n in sorted(check.ready_replicas.items()):
        got_n = state.ready_replicas(dep)
        if got_n != want_n:
            fail(f"replicas.ready of {dep}", want_n, got_n)


def _updated_replicas(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_n in sorted(check.updated_replicas.items()):
        got_n = state.updated_replicas(dep)
        if got_n != want_n:
            fail(f"updatedReplicas of {dep}", want_n, got_n)


def _min_pods_running(check: Check, state: FleetState, fail: Fail) -> None:
    for dep, want_n in sorted(check.min_pods_running.items()):
        got_n = state.running.get(dep, 0)
        if got_n < want_n:
            fail(f"running pods of {dep} (at least)", f">= {want_n}", got_n)


def _hub_free_gpus(check: Check, state: FleetState, fail: Fail) -> None:
    for (c, p), want in sorted(check.pools.hub_free_gpus.items()):
        got = state.hub_free(c, p)
        truth = state.truth(c)[p]
        actual = truth.total - truth.allocated
        what = f"free GPUs in {c}/{p} (hub's accounting)"
        if isinstance(want, int):
            if got != want:
                fail(what, want, got)
        elif want is HubVsActual.EQUAL and got != actual:
            fail(what, f"the actual {actual}", got)
        elif want is HubVsActual.AT_MOST and (got is None or got > actual):
            fail(what, f"at most the actual {actual}", got)


#: In the order failures are reported.
_EVALUATORS: Final[tuple[Callable[[Check, FleetState, Fail], None], ...]] = (
    _placements,
    _pending,
    _pods_running,
    _gpus,
    _pools,
    _conditions,
    _pods,
    _pods_scheduled,
    _ready_replicas,
    _updated_replicas,
    _min_pods_running,
    _hub_free_gpus,
)


class CheckRunner:
    """Evaluates a run's checks at the instants the run stops at, and says when each is done:
    an `at` check at its instant; an `always` check at every instant of its window until it
    is broken (reported once, where first broken); a `within` check at every instant after
    its start until it holds (reported at the window's end if it never did)."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)
        self._done: set[int] = set()

    def instants(self) -> set[float]:
        return {at for check in self.checks for at in check.instants()}

    def at(self, at_s: float, state: FleetState) -> list[CheckFailure]:
        out: list[CheckFailure] = []
        for i, check in enumerate(self.checks):
            if i in self._done or not check.covers(at_s):
                continue
            found = evaluate(check, state, at_s)
            if check.mode is CheckMode.AT:
                out.extend(found)
                self._done.add(i)
            elif check.mode is CheckMode.ALWAYS:
                if found:
                    out.extend(_in_window(f, check, "first broken here") for f in found)
                if found or at_s >= check.until_s:
                    self._done.add(i)
            elif not found:
                self._done.add(i)  # `within`: it held
            elif at_s >= check.until_s:
                out.extend(_in_window(f, check, "never held; as last seen") for f in found)
                self._done.add(i)
        return out


def _in_window(failure: CheckFailure, check: Check, note: str) -> CheckFailure:
    what = f"{failure.what} ({check.window()}: {note})"
    return CheckFailure(failure.at_s, failure.path, what, failure.expected, failure.got)


def _clusters_text(clusters: Mapping[str, int]) -> str:
    if not clusters:
        return "(none)"
    return "(" + ", ".join(f"{c}: {n}" for c, n in sorted(clusters.items())) + ")"


def _condition_text(want: Any) -> str:
    parts = [
        f"status={want.status}" if want.status else "",
        f"reason={want.reason}" if want.reason else "",
        f"message contains {want.message!r}" if getattr(want, "message", None) else "",
    ]
    return " ".join(p for p in parts if p) or "present"
