"""Gated steering: each claiming pod gets the node the fit chose for it, then its gate goes.

Kueue's topology-aware scheduling is the anchor: it creates pods behind a scheduling gate and,
once it has assigned each pod its place, adds that pod's node selector and removes the gate.
Kubernetes allows narrowing a pod's scheduling directives while it is gated (pod scheduling
readiness and mutable scheduling directives, GA in 1.30; `gpufleet.store.pod_updates` is the
rule). Under `Steering.GATED` a member's pod template carries the gate `gpufleet.io/steer` and
the annotation `gpufleet.io/steered-pods`: the node the fit chose for each pod, copy by copy,
which the pods carry as their template's annotations. Each pass (`lift_gates`):

- **Which node.** A gang pod (LeaderWorkerSet) takes the node of its copy (group index) and of
  its place in it (a Worker's worker index, the Leader's own): a gang copy is assigned as the
  fit placed it, as a unit. A Standalone pod (a Deployment's copies, the engines of a P/D pair)
  takes the first node of the list not yet taken by another pod of its template (bound, or
  pinned by an earlier pass: the annotation `gpufleet.io/node`), pods in name order, so every
  node of the list goes to one pod, as the fit counted it.
- **Pin and lift.** The pod gets a required `kubernetes.io/hostname In [node]` term (added to
  each of its required terms: terms are ORed, requirements ANDed, which is the only narrowing a
  gated pod allows) and loses the gate, in one update. kube-scheduler still binds it and
  allocates its claim; nothing sets `nodeName`. A node that filled up first leaves the pod
  Pending (Unschedulable), and re-placement handles it.
- **No node.** A pod with no node to take (its node is gone, the list is used up by pods that
  replaced others, or the annotation is missing) loses its gate unpinned: kube-scheduler and
  the autoscaler treat it as any pod. A gate is never left on a pod the agent made.

Growth: the autoscaler ignores gated pods and cannot grow for a hostname that does not exist
yet, so a member the choice could not place on the existing nodes is not gated at all (the
steerer steers only members whose every pod found a node): its pods are created ungated and
unpinned, become Unschedulable, and the autoscaler adds what they need, from zero nodes too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.agent.materialize import OWNED_SELECTOR
from gpufleet.agent.steer import GATE, HOSTNAME_KEY, STEERED_PODS, steered_pods
from gpufleet.core import labels
from gpufleet.store.merge import copy_json
from gpufleet.store.port import NODE, POD, Store, StoreError

#: The pod annotation that says which node a gated pod was given (unset: none, unpinned).
ASSIGNED_NODE: Final = "gpufleet.io/node"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(slots=True)
class GateOutcome:
    """What a pass did: pods pinned (pod -> node), pods lifted unpinned, and errors."""

    pinned: dict[str, str] = field(default_factory=dict)
    unpinned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod still carries gpufleet's scheduling gate."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates)


def assignments(pods: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str | None]:
    """The node each gated pod of `pods` is given ((namespace, name) -> node, None: none), as
    the module docstring says; a pure function of the pods."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        pod_labels = meta.get("labels") or {}
        text = (meta.get("annotations") or {}).get(STEERED_PODS)
        key = (
            meta.get("namespace"),
            pod_labels.get(labels.REPLICA),
            pod_labels.get(labels.ENGINE),
            pod_labels.get(labels.MEMBER),
            text,
        )
        groups[key].append(pod)
    out: dict[tuple[str, str], str | None] = {}
    for members in groups.values():
        out.update(_assign_group(members))
    return out


def _assign_group(pods: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str | None]:
    first = pods[0]["metadata"]
    copies = steered_pods(first.get("annotations"))
    gated = sorted((p for p in pods if is_gated(p)), key=lambda p: str(p["metadata"]["name"]))
    out: dict[tuple[str, str], str | None] = {}
    if not gated:
        return out
    if LWS_GROUP_INDEX in (first.get("labels") or {}):
        for pod in gated:
            out[_key(pod)] = _gang_node(pod, copies)
        return out
    left = Counter(n for copy in copies for n in copy)
    for pod in pods:
        if not is_gated(pod):
            node = (pod["metadata"].get("annotations") or {}).get(ASSIGNED_NODE) or (
                pod.get("spec") or {}
            ).get("nodeName")
            if node and left[node] > 0:
                left[node] -= 1
    order = [n for copy in copies for n in copy]
    for pod in gated:
        node = next((n for n in order if left[n] > 0), None)
        if node is not None:
            left[node] -= 1
        out[_key(pod)] = node
    return out


def _gang_node(pod: Mapping[str, Any], copies: Sequence[Sequence[str]]) -> str | None:
    pod_labels = pod["metadata"].get("labels") or {}
    try:
        group = int(pod_labels.get(LWS_GROUP_INDEX, ""))
        worker = int(pod_labels.get(LWS_WORKER_INDEX, "0"))
    except ValueError:
        return None
    place = worker - 1 if pod_labels.get(labels.MEMBER) == "Worker" else 0
    if not 0 <= group < len(copies) or not 0 <= place < len(copies[group]):
        return None
    return copies[group][place]


def pinned_spec(spec: Mapping[str, Any], node: str | None) -> dict[str, Any]:
    """The pod spec without gpufleet's gate and, given a node, with `hostname In [node]` added
    to each required node-affinity term (one term when there is none)."""
    out = copy_json(dict(spec))
    gates = [g for g in out.get("schedulingGates") or [] if g != {"name": GATE}]
    if gates:
        out["schedulingGates"] = gates
    else:
        out.pop("schedulingGates", None)
    if node is None:
        return out
    affinity = out.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(_REQUIRED, {})
    terms = required.get("nodeSelectorTerms") or [{}]
    expression = {"key": HOSTNAME_KEY, "operator": "In", "values": [node]}
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), expression]
    required["nodeSelectorTerms"] = terms
    return out


def lift_gates(local: Store) -> GateOutcome:
    """Give each gated pod of the agent's its node and lift its gate (the module docstring)."""
    outcome = GateOutcome()
    pods = local.view(POD, None, OWNED_SELECTOR)
    if not any(map(is_gated, pods)):
        return outcome
    nodes = {n["metadata"]["name"] for n in local.view(NODE)}
    for key, node in sorted(assignments(pods).items(), key=lambda kv: kv[0]):
        ns, name = key
        given = node if node in nodes else None
        try:
            pod = local.get(POD, name, ns)
            if pod is None or not is_gated(pod):
                continue
            pod["spec"] = pinned_spec(pod["spec"], given)
            if given is not None:
                meta = pod["metadata"]
                meta["annotations"] = {**(meta.get("annotations") or {}), ASSIGNED_NODE: given}
            local.update(pod)
        except StoreError as e:
            outcome.errors.append(f"lift the gate of pod {ns}/{name}: {e}")
            continue
        if given is None:
            outcome.unpinned.append(f"{ns}/{name}")
        else:
            outcome.pinned[f"{ns}/{name}"] = given
    return outcome


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
