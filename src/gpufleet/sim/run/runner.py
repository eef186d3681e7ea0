"""Running a scenario: the simulated fleet, the real hub controller, the timeline, the checks,
and metrics over time.

`run_scenario(scenario, accounting=...)` builds a `Fleet` from the scenario with the real
`gpufleet.controller.loop.Controller` on its hub, applies the scenario's manifests at time 0,
and then walks simulated time. At each instant that matters (a timeline action, a check, a
metrics sample, the end) it first runs the fleet up to that instant (every emulated component,
agent and controller step due by then), then evaluates the checks of that instant, then takes
the sample, then applies the actions of that instant. So a check at the same time as an action
sees the state before the action.

Accounting modes:

- `free-gpu`: the controller reads the agents' observations (PoolObservation,
  ReplicaObservation) and owns each cluster's `Ready` condition (`manages_ready`).
- `whole-node`: the controller has no switch for it, so the mode is made at the edge: the
  controller reads the hub through `ObservationBlindStore`, a view in which observations do not
  exist. Every pool then has no observation and the core uses whole-node accounting (Modelplane
  HEAD). With no reports the controller would call every cluster not Ready, so in this mode the
  simulator plays the platform team and sets `Ready=True` (reason `PlatformReady`) itself, and
  the controller does not manage `Ready`. The agents still run: they materialize replicas and
  push observations, which the controller never sees.

The parts live beside this module: `hub_step` (the controller as the fleet calls it, refusals,
the whole-node view), `state` (reading the fleet), `checks` (evaluating checks), `actions`
(carrying out the timeline), `results` (what a run returns).
"""

from __future__ import annotations

import contextlib
import gc
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta

from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.loop import Controller
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.emulated.fleet import Fleet, FleetSpec
from gpufleet.sim.run.actions import ActionFailed, apply_deployment, perform
from gpufleet.sim.run.checks import CheckRunner, evaluate
from gpufleet.sim.run.hub_step import HubStep, ObservationBlindStore
from gpufleet.sim.run.invariants import InvariantWatch
from gpufleet.sim.run.results import (
    CheckFailure,
    DeploymentSummary,
    PoolSummary,
    Refusal,
    RunResult,
    Series,
)
from gpufleet.sim.run.samples import Samples
from gpufleet.sim.run.state import FleetState, KeptTruth, PoolTruth, observed_histogram, pool_truth
from gpufleet.sim.scenario.load import (
    Accounting,
    Action,
    Scenario,
)
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    Store,
)

__all__ = [
    "ActionFailed",
    "CheckFailure",
    "DeploymentSummary",
    "ObservationBlindStore",
    "PoolSummary",
    "PoolTruth",
    "Refusal",
    "RunResult",
    "Series",
    "apply_deployment",
    "build_fleet",
    "controller_config",
    "evaluate",
    "observed_histogram",
    "perform",
    "pool_truth",
    "run_scenario",
    "sample_interval",
    "timeline_runner",
]

#: About this many samples per run when the scenario does not set `sampleInterval`.
DEFAULT_SAMPLES = 240
GATEWAY_ADDRESS = "{cluster}.gateway.sim"

# --- the run ------------------------------------------------------------------------------


def controller_config(scenario: Scenario, accounting: Accounting) -> ControllerConfig:
    s = scenario.controller
    return ControllerConfig(
        stale_after_s=s.stale_after_s,
        expire_after_s=s.expire_after_s,
        stuck_after_s=s.stuck_after_s,
        manages_ready=accounting is Accounting.FREE_GPU,
        default_gateway_address=GATEWAY_ADDRESS,
        node_choice={c.name: c.behaviour.node_choice for c in scenario.fleet.clusters},
    )


def build_fleet(scenario: Scenario, accounting: Accounting) -> tuple[Fleet, HubStep]:
    spec = FleetSpec(
        scenario.fleet.clusters,
        controller_interval_s=scenario.controller.interval_s,
        agent=scenario.fleet.agent,
    )
    hub_step = HubStep(MemoryStore())
    fleet = Fleet(spec, controller=hub_step, seed=scenario.seed)
    hub_step.hub = fleet.hub
    view: Store = fleet.hub
    if accounting is Accounting.WHOLE_NODE:
        view = ObservationBlindStore(fleet.hub)
        for cluster in scenario.fleet.clusters:
            condition = {
                "type": "Ready",
                "status": "True",
                "reason": "PlatformReady",
                "message": "set by the simulator (whole-node accounting: no agent reports)",
                "lastTransitionTime": format_time(fleet.now),
            }
            fleet.hub.patch_status(
                INFERENCE_CLUSTER, cluster.name, None, {"conditions": [condition]}
            )
    hub_step.controller = Controller(
        view, controller_config(scenario, accounting), identity="gpufleet-controller-sim"
    )
    for manifest in scenario.manifests:
        apply_deployment(fleet.hub, manifest)
    return fleet, hub_step


def sample_interval(scenario: Scenario) -> float:
    if scenario.sample_interval_s > 0:
        return scenario.sample_interval_s
    step = max(1.0, scenario.end_s / DEFAULT_SAMPLES)
    return float(max(1, round(step)))


def _sample(series: Series, state: FleetState, at_s: float, names: Sequence[str]) -> None:
    series.times_s.append(at_s)
    for c in sorted(state.fleet.clusters):
        for p, truth in sorted(state.truth(c).items()):
            series.pool_allocated.setdefault((c, p), []).append(truth.allocated)
            series.pool_free.setdefault((c, p), []).append(truth.total - truth.allocated)
            series.pool_nodes.setdefault((c, p), []).append(truth.nodes)
    keys = list(names) + [k for k in sorted(state.deployments) if k not in names]
    for key in keys:
        for store, value in (
            (series.desired, state.desired(key)),
            (series.placed, state.placed(key)),
            (series.running, state.running.get(key, 0)),
        ):
            column = store.setdefault(key, [0] * (len(series.times_s) - 1))
            column.append(value)
    series.pending.append(sum(state.pending(k) for k in state.deployments))


