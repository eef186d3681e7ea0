"""Carrying out a scenario's timeline actions on the simulated fleet.

Hub garbage collection: deleting a ModelDeployment (the `delete` action) deletes the
ModelReplicas it owns at once, as the API server's garbage collector would shortly after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Final

from gpufleet.sim.cluster import WorkloadCluster
from gpufleet.sim.fleet import Fleet
from gpufleet.sim.scenario import (
    Action,
    ActionKind,
)
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    RESOURCE_CLAIM,
    NotFound,
    Obj,
    Store,
)


def apply_deployment(hub: Store, manifest: Obj) -> None:
    """`kubectl apply` of a ModelDeployment: create, or replace its labels and spec."""
    meta = manifest["metadata"]
    current = hub.get(MODEL_DEPLOYMENT, meta["name"], meta["namespace"])
    if current is None:
        hub.create(manifest)
        return
    current["metadata"]["labels"] = dict(meta.get("labels") or {})
    current["spec"] = manifest["spec"]
    hub.update(current)


def delete_deployment(hub: Store, key: str) -> None:
    """Delete a deployment and (as the garbage collector would) the replicas it owns."""
    namespace, _, name = key.partition("/")
    current = hub.get(MODEL_DEPLOYMENT, name, namespace)
    if current is None:
        return
    hub.delete(MODEL_DEPLOYMENT, name, namespace)
    uid = current["metadata"].get("uid")
    owned: list[str] = []
    for r in hub.view(MODEL_REPLICA, namespace):  # read-only: nothing copied to be deleted
        meta = r["metadata"]
        refs = meta.get("ownerReferences")
        if refs:
            is_owned = any(o.get("uid") == uid for o in refs)
        else:
            is_owned = (r.get("spec") or {}).get("deploymentName") == name
        if is_owned:
            owned.append(meta["name"])
    for replica in owned:
        with contextlib.suppress(NotFound):
            hub.delete(MODEL_REPLICA, replica, namespace)


def scale_deployment(hub: Store, key: str, replicas: int) -> None:
    namespace, _, name = key.partition("/")
    current = hub.get(MODEL_DEPLOYMENT, name, namespace)
    if current is None:
        raise ActionFailed(f"deployment {key} does not exist")
    current["spec"]["replicas"] = replicas
    hub.update(current)


class ActionFailed(RuntimeError):
    """A timeline action cannot be carried out at its time (e.g. no such node)."""


def _nodes(cluster: WorkloadCluster, action: Action) -> list[str]:
    assert action.target is not None
    existing = [n["metadata"]["name"] for n in cluster.nodes()]
    names = action.target.names(existing)
    missing = [n for n in names if n not in existing]
    if missing or not names:
        raise ActionFailed(
            f"{action.path}: cluster {cluster.name} has no node {', '.join(missing) or action.target}"
            f" (nodes: {', '.join(existing)})"
        )
    return names


def _cluster_taint(hub: Store, cluster: str, action: Action, present: bool) -> None:
    obj = hub.get(INFERENCE_CLUSTER, cluster)
    if obj is None:
        raise ActionFailed(f"{action.path}: no InferenceCluster {cluster}")
    taints = [
        t
        for t in obj["spec"].get("taints") or []
        if not (t.get("key") == action.key and t.get("effect") == action.effect)
    ]
    if present:
        taint = {"key": action.key, "effect": action.effect}
        if action.value:
            taint["value"] = action.value
        taints.append(taint)
    if taints:
        obj["spec"]["taints"] = taints
    else:
        obj["spec"].pop("taints", None)
    hub.update(obj)


def perform(fleet: Fleet, action: Action) -> None:
    """Carry out one timeline action on the fleet."""
    handler = _HUB_ACTIONS.get(action.kind)
    if handler is not None:
        handler(fleet, action)
        return
    cluster = fleet.clusters[action.cluster]
    if action.kind in (ActionKind.TAINT, ActionKind.UNTAINT) and action.target is None:
        _cluster_taint(fleet.hub, action.cluster, action, action.kind is ActionKind.TAINT)
        return
    if action.kind is ActionKind.REMOVE_FOREIGN_CLAIM:
        _remove_foreign(cluster, action)
        return
    for node in _nodes(cluster, action):
        _node_action(cluster, node, action)


def _apply(fleet: Fleet, action: Action) -> None:
    assert action.manifest is not None
    apply_deployment(fleet.hub, action.manifest)


def _start_agent(fleet: Fleet, action: Action) -> None:
    if fleet.agents[action.cluster].agent is None:
        fleet.restart_agent(action.cluster)


def _add_node(fleet: Fleet, action: Action) -> None:
    assert action.target is not None
    fleet.clusters[action.cluster].add_node(action.target.pool)


#: Actions on the hub or an agent, and `addNode`: no node to resolve.
_HUB_ACTIONS: Final[dict[ActionKind, Callable[[Fleet, Action], None]]] = {
    ActionKind.APPLY: _apply,
    ActionKind.DELETE: lambda fleet, a: delete_deployment(fleet.hub, a.deployment),
    ActionKind.SCALE: lambda fleet, a: scale_deployment(fleet.hub, a.deployment, a.replicas),
    ActionKind.KILL_AGENT: lambda fleet, a: fleet.crash_agent(a.cluster),
    ActionKind.START_AGENT: _start_agent,
    ActionKind.PARTITION: lambda fleet, a: fleet.partition(a.cluster),
    ActionKind.HEAL: lambda fleet, a: fleet.heal(a.cluster),
    ActionKind.ADD_NODE: _add_node,
}


def _node_action(cluster: WorkloadCluster, node: str, action: Action) -> None:
    k = action.kind
    if k is ActionKind.CORDON:
        cluster.cordon(node)
    elif k is ActionKind.UNCORDON:
        cluster.uncordon(node)
    elif k is ActionKind.TAINT:
        cluster.taint(node, action.key, action.effect, action.value)
    elif k is ActionKind.UNTAINT:
        cluster.untaint(node, action.key)
    elif k is ActionKind.FAIL_NODE:
        cluster.fail_node(node)
    elif k is ActionKind.RECOVER_NODE:
        cluster.recover_node(node)
    elif k is ActionKind.REMOVE_NODE:
        cluster.remove_node(node)
    elif k is ActionKind.ADD_FOREIGN_CLAIM:
        try:
            cluster.add_foreign_claim(node, action.devices)
        except ValueError as error:
            raise ActionFailed(f"{action.path}: {error}") from None


def _remove_foreign(cluster: WorkloadCluster, action: Action) -> None:
    foreign = [
        c
        for c in cluster.store.list(RESOURCE_CLAIM, "other-tenant")
        if c["metadata"]["name"].startswith("foreign-")
    ]
    if action.claim:
        names = [action.claim]
    else:
        nodes = set(_nodes(cluster, action))
        names = [
            c["metadata"]["name"]
            for c in foreign
            if any(
                r.get("pool") in nodes
                for r in ((c.get("status") or {}).get("allocation") or {})
                .get("devices", {})
                .get("results", [])
            )
        ]
    for claim in names:
        try:
            cluster.remove_foreign_claim(claim)
        except NotFound:
            raise ActionFailed(f"{action.path}: no foreign claim {claim}") from None
