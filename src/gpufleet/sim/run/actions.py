"""Carrying out a scenario's timeline actions on the simulated fleet.

Hub garbage collection: deleting a ModelDeployment (the `delete` action) deletes the
ModelReplicas it owns at once, as the API server's garbage collector would shortly after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpufleet.sim.emulated.cluster import WorkloadCluster
from gpufleet.sim.emulated.fleet import Fleet
from gpufleet.sim.emulated.objects import UNREACHABLE_TAINT
from gpufleet.sim.scenario.load import (
    Action,
    ActionKind,
)
from gpufleet.store.port import (
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    NODE,
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


def delete_deployment(hub: Store, key: str) -> bool:
    """Delete a deployment; False when it does not exist. Its replicas live in their clusters'
    hub namespaces, where no owner reference can reach them: the controller deletes them (as
    on a real hub), not the garbage collector."""
    namespace, _, name = key.partition("/")
    if hub.get(MODEL_DEPLOYMENT, name, namespace) is None:
        return False
    hub.delete(MODEL_DEPLOYMENT, name, namespace)
    return True


def scale_deployment(hub: Store, key: str, replicas: int) -> None:
    namespace, _, name = key.partition("/")
    current = hub.get(MODEL_DEPLOYMENT, name, namespace)
    if current is None:
        raise ActionFailed(f"deployment {key} does not exist")
    if int(current["spec"].get("replicas", 1)) == replicas:
        raise ActionFailed(f"deployment {key} already has {replicas} replicas")
    current["spec"]["replicas"] = replicas
    hub.update(current)


class ActionFailed(RuntimeError):
    """A timeline action cannot be carried out at its time (e.g. no such node), or would
    change nothing (cordoning a cordoned node, removing a taint nobody has)."""


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


def matches_taint(taint: Mapping[str, Any], key: str, effect: str) -> bool:
    """Whether `untaint key[:effect]` removes `taint`: by key, and by effect when given."""
    return taint.get("key") == key and (not effect or taint.get("effect") == effect)


def _cluster_taint(hub: Store, cluster: str, action: Action, present: bool) -> None:
    obj = _inference_cluster(hub, cluster, action)
    before = list(obj["spec"].get("taints") or [])
    if present:
        taint = {"key": action.key, "effect": action.effect}
        if action.value:
            taint["value"] = action.value
        if taint in before:
            raise ActionFailed(f"{action.path}: cluster {cluster} already has that taint")
        taints = [
            t
            for t in before
            if not (t.get("key") == action.key and t.get("effect") == action.effect)
        ]
        taints.append(taint)
    else:
        taints = [t for t in before if not matches_taint(t, action.key, action.effect)]
        if len(taints) == len(before):
            raise ActionFailed(
                f"{action.path}: cluster {cluster} has no taint {_taint_text(action)}"
            )
    if taints:
        obj["spec"]["taints"] = taints
    else:
        obj["spec"].pop("taints", None)
    hub.update(obj)


def _taint_text(action: Action) -> str:
    return action.key + (f":{action.effect}" if action.effect else "")


def _inference_cluster(hub: Store, cluster: str, action: Action) -> Obj:
    obj = hub.get(INFERENCE_CLUSTER, cluster)
    if obj is None:
        raise ActionFailed(f"{action.path}: no InferenceCluster {cluster} on the hub")
    return obj


def _delete_cluster(fleet: Fleet, action: Action) -> None:
    """Delete the InferenceCluster on the hub; the workload cluster and its agent go on."""
    _inference_cluster(fleet.hub, action.cluster, action)
    fleet.hub.delete(INFERENCE_CLUSTER, action.cluster)


def _label_cluster(fleet: Fleet, action: Action) -> None:
    """Set (or, for None, remove) the InferenceCluster's labels, as `kubectl label` does."""
    obj = _inference_cluster(fleet.hub, action.cluster, action)
    current = dict(obj["metadata"].get("labels") or {})
    changed = dict(current)
    for key, value in action.labels.items():
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = value
    if changed == current:
        raise ActionFailed(f"{action.path}: cluster {action.cluster} already has those labels")
    obj["metadata"]["labels"] = changed
    fleet.hub.update(obj)


def perform(fleet: Fleet, action: Action) -> None:
    """Carry out one timeline action on the fleet; ActionFailed if it cannot, or if it would
    change nothing."""
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


def _delete(fleet: Fleet, action: Action) -> None:
    if not delete_deployment(fleet.hub, action.deployment):
        raise ActionFailed(f"{action.path}: deployment {action.deployment} does not exist")


def _agent(fleet: Fleet, action: Action) -> None:
    slot = fleet.agents[action.cluster]
    is_running = slot.agent is not None
    if is_running == (action.kind is ActionKind.START_AGENT):
        state = "running" if is_running else "down"
        raise ActionFailed(f"{action.path}: the agent of {action.cluster} is already {state}")
    if is_running:
        fleet.crash_agent(action.cluster)
    else:
        fleet.restart_agent(action.cluster)


