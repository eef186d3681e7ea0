"""How large a scenario's run is, estimated before it runs, and the bounds it must keep.

A scenario's cost is the size of its world times the number of steps it is stepped: every
controller step reads every deployment, replica and pool; every cluster tick and agent report
reads that cluster's nodes and pods. `estimate` counts these from the parsed scenario (nothing
runs) and `check` refuses, naming the field that makes it large:

| bound | limit | field named |
|---|---|---|
| nodes in the fleet (an autoscaled pool at its maximum) | `MAX_NODES` 5,000 | the largest pool's `nodeCount`/`maxNodeCount` |
| replicas asked for (every manifest, apply and scale) | `MAX_REPLICAS` 20,000 | the largest deployment's `spec.replicas` (or the scale action) |
| timeline actions | `MAX_ACTIONS` 10,000 | `timeline` |
| work: Σ steps x objects each step reads | `MAX_WORK` 10,000,000 | `end` |

Work counts a node, a pool as 1 and a deployment or a replica (its pods and claims) as
`REPLICA_WEIGHT` (4); every apply and scale is counted as asked, so it is an upper bound. The
bounds are set from measurements (docs/scenarios.md, "Size bounds"): a scenario at `MAX_WORK`
runs in about 45 s and in a few hundred MB on one core. `MAX_STEPS` and
`MAX_SAMPLES` (scenario_model) bound the step and sample counts alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.sim.scenario.fields import Problems
from gpufleet.sim.scenario.model import Action, ActionKind, ControllerSettings

MAX_NODES: Final = 5_000
MAX_REPLICAS: Final = 20_000
MAX_ACTIONS: Final = 10_000
MAX_WORK: Final = 10_000_000
#: A replica (its pods, claims and placement) costs about four times a node per step (measured).
REPLICA_WEIGHT: Final = 4


@dataclass(frozen=True, slots=True)
class SizeEstimate:
    """What a run reads, counted before it runs; `work` is Σ steps x objects read per step."""

    nodes: int
    largest_pool: str  # the field of the pool with the most nodes
    replicas: int
    largest_deployment: str  # the field of the deployment asking for the most replicas
    actions: int
    work: float


def _replicas(body: Mapping[str, Any]) -> int:
    spec = body.get("spec")
    value = spec.get("replicas") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def estimate(
    end_s: float,
    fleet: FleetSpec,
    controller: ControllerSettings,
    manifests: Sequence[Mapping[str, Any]],
    timeline: Sequence[Action],
) -> SizeEstimate:
    """The size of the run the scenario describes (see the module's table)."""
    nodes, largest_pool, most = 0, "fleet.clusters", -1
    pools = 0
    cluster_nodes = []
    for i, cluster in enumerate(fleet.clusters):
        count = 0
        for j, pool in enumerate(cluster.pools):
            size = max(pool.node_count, pool.max_node_count or 0)
            count += size
            pools += 1
            if size > most:
                key = (
                    "maxNodeCount" if (pool.max_node_count or 0) > pool.node_count else "nodeCount"
                )
                most, largest_pool = size, f"fleet.clusters[{i}].pools[{j}].{key}"
        cluster_nodes.append(count)
        nodes += count
    nodes += sum(1 for a in timeline if a.kind is ActionKind.ADD_NODE)
    asked = {f"manifests[{i}].spec.replicas": _replicas(m) for i, m in enumerate(manifests)}
    for action in timeline:
        if action.kind is ActionKind.APPLY and action.manifest is not None:
            asked[f"{action.path}.manifest.spec.replicas"] = _replicas(action.manifest)
        elif action.kind is ActionKind.SCALE:
            asked[f"{action.path}.replicas"] = action.replicas
    replicas = sum(asked.values())
    largest_deployment = max(asked, key=asked.__getitem__) if asked else "manifests"
    deployments = len(asked)
    work = (end_s / controller.interval_s) * (REPLICA_WEIGHT * (deployments + replicas) + pools)
    share = REPLICA_WEIGHT * replicas / max(1, len(fleet.clusters))
    for cluster, count in zip(fleet.clusters, cluster_nodes, strict=True):
        steps = end_s / cluster.behaviour.tick_s + end_s / cluster.behaviour.report_interval_s
        work += steps * (count + len(cluster.pools) + share)
    return SizeEstimate(nodes, largest_pool, replicas, largest_deployment, len(timeline), work)


def check(size: SizeEstimate, problems: Problems) -> None:
    """Add a problem, naming the field that makes the scenario large, for each broken bound."""
    if size.nodes > MAX_NODES:
        problems.add(
            size.largest_pool,
            f"the fleet has {size.nodes:,} nodes (this pool the most), more than {MAX_NODES:,}",
        )
    if size.replicas > MAX_REPLICAS:
        problems.add(
            size.largest_deployment,
            f"the scenario asks for {size.replicas:,} replicas (this deployment the most), "
            f"more than {MAX_REPLICAS:,}",
        )
    if size.actions > MAX_ACTIONS:
        problems.add("timeline", f"{size.actions:,} actions, more than {MAX_ACTIONS:,}")
    if size.work > MAX_WORK:
        problems.add(
            "end",
            f"the run would read about {math.ceil(size.work):,} objects (steps x the nodes, "
            f"pods, pools and deployments each reads), more than {MAX_WORK:,}: shorten end, "
            "lengthen the periods or shrink the fleet",
        )
