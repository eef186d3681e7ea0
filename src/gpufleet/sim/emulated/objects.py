"""Pure helpers on Kubernetes-shaped objects, shared by the emulated cluster's components:
keys, liveness and readiness, taints and tolerations, the node filters kube-scheduler applies,
claim allocations and owner references. No store, no clock."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpufleet.sim.emulated import dra
from gpufleet.store.port import (
    Obj,
)

#: Keeps a deleted pod around (with deletionTimestamp) until the kubelet finishes it.
KUBELET_FINALIZER: Final = "sim.gpufleet.io/kubelet"
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
UNREACHABLE_TAINT: Final = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY: Final = "leaderworkerset.sigs.k8s.io/group-key"
LWS_TEMPLATE_HASH: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"
POD_TEMPLATE_HASH: Final = "pod-template-hash"
_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"


#: An object's key in the store within its kind: (namespace or "", name); sorted keys are
#: `peek` order.
ObjKey = tuple[str, str]


def key_of(obj: Obj) -> ObjKey:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def is_unbound(pod: Obj) -> bool:
    """The scheduler has to bind the pod."""
    return (
        not pod["spec"].get("nodeName")
        and is_alive(pod)
        and pod["status"].get("phase", "Pending") == "Pending"
    )


def template_hash_of(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def owner_ref(owner: Obj, api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def allocation_status(results: list[dict[str, str]], node: str) -> Obj:
    return {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def allocation_nodes(claim: Obj) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r["pool"] for r in (allocation.get("devices") or {}).get("results") or []]


def set_taint(node: Obj, taint: Mapping[str, str], present: bool) -> None:
    taints = [
        t
        for t in node["spec"].get("taints") or []
        if not (t["key"] == taint["key"] and t["effect"] == taint["effect"])
    ]
    if present:
        taints.append(dict(taint))
    node["spec"]["taints"] = taints


def is_alive(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp")


def any_alive(pods: Iterable[Obj]) -> bool:
    return any(is_alive(p) for p in pods)


def is_ready(pod: Obj) -> bool:
    return pod["status"].get("phase") == "Running" and is_alive(pod)


def is_node_ready(node: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def scale_down_order(pod: Obj) -> tuple[int, int, str]:
    """Kubernetes deletes unbound before bound, not-ready before ready, newest first."""
    return (
        1 if pod["spec"].get("nodeName") else 0,
        1 if is_ready(pod) else 0,
        "".join(chr(255 - ord(c)) for c in pod["metadata"]["creationTimestamp"]),
    )


def natural_pod_key(pod: Obj) -> tuple[Any, ...]:
    return (pod["metadata"]["namespace"], *dra.natural_key(pod["metadata"]["name"]))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def untolerated(node: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> str | None:
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not tolerates(tolerations, taint):
            return str(taint["key"])
    return None


#: `node_filter`'s reason for a node the pod's nodeSelector does not admit.
SELECTOR_MISMATCH: Final = "node(s) didn't match Pod's node affinity/selector"


def node_filter(node: Obj, pod_spec: Mapping[str, Any]) -> str | None:
    """Why the node cannot take the pod (kube-scheduler's wording), or None."""
    node_labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != value:
            return SELECTOR_MISMATCH
    if not is_node_ready(node):
        return "node(s) were not ready"
    if node["spec"].get("unschedulable"):
        return "node(s) were unschedulable"
    taint = untolerated(node, pod_spec)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint}}}"
    return None


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending and marked `PodScheduled=False, reason Unschedulable` by the scheduler."""
    status = pod.get("status") or {}
    return status.get("phase") == "Pending" and any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
