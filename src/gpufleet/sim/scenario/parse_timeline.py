"""Reading a scenario's timeline: each entry becomes an `Action`, checked against the fleet's
names (clusters, pools, node names `<pool>-<i>`) and the deployments the scenario applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from gpufleet.api.models import MAX_REPLICAS
from gpufleet.core.quantity import QuantityError, parse_quantity
from gpufleet.sim.emulated.fleet import FleetSpec
from gpufleet.sim.scenario.fields import (
    Problems,
    check_known,
    get_duration,
    get_int,
    get_mapping,
    get_str,
    validated,
)
from gpufleet.sim.scenario.model import Action, ActionKind, NodeRef, format_duration
from gpufleet.sim.scenario.parse_fleet import check_cluster

_NODE_ACTIONS: Final = (
    ActionKind.CORDON,
    ActionKind.UNCORDON,
    ActionKind.DRAIN,
    ActionKind.FAIL_NODE,
    ActionKind.RECOVER_NODE,
    ActionKind.REMOVE_NODE,
)
_AGENT_ACTIONS: Final = (
    ActionKind.KILL_AGENT,
    ActionKind.START_AGENT,
    ActionKind.REINSTALL_AGENT,
    ActionKind.PARTITION,
    ActionKind.HEAL,
)
_ACTION_FIELDS: Final[dict[ActionKind, tuple[str, ...]]] = {
    ActionKind.APPLY: ("manifest",),
    ActionKind.DELETE: ("deployment",),
    ActionKind.SCALE: ("deployment", "replicas"),
    **{k: ("cluster", "node", "pool", "index") for k in _NODE_ACTIONS},
    ActionKind.TAINT: ("cluster", "node", "pool", "index", "key", "value", "effect"),
    ActionKind.UNTAINT: ("cluster", "node", "pool", "index", "key", "effect"),
    ActionKind.ADD_NODE: ("cluster", "pool"),
    **{k: ("cluster",) for k in _AGENT_ACTIONS},
    ActionKind.ADD_FOREIGN_CLAIM: ("cluster", "node", "pool", "index", "devices", "device"),
    ActionKind.REMOVE_FOREIGN_CLAIM: ("cluster", "claim", "node", "pool", "index"),
    ActionKind.ADD_HOST_POD: ("cluster", "node", "pool", "index", "cpu", "memory", "daemonSet"),
    ActionKind.DELETE_CLUSTER: ("cluster",),
    ActionKind.LABEL_CLUSTER: ("cluster", "labels"),
}


class FleetNames:
    """Names the timeline and checks may refer to."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.pools = {c.name: {p.name for p in c.pools} for c in fleet.clusters}
        self.specs = {c.name: c for c in fleet.clusters}

    def cluster(self, data: Mapping[str, Any], path: str, problems: Problems) -> str:
        name = get_str(data, "cluster", path, problems)
        if name and name not in self.pools:
            problems.add(
                f"{path}.cluster",
                f"unknown cluster {name!r} (clusters: {', '.join(sorted(self.pools))})",
            )
        return name

    def pool_key(self, key: object, path: str, problems: Problems) -> tuple[str, str]:
        text = str(key)
        cluster, sep, pool = text.partition("/")
        if not sep or not cluster or not pool:
            problems.add(path, f"{text!r} must be cluster/pool")
        elif cluster not in self.pools:
            problems.add(path, f"unknown cluster {cluster!r}")
        elif pool not in self.pools[cluster]:
            problems.add(path, f"cluster {cluster} has no pool {pool!r}")
        return cluster, pool


def _node_ref(
    data: Mapping[str, Any],
    path: str,
    problems: Problems,
    fleet: FleetNames,
    cluster: str,
    *,
    required: bool,
) -> NodeRef | None:
    node = data.get("node")
    pool = data.get("pool")
    index = data.get("index")
    if node is not None:
        if pool is not None or index is not None:
            problems.add(path, "give node, or pool (and index), not both")
        if not isinstance(node, str) or not node:
            problems.add(f"{path}.node", "must be a node name like l4-0")
            return None
        pool_name = node.rpartition("-")[0]
        if cluster in fleet.pools and pool_name not in fleet.pools[cluster]:
            problems.add(
                f"{path}.node",
                f"{node!r} is not a node name of cluster {cluster} (nodes are <pool>-<i>)",
            )
        return NodeRef(node=node)
    if pool is not None:
        if not isinstance(pool, str) or (
            cluster in fleet.pools and pool not in fleet.pools[cluster]
        ):
            problems.add(f"{path}.pool", f"cluster {cluster} has no pool {pool!r}")
            return None
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            problems.add(f"{path}.index", "must be an integer")
            return None
        return NodeRef(pool=pool, index=index)
    if required:
        problems.add(path, "needs node (like l4-0), or pool (and index)")
    return None