def _reinstall(fleet: Fleet, action: Action) -> None:
    """The agent reinstalled: its Lease created again (a new incarnation, epoch 0)."""
    fleet.restart_agent(action.cluster, new_lease=True)


def _link(fleet: Fleet, action: Action) -> None:
    is_partitioned = fleet.agents[action.cluster].link.is_partitioned
    if is_partitioned == (action.kind is ActionKind.PARTITION):
        state = "partitioned" if is_partitioned else "connected"
        raise ActionFailed(f"{action.path}: the agent of {action.cluster} is already {state}")
    fleet.partition(action.cluster, not is_partitioned)


def _add_node(fleet: Fleet, action: Action) -> None:
    assert action.target is not None
    fleet.clusters[action.cluster].add_node(action.target.pool)


#: Actions on the hub or an agent, and `addNode`: no node to resolve.
_HUB_ACTIONS: Final[dict[ActionKind, Callable[[Fleet, Action], None]]] = {
    ActionKind.APPLY: _apply,
    ActionKind.DELETE: _delete,
    ActionKind.SCALE: lambda fleet, a: scale_deployment(fleet.hub, a.deployment, a.replicas),
    ActionKind.KILL_AGENT: _agent,
    ActionKind.START_AGENT: _agent,
    ActionKind.REINSTALL_AGENT: _reinstall,
    ActionKind.PARTITION: _link,
    ActionKind.HEAL: _link,
    ActionKind.ADD_NODE: _add_node,
    ActionKind.DELETE_CLUSTER: _delete_cluster,
    ActionKind.LABEL_CLUSTER: _label_cluster,
}


def _node_action(cluster: WorkloadCluster, node: str, action: Action) -> None:
    k = action.kind
    obj = cluster.store.peek_one(NODE, node)
    assert obj is not None
    unchanged = _UNCHANGED.get(k)
    if unchanged is not None and unchanged(obj, action):
        raise ActionFailed(f"{action.path}: {action.describe()}: node {node} {_UNCHANGED_WORDS[k]}")
    if k is ActionKind.CORDON:
        cluster.cordon(node)
    elif k is ActionKind.DRAIN:
        cluster.drain(node)
    elif k is ActionKind.UNCORDON:
        cluster.uncordon(node)
    elif k is ActionKind.TAINT:
        cluster.taint(node, action.key, action.effect, action.value)
    elif k is ActionKind.UNTAINT:
        cluster.untaint(node, action.key, action.effect)
    elif k is ActionKind.FAIL_NODE:
        cluster.fail_node(node)
    elif k is ActionKind.RECOVER_NODE:
        cluster.recover_node(node)
    elif k is ActionKind.REMOVE_NODE:
        cluster.remove_node(node)
    elif k is ActionKind.ADD_HOST_POD:
        cluster.add_host_pod(node, action.cpu, action.memory, is_daemon=action.is_daemon)
    elif k is ActionKind.ADD_FOREIGN_CLAIM:
        try:
            cluster.add_foreign_claim(node, action.devices, named=action.device)
        except ValueError as error:
            raise ActionFailed(f"{action.path}: {error}") from None


def _taints(node: Obj) -> list[Mapping[str, Any]]:
    return list(node["spec"].get("taints") or [])


def _has_taint(node: Obj, action: Action) -> bool:
    wanted = {"key": action.key, "effect": action.effect}
    if action.value:
        wanted["value"] = action.value
    return any(dict(t) == wanted for t in _taints(node))


def _is_failed(node: Obj) -> bool:
    return any(
        t.get("key") == UNREACHABLE_TAINT["key"] and t.get("effect") == UNREACHABLE_TAINT["effect"]
        for t in _taints(node)
    )


#: Node actions that would change nothing on a node in this state, and how to say so.
_UNCHANGED: Final[dict[ActionKind, Callable[[Obj, Action], bool]]] = {
    ActionKind.CORDON: lambda node, a: bool(node["spec"].get("unschedulable")),
    ActionKind.UNCORDON: lambda node, a: not node["spec"].get("unschedulable"),
    ActionKind.TAINT: _has_taint,
    ActionKind.UNTAINT: lambda node, a: (
        not any(matches_taint(t, a.key, a.effect) for t in _taints(node))
    ),
    ActionKind.FAIL_NODE: lambda node, a: _is_failed(node),
    ActionKind.RECOVER_NODE: lambda node, a: not _is_failed(node),
}
_UNCHANGED_WORDS: Final = {
    ActionKind.CORDON: "is already cordoned",
    ActionKind.UNCORDON: "is not cordoned",
    ActionKind.TAINT: "already has that taint",
    ActionKind.UNTAINT: "has no such taint",
    ActionKind.FAIL_NODE: "has already failed",
    ActionKind.RECOVER_NODE: "has not failed",
}


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
    if not names:
        raise ActionFailed(f"{action.path}: no foreign claim on {action.target}")
    for claim in names:
        try:
            cluster.remove_foreign_claim(claim)
        except NotFound:
            raise ActionFailed(f"{action.path}: no foreign claim {claim}") from None
