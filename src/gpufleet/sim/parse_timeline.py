"""Reading a scenario's timeline: each entry becomes an `Action`, checked against the fleet's
names (clusters, pools, node names `<pool>-<i>`) and the deployments the scenario applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpufleet.sim.fields import (
    Problems,
    check_known,
    get_duration,
    get_int,
    get_mapping,
    get_str,
    validated,
)
from gpufleet.sim.fleet import FleetSpec
from gpufleet.sim.scenario_model import Action, ActionKind, NodeRef, format_duration

_NODE_ACTIONS: Final = (
    ActionKind.CORDON,
    ActionKind.UNCORDON,
    ActionKind.FAIL_NODE,
    ActionKind.RECOVER_NODE,
    ActionKind.REMOVE_NODE,
)
_AGENT_ACTIONS: Final = (
    ActionKind.KILL_AGENT,
    ActionKind.START_AGENT,
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
    ActionKind.ADD_FOREIGN_CLAIM: ("cluster", "node", "pool", "index", "devices"),
    ActionKind.REMOVE_FOREIGN_CLAIM: ("cluster", "claim", "node", "pool", "index"),
}


class FleetNames:
    """Names the timeline and checks may refer to."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.pools = {c.name: {p.name for p in c.pools} for c in fleet.clusters}

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
    if kind is ActionKind.APPLY:
        manifest = validated(data.get("manifest"), f"{path}.manifest", problems, "ModelDeployment")
        if manifest is None:
            return None
        key = f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"
        if key not in known:
            known.append(key)
        return Action(at_s, kind, path, manifest=manifest, deployment=key)
    if kind is ActionKind.DELETE:
        return Action(at_s, kind, path, deployment=_deployment_ref(data, path, problems, known))
    if kind is ActionKind.SCALE:
        deployment = _deployment_ref(data, path, problems, known)
        replicas = get_int(data, "replicas", path, problems)
        return Action(at_s, kind, path, deployment=deployment, replicas=replicas)
    cluster = fleet.cluster(data, path, problems)
    if kind in _AGENT_ACTIONS:
        return Action(at_s, kind, path, cluster=cluster)
    if kind is ActionKind.ADD_NODE:
        pool = get_str(data, "pool", path, problems)
        if cluster in fleet.pools and pool and pool not in fleet.pools[cluster]:
            problems.add(f"{path}.pool", f"cluster {cluster} has no pool {pool!r}")
        return Action(at_s, kind, path, cluster=cluster, target=NodeRef(pool=pool))
    if kind in (ActionKind.TAINT, ActionKind.UNTAINT):
        target = _node_ref(data, path, problems, fleet, cluster, required=False)
        key = get_str(data, "key", path, problems)
        effect = get_str(data, "effect", path, problems, "NoSchedule")
        if effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            problems.add(f"{path}.effect", "must be NoSchedule, NoExecute or PreferNoSchedule")
        value = str(data.get("value") or "")
        return Action(
            at_s, kind, path, cluster=cluster, target=target, key=key, value=value, effect=effect
        )
    if kind is ActionKind.ADD_FOREIGN_CLAIM:
        target = _node_ref(data, path, problems, fleet, cluster, required=True)
        if target is not None and not target.node and target.index is None:
            problems.add(path, "addForeignClaim needs one node: node, or pool and index")
        devices = get_int(data, "devices", path, problems, 1, minimum=1)
        return Action(at_s, kind, path, cluster=cluster, target=target, devices=devices)
    if kind is ActionKind.REMOVE_FOREIGN_CLAIM:
        claim = str(data.get("claim") or "")
        target = _node_ref(data, path, problems, fleet, cluster, required=not claim)
        return Action(at_s, kind, path, cluster=cluster, target=target, claim=claim)
    target = _node_ref(data, path, problems, fleet, cluster, required=True)
    return Action(at_s, kind, path, cluster=cluster, target=target)
