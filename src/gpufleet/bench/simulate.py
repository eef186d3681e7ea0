"""B4, simulator speed, and B5, misprediction, on the simulated fleet (`gpufleet.sim`).

**B4.** The fleet of bench/bench_simulate.py (the scenario runner's benchmark): C clusters x 4
pools (L4, A10G and T4 of 4 GPUs, H100 of 8) x N nodes, agents reporting every 10 s, the real
controller every 10 s, no autoscaling; deployments of 1-8 GPUs (1-4 replicas, a CEL selector on
the product name) arrive uniformly over the first 80% of the window and leave after 5-50% of
it. The whole run (`run_scenario`) executes in a child process, so its wall time carries no
tracemalloc overhead and its peak RSS (VmHWM) is its own; tracemalloc is not used. The target
is a 24-hour day with 1,000 deployments on 10 x 4 x 50 nodes in under a minute, and the runner
runs that whole day (`--quick`: 10 simulated minutes of a small fleet).

**B5.** One cluster with one fixed pool of 8-GPU nodes; single-replica deployments of 1, 2, 4
and 8 GPUs (30/30/25/15%) arrive in bursts (a seeded number of 2-8 deployments every 60 s, so
several are placed against one report; the agent reports every 10 s) and leave after a seeded
exponential lifetime, for an offered load of 1.3x the pool's GPUs. The controller predicts
Spread or Pack (`node_choice`) and the emulated kube-scheduler chooses Spread or Pack, giving a
2x2 table. Every 5 simulated seconds
we list the cluster's pods: a placed replica counts as *stuck* when one of its pods is still
unbound 60 s after it was created. A stuck pod is split by cause at the moment it is found:
*fragmented* when its pool has enough free GPUs in total but no node has enough (the cluster's
choice of nodes differs from the one predicted, or its creation order differs from the fit's
largest-first order), *overcommitted* when the pool lacks the GPUs altogether (the ledger
admitted more than was free, e.g. a report that had not yet seen a release). The matched
diagonal (Spread/Spread, Pack/Pack) is the control: what remains there is not misprediction.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpufleet.bench.common import Section, Table, count, percent, seconds
from gpufleet.core import labels
from gpufleet.core.model import NodeChoice, Steering
from gpufleet.sim.emulated.cluster import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.emulated.engine import EPOCH
from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.sim.run.runner import build_fleet, perform, pool_truth, run_scenario
from gpufleet.sim.scenario.load import Accounting, Action, ActionKind, ControllerSettings, Scenario
from gpufleet.store.port import POD, Obj

POOLS = (("l4", 4), ("a10g", 4), ("h100", 8), ("t4", 4))
NAMESPACE = "ml"


def deployment(name: str, gpus: int, replicas: int, product: str | None) -> Obj:
    """A single-engine Standalone ModelDeployment manifest of `gpus` GPUs per pod."""
    cel = 'device.driver == "gpu.nvidia.com"'
    if product is not None:
        cel = f'device.attributes["gpu.nvidia.com"].productName == "{product}"'
    request: dict[str, Any] = {"name": "gpu", "count": gpus, "selectors": [{"cel": cel}]}
    member = {
        "role": "Standalone",
        "nodeSelector": {"devices": [request]},
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
    }
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"engines": [{"name": "engine", "members": [member]}]}},
        },
    }


def _apply(at_s: float, name: str, body: Obj) -> Action:
    return Action(
        float(int(at_s)), ActionKind.APPLY, name, manifest=body, deployment=f"{NAMESPACE}/{name}"
    )


def _delete(at_s: float, name: str) -> Action:
    return Action(float(int(at_s)), ActionKind.DELETE, f"{name}-", deployment=f"{NAMESPACE}/{name}")


# --- B4 -----------------------------------------------------------------------------------


def fleet_scenario(
    clusters: int, nodes: int, window_s: float, deployments: int, seed: int
) -> Scenario:
    """bench/bench_simulate.py's fleet and arrivals over `window_s` simulated seconds."""
    rng = random.Random(seed)
    behaviour = ClusterBehaviour(report_interval_s=10.0, is_autoscaling=False)
    specs = []
    for c in range(clusters):
        pools = tuple(
            PoolSpec(
                name=name,
                devices=(
                    DeviceSpec(count=gpus, attributes={"productName": {"string": name.upper()}}),
                ),
                node_count=nodes,
                class_name=f"{name}-{gpus}x",
            )
            for name, gpus in POOLS
        )
        specs.append(
            ClusterSpec(f"c{c:02d}", pools, behaviour, {"gpufleet.io/region": f"r{c % 3}"})
        )
    timeline: list[Action] = []
    for i in range(deployments):
        pool, per_node = POOLS[rng.randrange(len(POOLS))]
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= per_node])
        arrive = rng.uniform(0, window_s * 0.8)
        leave = arrive + rng.uniform(window_s * 0.05, window_s * 0.5)
        name = f"d{i:04d}"
        timeline.append(
            _apply(arrive, name, deployment(name, gpus, rng.randint(1, 4), pool.upper()))
        )
        if leave < window_s:
            timeline.append(_delete(leave, name))
    timeline.sort(key=lambda a: a.at_s)
    return Scenario(
        name="bench-fleet",
        description="fleet-scale simulator benchmark",
        seed=seed,
        end_s=window_s,
        fleet=FleetSpec(tuple(specs), controller_interval_s=10.0),
        controller=ControllerSettings(interval_s=10.0),
        manifests=(),
        timeline=tuple(timeline),
        checks=(),
        sample_interval_s=max(60.0, window_s / 24),
    )


