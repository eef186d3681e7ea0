"""B2's steered cluster: the agent's choice of nodes and kube-scheduler's default profile.

For B2's *free-GPU steered* rows the cluster's scheduler is not assumed to bind where the fit
says. Each placed replica goes through what a steered cluster does:

1. **The agent** (`gpufleet.agent.steer.Steerer`, the real code) chooses each claiming pod's
   node by best fit from the exact per-node free GPUs, and steers the member's pods to the set
   chosen (preferred node affinity, weight 100, or required).
2. **kube-scheduler** (`gpufleet.sim.emulated.kube_scoring`, the simulator's emulation of the default
   profile) binds the pods one by one in creation order (engines in order, copies in order, a
   gang's leader then workers): a node must have the pod's GPUs free, match a required
   steering term, and (a claiming gang pod) hold no claiming pod of the same copy; among
   those, the highest total of TaintToleration, NodeAffinity (the steering), PodTopologySpread
   (system defaults, over the pods of the same engine, or of the same gang copy),
   NodeResourcesFit LeastAllocated and BalancedAllocation wins, ties by a hash of the names.
   Pods request no CPU or memory (the non-zero defaults count), as the materializer writes them.

A pod that no node takes leaves its replica unbound: its bound pods are released and the
replica counts as refused (`stranded`), which errs against steering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent.gates import pinned_spec
from gpufleet.agent.steer import Steerer, steer_template
from gpufleet.core.decision import Placement
from gpufleet.core.model import Role, Steering
from gpufleet.sim.emulated import kube_scoring

#: Every node's allocatable CPU and memory (a GPU node's usual size; the same on every node).
NODE_STATUS = {"allocatable": {"cpu": "96", "memory": "1024Gi"}}


@dataclass(frozen=True, slots=True)
class _PodSpec:
    name: str
    owner: str
    gpus: int
    #: The gang copy it belongs to ("" for a Standalone pod).
    gang: str
    nodes: tuple[str, ...]


@dataclass(slots=True)
class SteeredCluster:
    """Ground truth of one pool of `nodes` nodes of `gpus_per_node` GPUs, bound as a steered
    cluster binds (see the module docstring)."""

    nodes: int
    gpus_per_node: int
    mode: Steering = Steering.PREFERRED
    pool: str = "gpus"
    driver: str = "gpu.nvidia.com"
    free: list[int] = field(default_factory=list)
    node_objs: list[dict[str, Any]] = field(default_factory=list)
    pods_on: list[list[dict[str, Any]]] = field(default_factory=list)
    #: Replicas with a pod that no node took.
    stranded: int = 0

    def __post_init__(self) -> None:
        self.free = [self.gpus_per_node] * self.nodes
        self.node_objs = [
            {
                "metadata": {"name": f"n{i}", "labels": {kube_scoring.HOSTNAME_KEY: f"n{i}"}},
                "spec": {},
                "status": NODE_STATUS,
            }
            for i in range(self.nodes)
        ]
        self.pods_on = [[] for _ in range(self.nodes)]

    def free_devices(self, pool: str) -> Mapping[str, Mapping[Any, int]]:
        if pool != self.pool:
            return {}
        return {f"n{i}": {self.driver: f} for i, f in enumerate(self.free)}

    def bind(self, placement: Placement, index: int) -> list[tuple[int, int]] | None:
        """Steer and bind the replica's claiming pods: (node, GPUs) per pod, or None (nothing
        bound) when one pod found no node."""
        steerer = Steerer(self.mode, self.free_devices, lambda _: None)
        choice = steerer.choose(_replica_dict(placement, self.driver))
        bound: list[tuple[int, int, dict[str, Any]]] = []
        for spec in _pods(placement, index, choice, self.mode is Steering.GATED):
            pod = _pod_obj(spec, self.mode)
            gang_nodes = {n for n, _, p in bound if spec.gang and p["gang"] == spec.gang}
            node = self._schedule(pod, spec.gpus, gang_nodes)
            if node is None:
                for n, gpus, p in bound:
                    self.free[n] += gpus
                    self.pods_on[n].remove(p["obj"])
                self.stranded += 1
                return None
            self.free[node] -= spec.gpus
            self.pods_on[node].append(pod)
            bound.append((node, spec.gpus, {"gang": spec.gang, "obj": pod}))
        return [(n, g) for n, g, _ in bound]

    def release(self, pods: Sequence[tuple[int, int]], index: int) -> None:
        prefix = f"r{index}-"
        for node, gpus in pods:
            self.free[node] += gpus
        for node, _ in pods:
            self.pods_on[node] = [
                p for p in self.pods_on[node] if not p["metadata"]["name"].startswith(prefix)
            ]

    def _schedule(self, pod: dict[str, Any], gpus: int, avoid: set[int]) -> int | None:
        spec = pod["spec"]
        feasible = [
            i
            for i in range(self.nodes)
            if self.free[i] >= gpus
            and i not in avoid
            and kube_scoring.required_affinity_matches(self.node_objs[i], spec)
        ]
        if len(feasible) <= 1:
            return feasible[0] if feasible else None
        key = kube_scoring.spread_key(pod)
        nodes = [self.node_objs[i] for i in feasible]
        loads = [kube_scoring.node_load(self.pods_on[i], key) for i in feasible]
        totals = kube_scoring.total_scores(pod, nodes, loads, {})
        best = kube_scoring.pick_best(pod["metadata"]["name"], [f"n{i}" for i in feasible], totals)
        return int(best[1:])


def _replica_dict(placement: Placement, driver: str) -> dict[str, Any]:
    """The ModelReplica the controller would write for `placement` (what the agent reads)."""
    engines = []
    for e in placement.engines:
        members = []
        for m in e.members:
            member: dict[str, Any] = {"role": str(m.role), "nodePoolName": str(m.pool)}
            if m.role is Role.WORKER:
                member["worker"] = {"nodes": m.worker_nodes}
            if m.requests:
                member["deviceRequests"] = [
                    {
                        "name": r.name,
                        "deviceClassName": r.device_class_name,
                        "driver": str(r.driver) or driver,
                        "count": r.count,
                    }
                    for r in m.requests
                ]
            members.append(member)
        engines.append({"name": e.name, "copies": e.copies, "members": members})
    return {
        "metadata": {"namespace": "bench", "name": placement.name},
        "spec": {"engines": engines},
    }


def _pods(
    placement: Placement,
    index: int,
    choice: Mapping[tuple[str, str], tuple[str, ...]],
    is_gated: bool = False,
) -> list[_PodSpec]:
    """The replica's claiming pods in creation order."""
    out: list[_PodSpec] = []
    for e in placement.engines:
        is_gang = any(m.role is not Role.STANDALONE for m in e.members)
        for copy in range(e.copies):
            for m in e.members:
                gpus = sum(r.count for r in m.requests)
                if not gpus:
                    continue
                nodes = choice.get((e.name, str(m.role)), ())
                gang = f"r{index}-{e.name}-{copy}" if is_gang else ""
                owner = gang or f"r{index}-{e.name}"
                pods = m.worker_nodes if m.role is Role.WORKER else 1
                for k in range(pods):
                    name = f"r{index}-{e.name}-{copy}-{m.role}-{k}"
                    # Gated: the choice is in the fit's order, copy after copy, and each pod
                    # is pinned to its own node (`gpufleet.agent.gates`).
                    own = copy * pods + k
                    mine = nodes[own : own + 1] if is_gated and own < len(nodes) else nodes
                    out.append(_PodSpec(name, owner, gpus, gang, mine))
    return out


def _pod_obj(spec: _PodSpec, mode: Steering) -> dict[str, Any]:
    base = {"metadata": {}, "spec": {"containers": [{"name": "engine"}]}}
    if mode is Steering.GATED:
        # The pod as its gate is lifted: a required term on its own node (`pinned_spec`).
        spec_ = pinned_spec(base["spec"], spec.nodes[0] if spec.nodes else None)
        template = {"metadata": {}, "spec": spec_}
    else:
        template = steer_template(base, spec.nodes, mode)
    return {
        "metadata": {
            "name": spec.name,
            "namespace": "bench",
            "labels": {"pod-template-hash": "t"},
            "ownerReferences": [{"controller": True, "uid": spec.owner}],
        },
        "spec": template["spec"],
        "status": {"phase": "Running"},
    }