def _deployment_ref(
    data: Mapping[str, Any], path: str, problems: Problems, known: Sequence[str]
) -> str:
    name = get_str(data, "deployment", path, problems)
    return resolve_deployment(name, known, f"{path}.deployment", problems)


def resolve_deployment(
    name: str, known: Sequence[str], path: str, problems: Problems | None = None
) -> str:
    """`namespace/name` for a deployment named by `namespace/name` or, if unique, `name`."""
    if not name:
        return name
    if name in known:
        return name
    matches = [k for k in known if k.rpartition("/")[2] == name]
    if len(matches) == 1:
        return matches[0]
    if problems is not None:
        problems.add(
            path,
            f"unknown deployment {name!r} (deployments: {', '.join(known) or 'none'})"
            if not matches
            else f"{name!r} is ambiguous: {', '.join(matches)}",
        )
    return name


@dataclass(frozen=True, slots=True)
class _Entry:
    """One timeline entry being read: its time, kind, path and what it may name."""

    at_s: float
    kind: ActionKind
    path: str
    data: Mapping[str, Any]
    problems: Problems
    fleet: FleetNames
    known: list[str]

    def action(self, **fields: Any) -> Action:
        return Action(self.at_s, self.kind, self.path, **fields)


def read_action(
    raw: object,
    path: str,
    problems: Problems,
    fleet: FleetNames,
    known: list[str],
    end_s: float,
) -> Action | None:
    data = get_mapping(raw, path, problems)
    at_s = get_duration(data, "at", path, problems)
    if at_s > end_s:
        problems.add(f"{path}.at", f"is after the end ({format_duration(end_s)})")
    kind_text = data.get("action")
    choices = [k.value for k in ActionKind]
    if kind_text not in choices:
        problems.add(
            f"{path}.action",
            f"unknown action {kind_text!r} (expected one of {', '.join(choices)})"
            if kind_text is not None
            else f"is required (one of {', '.join(choices)})",
        )
        return None
    kind = ActionKind(kind_text)
    check_known(data, ("at", "action", *_ACTION_FIELDS[kind]), path, problems)
    entry = _Entry(at_s, kind, path, data, problems, fleet, known)
    return _READERS.get(kind, _node_action)(entry)


def _apply(e: _Entry) -> Action | None:
    manifest = validated(
        e.data.get("manifest"), f"{e.path}.manifest", e.problems, "ModelDeployment"
    )
    if manifest is None:
        return None
    key = f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
    if key not in e.known:
        e.known.append(key)
    return e.action(manifest=manifest, deployment=key)


def _delete(e: _Entry) -> Action:
    return e.action(deployment=_deployment_ref(e.data, e.path, e.problems, e.known))


def _scale(e: _Entry) -> Action:
    deployment = _deployment_ref(e.data, e.path, e.problems, e.known)
    replicas = get_int(e.data, "replicas", e.path, e.problems)
    if replicas > MAX_REPLICAS:
        # As a manifest's spec.replicas is bounded by the API.
        e.problems.add(f"{e.path}.replicas", f"must be at most {MAX_REPLICAS}")
    return e.action(deployment=deployment, replicas=replicas)


def _agent_action(e: _Entry) -> Action:
    return e.action(cluster=e.fleet.cluster(e.data, e.path, e.problems))