def timeline_runner(fleet: Fleet, scenario: Scenario) -> Callable[[float], None]:
    """A function running `fleet` to a time (seconds after EPOCH), performing the actions of
    the scenario's timeline due on the way, in order: the run without checks or samples, for
    benchmarks and profiles that stop and look in between."""
    actions = sorted(scenario.timeline, key=lambda a: a.at_s)

    def run_to(until_s: float) -> None:
        while actions and actions[0].at_s <= until_s:
            action = actions.pop(0)
            fleet.run_until(EPOCH + timedelta(seconds=action.at_s))
            perform(fleet, action)
        fleet.run_until(EPOCH + timedelta(seconds=until_s))

    return run_to


#: The collector's thresholds while a scenario runs (CPython's default is (700, 10, 10)).
GC_THRESHOLDS = (50_000, 20, 100)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Collect garbage less often while a scenario runs, and restore the thresholds after.

    A fleet is millions of long-lived objects (every store's dicts), and CPython's
    generational collector walks them again and again as the run allocates: a quarter of a
    day's run went to it. The simulator makes few reference cycles, so collecting every
    50,000 allocations instead of every 700 costs little memory."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _run_scenario(
    scenario: Scenario,
    accounting: Accounting | str | None = None,
    *,
    progress: Callable[[float], None] | None = None,
    measure_memory: bool = False,
) -> RunResult:
    mode = Accounting(accounting) if accounting is not None else scenario.controller.accounting
    started = time.perf_counter()
    if measure_memory:
        tracemalloc.start()
    fleet, hub_step = build_fleet(scenario, mode)
    interval = sample_interval(scenario)
    sample_times = {
        min(scenario.end_s, i * interval) for i in range(int(scenario.end_s // interval) + 1)
    }
    sample_times.add(scenario.end_s)
    checks = CheckRunner(scenario.checks)
    instants = sorted({a.at_s for a in scenario.timeline} | checks.instants() | sample_times)
    actions: dict[float, list[Action]] = {}
    for a in scenario.timeline:
        actions.setdefault(a.at_s, []).append(a)
    invariants = InvariantWatch(fleet, scenario, is_observing=mode is Accounting.FREE_GPU)

    series = Series()
    samples = Samples()
    truths: dict[str, KeptTruth] = {}
    failures: list[CheckFailure] = []
    names = scenario.deployment_names()
    for at_s in instants:
        fleet.run_until(EPOCH + timedelta(seconds=at_s))
        state = FleetState(fleet, truths, hub_step.last_decision)
        failures.extend(checks.at(at_s, state))
        failures.extend(invariants.at(at_s, state))
        if at_s in sample_times:
            _sample(series, state, at_s, names)
            samples.take(fleet, at_s)
        for action in actions.get(at_s, []):
            hub_step.log.append((at_s, action.describe()))
            invariants.performed.append(action)
            try:
                perform(fleet, action)
            except ActionFailed as error:
                failures.append(
                    CheckFailure(at_s, action.path, action.describe(), "to succeed", str(error))
                )
        if progress is not None:
            progress(at_s)

    state = FleetState(fleet)
    deployments = _deployment_summaries(state, names)
    pools = _pool_summaries(fleet, state)
    peak = None
    if measure_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return RunResult(
        scenario=scenario,
        accounting=mode,
        checks_run=len(scenario.checks),
        failures=failures,
        refusals=hub_step.refusals,
        series=series,
        deployments=deployments,
        pools=pools,
        wall_s=time.perf_counter() - started,
        events_run=fleet.loop.events_run,
        controller_steps=hub_step.steps,
        controller_errors=hub_step.errors,
        log=hub_step.log,
        peak_memory_bytes=peak,
        samples=samples,
    )


def _deployment_summaries(state: FleetState, names: Sequence[str]) -> list[DeploymentSummary]:
    """Each deployment of the scenario that is still there, as the run ends."""
    return [
        DeploymentSummary(
            name=key,
            desired=state.desired(key),
            placed=state.placed(key),
            running=state.running.get(key, 0),
            clusters=dict(state.replicas.get(key, Counter())),
            condition_reason=str(
                (state.condition(key, "ReplicasScheduled") or {}).get("reason", "")
            ),
            condition_message=str(
                (state.condition(key, "ReplicasScheduled") or {}).get("message", "")
            ),
        )
        for key in names
        if key in state.deployments
    ]


def _pool_summaries(fleet: Fleet, state: FleetState) -> list[PoolSummary]:
    """Each pool's ground truth and the agent's last reported histogram, as the run ends."""
    pools = []
    for cluster_name in sorted(fleet.clusters):
        for pool_name, truth in sorted(state.truth(cluster_name).items()):
            pools.append(
                PoolSummary(
                    cluster=cluster_name,
                    pool=pool_name,
                    nodes=truth.nodes,
                    gpus_total=truth.total,
                    gpus_allocated=truth.allocated,
                    gpus_free=truth.total - truth.allocated,
                    histogram=truth.histogram,
                    observed_histogram=observed_histogram(fleet.hub, cluster_name, pool_name),
                )
            )
    return pools


def run_scenario(
    scenario: Scenario,
    accounting: Accounting | str | None = None,
    *,
    progress: Callable[[float], None] | None = None,
    measure_memory: bool = False,
) -> RunResult:
    """Run `scenario` to its end; `accounting` overrides the scenario's controller setting."""
    with _fewer_collections():
        return _run_scenario(scenario, accounting, progress=progress, measure_memory=measure_memory)