@dataclass(frozen=True, slots=True)
class SimSpeed:
    clusters: int
    nodes: int
    window_s: float
    deployments: int
    wall_s: float
    events: int
    controller_steps: int
    replicas_placed: int
    max_rss_mib: float

    @property
    def rate(self) -> float:
        return self.window_s / self.wall_s if self.wall_s else 0.0


def measure_speed(clusters: int, nodes: int, window_s: float, deployments: int) -> SimSpeed:
    """Run the B4 scenario in this process (what the child process calls)."""
    import resource

    scenario = fleet_scenario(clusters, nodes, window_s, deployments, seed=1)
    started = time.perf_counter()
    result = run_scenario(scenario, Accounting.FREE_GPU)
    wall = time.perf_counter() - started
    return SimSpeed(
        clusters,
        nodes,
        window_s,
        deployments,
        wall,
        result.events_run,
        result.controller_steps,
        sum(d.placed for d in result.deployments),
        _peak_rss_mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    )


def _peak_rss_mib(fallback: float) -> float:
    """This process's own RSS high-water mark: VmHWM (Linux resets it at exec, while
    ru_maxrss carries the parent's high-water mark across fork and exec)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return fallback


def measure_speed_isolated(
    clusters: int, nodes: int, window_s: float, deployments: int, timeout_s: float = 600
) -> SimSpeed:
    """`measure_speed` in a child Python process (clean wall time and max RSS)."""
    args = [str(clusters), str(nodes), str(window_s), str(deployments)]
    out = subprocess.run(
        [sys.executable, "-m", "gpufleet.bench.simulate", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return SimSpeed(**data)


#: B4's full run: the issue's fleet and day (clusters, nodes per pool, seconds, deployments).
DAY = (10, 50, 86_400.0, 1000)


def run_speed(quick: bool = False) -> Section:
    grid = [(2, 4, 600.0, 4)] if quick else [DAY]
    rows = []
    numbers: dict[str, float] = {}
    for clusters, nodes, window, n in grid:
        s = measure_speed_isolated(clusters, nodes, window, n, timeout_s=3600)
        rows.append(
            (
                f"{clusters} x 4 x {nodes}",
                count(clusters * 4 * nodes),
                f"{window / 3600:,.4g} h",
                count(n),
                count(s.replicas_placed),
                count(s.events),
                count(s.controller_steps),
                seconds(s.wall_s),
                f"{s.rate:,.0f}x",
                f"{s.max_rss_mib:,.0f}",
            )
        )
        fleet = f"{clusters}x4x{nodes}"
        numbers[f"{fleet}/rate"] = s.rate
        if window == 86_400.0:
            numbers[f"{fleet}/{n}/day_s"] = s.wall_s
    table = Table(
        "B4: simulator speed",
        (
            "fleet",
            "nodes",
            "simulated",
            "deploys",
            "replicas at end",
            "events",
            "controller steps",
            "wall s",
            "sim/wall",
            "peak RSS MiB",
        ),
        tuple(rows),
    )
    return Section(
        key="B4",
        title="B4. Simulator speed",
        intro=__doc__.split("**B5.**")[0] if __doc__ else "",
        tables=(table,),
        notes=(
            "The whole day is run, not extrapolated: `wall s` is what `gpufleet simulate` "
            "takes for it, in a child process. `bench/bench_simulate.py` runs the same "
            "scenario in this process with a table of what happened, and "
            "`bench/profile_window.py` profiles a window of it after a warm-up.",
        ),
        numbers=numbers,
    )


# --- B5 -----------------------------------------------------------------------------------

SIZES = ((1, 0.3), (2, 0.3), (4, 0.25), (8, 0.15))
STUCK_AFTER_S = 60.0
OFFERED_LOAD = 1.3
POLL_S = 5.0


def burst_scenario(
    predict: NodeChoice,
    cluster_choice: NodeChoice,
    nodes: int,
    window_s: float,
    seed: int,
    steering: Steering = Steering.OFF,
) -> tuple[Scenario, dict[str, int]]:
    """The B5 scenario and each deployment's GPUs per pod."""
    rng = random.Random(seed)
    del predict  # the prediction is the controller's setting, applied by the caller
    behaviour = ClusterBehaviour(
        node_choice=cluster_choice,
        steering=steering,
        report_interval_s=10.0,
        is_autoscaling=False,
    )
    pool = PoolSpec(name="h100", devices=(DeviceSpec(count=8),), node_count=nodes)
    gpus_of: dict[str, int] = {}
    timeline: list[Action] = []
    mean_gpus = sum(g * w for g, w in SIZES)
    burst_every = 60.0
    mean_burst = 5.0
    # Little's law: live GPUs = arrival rate x lifetime x mean GPUs = OFFERED_LOAD x capacity.
    lifetime = OFFERED_LOAD * nodes * 8 / (mean_burst / burst_every * mean_gpus)
    at = 10.0
    i = 0
    while at < window_s - 2 * STUCK_AFTER_S:
        for _ in range(rng.randint(2, 8)):
            gpus = rng.choices([g for g, _ in SIZES], weights=[w for _, w in SIZES])[0]
            name = f"d{i:04d}"
            gpus_of[name] = gpus
            timeline.append(_apply(at, name, deployment(name, gpus, 1, None)))
            leave = at + rng.expovariate(1.0 / lifetime)
            if leave < window_s:
                timeline.append(_delete(leave, name))
            i += 1
        at += burst_every
    timeline.sort(key=lambda a: a.at_s)
    scenario = Scenario(
        name="bench-mispredict",
        description="misprediction benchmark",
        seed=seed,
        end_s=window_s,
        fleet=FleetSpec((ClusterSpec("c0", (pool,), behaviour),), controller_interval_s=5.0),
        controller=ControllerSettings(interval_s=5.0),
        manifests=(),
        timeline=tuple(timeline),
        checks=(),
    )
    return scenario, gpus_of