def _add_node(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    pool = get_str(e.data, "pool", e.path, e.problems)
    if cluster in e.fleet.pools and pool and pool not in e.fleet.pools[cluster]:
        e.problems.add(f"{e.path}.pool", f"cluster {cluster} has no pool {pool!r}")
    return e.action(cluster=cluster, target=NodeRef(pool=pool))


def _taint(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    target = _node_ref(e.data, e.path, e.problems, e.fleet, cluster, required=False)
    key = get_str(e.data, "key", e.path, e.problems)
    # Without an effect, untaint removes the key whatever its effect (as `kubectl taint
    # key-` does), at the cluster's level as at a node's.
    default = "NoSchedule" if e.kind is ActionKind.TAINT else ""
    effect = get_str(e.data, "effect", e.path, e.problems, default)
    if effect and effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
        e.problems.add(f"{e.path}.effect", "must be NoSchedule, NoExecute or PreferNoSchedule")
    value = str(e.data.get("value") or "")
    return e.action(cluster=cluster, target=target, key=key, value=value, effect=effect)


def _add_foreign_claim(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    target = _node_ref(e.data, e.path, e.problems, e.fleet, cluster, required=True)
    if target is not None and not target.node and target.index is None:
        e.problems.add(e.path, "addForeignClaim needs one node: node, or pool and index")
    devices = get_int(e.data, "devices", e.path, e.problems, 1, minimum=1)
    device = e.data.get("device") or ""
    if not isinstance(device, str):
        e.problems.add(f"{e.path}.device", "must be a device name")
        device = ""
    return e.action(cluster=cluster, target=target, devices=devices, device=device)


def _add_host_pod(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    target = _node_ref(e.data, e.path, e.problems, e.fleet, cluster, required=True)
    amounts: dict[str, str] = {}
    for key in ("cpu", "memory"):
        value = e.data.get(key, "0")
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        try:
            if not isinstance(text, str) or parse_quantity(text).nanos < 0:
                raise QuantityError(key)
        except QuantityError:
            e.problems.add(f"{e.path}.{key}", "must be a quantity (e.g. 500m, 2Gi)")
            text = "0"
        amounts[key] = text
    daemon = e.data.get("daemonSet", False)
    if not isinstance(daemon, bool):
        e.problems.add(f"{e.path}.daemonSet", "must be true or false")
        daemon = False
    return e.action(
        cluster=cluster,
        target=target,
        cpu=amounts["cpu"],
        memory=amounts["memory"],
        is_daemon=daemon,
    )


def _remove_foreign_claim(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    claim = str(e.data.get("claim") or "")
    target = _node_ref(e.data, e.path, e.problems, e.fleet, cluster, required=not claim)
    return e.action(cluster=cluster, target=target, claim=claim)


def _node_action(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    target = _node_ref(e.data, e.path, e.problems, e.fleet, cluster, required=True)
    return e.action(cluster=cluster, target=target)


def _label_cluster(e: _Entry) -> Action:
    cluster = e.fleet.cluster(e.data, e.path, e.problems)
    where = f"{e.path}.labels"
    changes: dict[str, str | None] = {}
    raw = get_mapping(e.data.get("labels"), where, e.problems)
    if not raw:
        e.problems.add(where, "must set or remove at least one label")
    for key, value in raw.items():
        if value is not None and not isinstance(value, str):
            e.problems.add(f"{where}.{key}", "must be a string, or null to remove the label")
            continue
        changes[str(key)] = value
    spec = e.fleet.specs.get(cluster)
    if spec is not None:
        # Validated as the InferenceCluster would be with every label this action sets.
        merged = {**spec.labels, **{k: v for k, v in changes.items() if v is not None}}
        check_cluster(replace(spec, labels=merged), where, e.problems, labels_only=True)
    return e.action(cluster=cluster, labels=changes)


#: How each kind of action is read; any other acts on nodes (`_node_action`).
_READERS: Final[dict[ActionKind, Callable[[_Entry], Action | None]]] = {
    ActionKind.APPLY: _apply,
    ActionKind.DELETE: _delete,
    ActionKind.SCALE: _scale,
    **{k: _agent_action for k in _AGENT_ACTIONS},
    ActionKind.ADD_NODE: _add_node,
    ActionKind.TAINT: _taint,
    ActionKind.UNTAINT: _taint,
    ActionKind.ADD_FOREIGN_CLAIM: _add_foreign_claim,
    ActionKind.REMOVE_FOREIGN_CLAIM: _remove_foreign_claim,
    ActionKind.ADD_HOST_POD: _add_host_pod,
    ActionKind.DELETE_CLUSTER: _agent_action,
    ActionKind.LABEL_CLUSTER: _label_cluster,
}