@dataclass(frozen=True, slots=True)
class Misprediction:
    predict: NodeChoice
    cluster: NodeChoice
    steering: Steering
    replicas: int
    stuck: int
    fragmented: int
    overcommitted: int
    wall_s: float

    @property
    def share(self) -> float:
        return self.stuck / self.replicas if self.replicas else 0.0


def _created(pod: Obj) -> datetime:
    return datetime.fromisoformat(str(pod["metadata"]["creationTimestamp"]).replace("Z", "+00:00"))


def misprediction(
    predict: NodeChoice,
    cluster_choice: NodeChoice,
    nodes: int,
    window_s: float,
    seed: int,
    steering: Steering = Steering.OFF,
) -> Misprediction:
    """One B5 cell; with steering on, the hub predicts Pack whatever `predict` says."""
    scenario, gpus_of = burst_scenario(predict, cluster_choice, nodes, window_s, seed, steering)
    started = time.perf_counter()
    fleet, hub_step = build_fleet(scenario, Accounting.FREE_GPU)
    controller = hub_step.controller
    assert controller is not None
    controller.config = _with_node_choice(controller.config, predict)
    actions: dict[float, list[Action]] = {}
    for a in scenario.timeline:
        actions.setdefault(a.at_s, []).append(a)
    times = sorted(set(actions) | {POLL_S * k for k in range(int(window_s // POLL_S) + 1)})
    cluster = fleet.clusters["c0"]
    replicas: set[str] = set()
    stuck: dict[str, str] = {}
    for at_s in times:
        fleet.run_until(EPOCH + timedelta(seconds=at_s))
        if at_s % POLL_S == 0:
            now = fleet.now
            truth = None
            for pod in cluster.store.list(POD):
                meta = pod["metadata"]
                replica = (meta.get("labels") or {}).get(labels.REPLICA)
                if not replica or meta.get("deletionTimestamp"):
                    continue
                replicas.add(replica)
                if replica in stuck or (pod.get("spec") or {}).get("nodeName"):
                    continue
                if (now - _created(pod)).total_seconds() <= STUCK_AFTER_S:
                    continue
                if truth is None:
                    truth = pool_truth(cluster)["h100"]
                need = gpus_of.get(replica.rsplit("-", 1)[0], 1)
                free = sum(f * n for f, n in truth.histogram.items())
                stuck[replica] = "fragmented" if free >= need else "overcommitted"
        for action in actions.get(at_s, []):
            perform(fleet, action)
    causes = list(stuck.values())
    return Misprediction(
        predict,
        cluster_choice,
        steering,
        len(replicas),
        len(stuck),
        causes.count("fragmented"),
        causes.count("overcommitted"),
        time.perf_counter() - started,
    )


def _with_node_choice(config: Any, predict: NodeChoice) -> Any:
    import dataclasses

    return dataclasses.replace(config, node_choice={"c0": predict})


def run_misprediction(quick: bool = False) -> Section:
    nodes, window, seeds = (4, 300.0, 1) if quick else (8, 1200.0, 2)
    rows = []
    numbers: dict[str, float] = {}
    cells = [
        (Steering.OFF, predict, choice)
        for predict in (NodeChoice.SPREAD, NodeChoice.PACK)
        for choice in (NodeChoice.SPREAD, NodeChoice.PACK)
    ] + [
        (steering, NodeChoice.PACK, choice)
        for steering in (Steering.PREFERRED, Steering.REQUIRED)
        for choice in (NodeChoice.SPREAD, NodeChoice.PACK)
    ]
    for steering, predict, choice in cells:
        runs = [
            misprediction(predict, choice, nodes, window, seed, steering) for seed in range(seeds)
        ]
        replicas = sum(r.replicas for r in runs)
        stuck = sum(r.stuck for r in runs)
        share = stuck / replicas if replicas else 0.0
        rows.append(
            (
                steering.value,
                predict.value,
                choice.value,
                count(replicas),
                count(stuck),
                percent(share),
                count(sum(r.fragmented for r in runs)),
                count(sum(r.overcommitted for r in runs)),
                seconds(sum(r.wall_s for r in runs)),
            )
        )
        cell = f"{predict.value}/{choice.value}"
        if steering is not Steering.OFF:
            cell = f"steering {steering.value}/{cell}"
        numbers[f"{cell}/share"] = share
        numbers[f"{cell}/replicas"] = replicas
    table = Table(
        f"B5: replicas Pending > {STUCK_AFTER_S:g} s ({seeds} seed(s) x {window:,.0f} s, "
        f"1 pool of {nodes} x 8-GPU nodes)",
        (
            "steering",
            "predicted",
            "cluster",
            "replicas",
            "stuck",
            "stuck share",
            "fragmented",
            "overcommitted",
            "wall s",
        ),
        tuple(rows),
    )
    return Section(
        key="B5",
        title="B5. Misprediction",
        intro="**B5.**" + __doc__.split("**B5.**")[1] if __doc__ else "",
        tables=(table,),
        numbers=numbers,
        notes=(
            "Wall time only (no peak memory): these runs are small (one cluster); see B4 for the "
            "simulator's memory.",
        ),
    )


def _main(argv: list[str]) -> None:
    clusters, nodes, window, deployments = argv
    s = measure_speed(int(clusters), int(nodes), float(window), int(deployments))
    print(
        json.dumps(
            {
                "clusters": s.clusters,
                "nodes": s.nodes,
                "window_s": s.window_s,
                "deployments": s.deployments,
                "wall_s": s.wall_s,
                "events": s.events,
                "controller_steps": s.controller_steps,
                "replicas_placed": s.replicas_placed,
                "max_rss_mib": s.max_rss_mib,
            }
        )
    )


if __name__ == "__main__":
    _main(sys.argv[1:])
