"""The materializer: a ModelReplica (as the hub stores it) → the local objects that serve it.

A pure function of the replica dict (docs/design/shapes.md, "ModelReplica"); the agent's runner
diffs its result against what the workload cluster holds. Per replica, in the replica's
namespace:

- one `resource.k8s.io/v1` ResourceClaimTemplate per *claiming* member (one with
  `deviceRequests`): one request per device request, `exactly: {deviceClassName,
  allocationMode: ExactCount, count, selectors: [{cel: {expression}}]}`. DRA gives every pod its
  own claim made from the template, so a pod's demand is exactly its member's requests.
- one `policy/v1` PodDisruptionBudget `<replica>` selecting every pod of the replica
  (`gpufleet.io/replica`), `maxUnavailable: 0` and `unhealthyPodEvictionPolicy: AlwaysAllow`:
  an eviction (`kubectl drain`, a node upgrade) of a Ready pod is refused while the replica
  serves, so a drained node waits for the hub's rollout to place the replacement and delete
  the old replica (with which the agent deletes its budget); a pod that is not Ready serves
  nothing and may go at once.
- per engine, an `apps/v1` Deployment (a Standalone member; `replicas = copies`) or a
  `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet (Leader + Worker; `replicas = copies`,
  `size = 1 + worker.nodes`).

Every pod is pinned to its member's pool by the node label `gpufleet.io/pool`, tolerates
`nvidia.com/gpu:NoSchedule` (the GPU operator's taint), carries a pod-level claim `gpus` made
from its member's template (referenced by the first container, the engine), and the labels
the ReplicaObservation selects on (deployment, replica, engine, member, replica-generation).
Workloads and templates carry deployment/replica/engine labels, so the agent finds what it owns
(`OWNED_SELECTOR`) and deletes what no replica wants any more.

Neither kind of workload ever surges: a Deployment rolls with `maxSurge: 0, maxUnavailable:
1`, a LeaderWorkerSet with the same `rollingUpdateConfiguration`, so a change to a replica's
pods (its steering, say) never needs a GPU beyond the ones the replica holds. A change to what
the deployment runs does not reach an existing replica: the hub rolls the fleet replica by
replica (docs/controller.md, "Rollouts").

Names are deterministic: `<replica>-<engine>` for workloads, `<replica>-<engine>-<role>` for
templates, cut to a DNS label (63) with a 5-hex hash of the full name when too long. No
CPU/memory requests are set (a known limitation carried over from Modelplane).

Given the cluster's policy (`gpufleet.agent.policy`), a replica whose namespace or pod
templates break it is refused whole before anything is made (`PolicyDenied`): no claim
template, no workload, so nothing is half-applied. At the policy's `level: restricted` (the
default) every pod also gets what Pod Security's restricted level requires where its template
left it unset (`runAsNonRoot`, `seccompProfile: RuntimeDefault`, `allowPrivilegeEscalation:
false`, `capabilities.drop: [ALL]`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.agent.pod_security import RESTRICTED, harden
from gpufleet.agent.policy import ClusterPolicy, Violation, check_replica, summary
from gpufleet.agent.steer import Choice, gang_anti_affinity, steer_template
from gpufleet.core import labels
from gpufleet.core.model import Steering
from gpufleet.core.pod_requests import pod_requests
from gpufleet.store.merge import copy_json
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_DISRUPTION_BUDGET,
    RESOURCE_CLAIM_TEMPLATE,
    Obj,
)

#: The pod-level claim name every claiming pod uses.
POD_CLAIM_NAME: Final = "gpus"
#: Selects every workload and template the agent made (anything labelled with a replica).
OWNED_SELECTOR: Final = labels.REPLICA
#: The toleration every fleet pod carries: the GPU operator taints GPU nodes with it.
GPU_TOLERATION: Final[Mapping[str, str]] = {
    "key": "nvidia.com/gpu",
    "operator": "Exists",
    "effect": "NoSchedule",
}

#: Every replica's Deployment: replace a pod in place, never surge (DESIGN.md decision 11).
DEPLOYMENT_STRATEGY: Final[Mapping[str, Any]] = {
    "type": "RollingUpdate",
    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
}
#: Every replica's LeaderWorkerSet: the same, in groups.
LWS_ROLLOUT_STRATEGY: Final[Mapping[str, Any]] = {
    "type": "RollingUpdate",
    "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
}

_MAX_NAME_CHARS: Final = 63
_HASH_CHARS: Final = 5


class ReplicaInvalid(ValueError):
    """The replica dict lacks a field the materializer needs; the message names the field."""


class PolicyDenied(ReplicaInvalid):
    """The replica breaks the cluster's policy; `violations` name every field and rule."""

    def __init__(self, violations: list[Violation]) -> None:
        super().__init__(f"refused: {summary(violations)}")
        self.violations = violations


def dns_name(*parts: str) -> str:
    """`parts` joined by `-`, lowercased; cut to 63 chars with a hash suffix when longer."""
    full = "-".join(p for p in parts if p).lower()
    if len(full) <= _MAX_NAME_CHARS:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_CHARS]
    head = full[: _MAX_NAME_CHARS - _HASH_CHARS - 1].rstrip("-.")
    return f"{head}-{digest}"


def workload_name(replica_name: str, engine: str) -> str:
    return dns_name(replica_name, engine)


def claim_template_name(replica_name: str, engine: str, role: str) -> str:
    return dns_name(replica_name, engine, role)


def materialize(
    replica: Mapping[str, Any],
    policy: ClusterPolicy | None = None,
    steering: Choice | None = None,
    mode: Steering = Steering.PREFERRED,
    *,
    hardened: bool | None = None,
) -> list[Obj]:
    """The desired local objects for one ModelReplica, sorted by (kind, name).

    `hardened` (default: whether `policy` is at `level: restricted`): every pod template gets
    what Pod Security's restricted level requires where the template leaves it unset
    (`gpufleet.agent.pod_security.harden`).

    `steering` (`gpufleet.agent.steer`): per (engine, role), the nodes chosen for the member's
    pods; its pod template is steered to them (`mode`). The claiming members of a gang carry
    the anti-affinity that keeps one copy's claiming pods on distinct nodes, steered or not.

    Raises `ReplicaInvalid` when a required field is missing (the hub's validation should
    make that impossible; the agent skips such a replica and says so), and `PolicyDenied`
    (before making anything) when `policy` is given and the replica breaks it.
    """
    if policy is not None:
        violations = check_replica(replica, policy)
        if violations:
            raise PolicyDenied(violations)
    if hardened is None:
        hardened = policy is not None and policy.level == RESTRICTED
    meta = replica.get("metadata") or {}
    name = _required(meta, "name", "metadata.name")
    namespace = _required(meta, "namespace", "metadata.namespace")
    generation = int(meta.get("generation", 1))
    spec = replica.get("spec") or {}
    deployment = str(spec.get("deploymentName") or meta.get("labels", {}).get(labels.DEPLOYMENT))
    out: list[Obj] = []
    engines = spec.get("engines") or []
    if engines:
        out.append(_disruption_budget(name, namespace, deployment))
    for i, engine in enumerate(engines):
        engine_name = _required(engine, "name", f"spec.engines[{i}].name")
        members = engine.get("members") or []
        by_role = {str(m.get("role", "Standalone")): m for m in members}
        base = {
            labels.DEPLOYMENT: deployment,
            labels.REPLICA: name,
            labels.ENGINE: engine_name,
        }
        copies = int(engine.get("copies", 1))
        templates: dict[str, Obj] = {}
        for j, member in enumerate(members):
            role = str(member.get("role", "Standalone"))
            _required(member, "nodePoolName", f"spec.engines[{i}].members[{j}].nodePoolName")
            dra = [r for r in member.get("deviceRequests") or () if not _is_extended(r)]
            if dra:
                rct = _claim_template(name, namespace, engine_name, role, dra, base)
                out.append(rct)
                templates[role] = rct
        wname = workload_name(name, engine_name)

        made = _Made(name, engine_name, base, generation, templates, steering or {}, mode, hardened)
        if set(by_role) == {"Standalone"}:
            out.append(_deployment(wname, namespace, base, copies, made.pod(by_role, "Standalone")))
        elif set(by_role) == {"Leader", "Worker"}:
            worker_nodes = int((by_role["Worker"].get("worker") or {}).get("nodes", 1))
            out.append(
                _leader_worker_set(
                    wname,
                    namespace,
                    base,
                    copies,
                    worker_nodes,
                    made.pod(by_role, "Leader"),
                    made.pod(by_role, "Worker"),
                )
            )
        else:
            raise ReplicaInvalid(
                f"spec.engines[{i}].members: want one Standalone or a Leader and a Worker, "
                f"got {sorted(by_role)}"
            )
    out.sort(key=lambda o: (o["kind"], o["metadata"]["name"]))
    return out


@dataclass(frozen=True, slots=True)
class _Made:
    """What one engine's pod templates are made with."""

    replica: str
    engine: str
    base: Mapping[str, str]
    generation: int
    templates: Mapping[str, Obj]
    steering: Choice
    mode: Steering
    hardened: bool

    def pod(self, by_role: Mapping[str, Mapping[str, Any]], role: str) -> Obj:
        """The member's pod template: a claiming gang member's keeps off its copy's other
        claiming pods' nodes; steered to the nodes chosen for the member, if any."""
        claim = self.templates.get(role)
        made = _pod_template(by_role[role], role, self.base, self.generation, claim)
        if self.hardened:
            made["spec"] = harden(made["spec"])
        if role != "Standalone" and claim is not None:
            made = gang_anti_affinity(made, self.replica, self.engine)
        nodes = self.steering.get((self.engine, role), ())
        per_copy = (
            int((by_role[role].get("worker") or {}).get("nodes", 1)) if role == "Worker" else 1
        )
        return steer_template(made, nodes, self.mode, per_copy) if nodes else made


def _required(obj: Mapping[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if not value:
        raise ReplicaInvalid(f"{path} is required")
    return str(value)


def _claim_template(
    replica: str,
    namespace: str,
    engine: str,
    role: str,
    device_requests: list[Mapping[str, Any]],
    base: Mapping[str, str],
) -> Obj:
    requests = [
        {
            "name": str(r["name"]),
            "exactly": {
                "deviceClassName": str(r["deviceClassName"]),
                "allocationMode": "ExactCount",
                "count": int(r.get("count", 1)),
                "selectors": [
                    {"cel": {"expression": str(s["cel"])}} for s in r.get("selectors") or []
                ],
            },
        }
        for r in device_requests
    ]
    return {
        "apiVersion": RESOURCE_CLAIM_TEMPLATE.api_version,
        "kind": RESOURCE_CLAIM_TEMPLATE.kind,
        "metadata": {
            "name": claim_template_name(replica, engine, role),
            "namespace": namespace,
            "labels": {**base, labels.MEMBER: role},
        },
        "spec": {
            "metadata": {"labels": {**base, labels.MEMBER: role}},
            "spec": {"devices": {"requests": requests}},
        },
    }


def _pod_template(
    member: Mapping[str, Any],
    role: str,
    base: Mapping[str, str],
    generation: int,
    claim_template: Obj | None,
) -> Obj:
    template = copy_json(dict(member.get("template") or {}))
    tmeta = template.get("metadata") or {}
    spec: dict[str, Any] = dict(template.get("spec") or {})
    pod_labels = {
        **(tmeta.get("labels") or {}),
        **base,
        labels.MEMBER: role,
        labels.REPLICA_GENERATION: str(generation),
    }
    spec["nodeSelector"] = {
        **(spec.get("nodeSelector") or {}),
        labels.POOL: str(member["nodePoolName"]),
    }
    tolerations = list(spec.get("tolerations") or [])
    if dict(GPU_TOLERATION) not in tolerations:
        tolerations.append(dict(GPU_TOLERATION))
    spec["tolerations"] = tolerations
    containers = [dict(c) for c in spec.get("containers") or []]
    if claim_template is not None:
        spec["resourceClaims"] = [
            {
                "name": POD_CLAIM_NAME,
                "resourceClaimTemplateName": claim_template["metadata"]["name"],
            }
        ]
        if containers:
            # The engine (first container) uses the devices; sidecars do not.
            resources = dict(containers[0].get("resources") or {})
            claims = [c for c in resources.get("claims") or [] if c.get("name") != POD_CLAIM_NAME]
            resources["claims"] = [*claims, {"name": POD_CLAIM_NAME}]
            containers[0]["resources"] = resources
    extended = _extended_requests(member)
    if extended and containers:
        # A device-plugin pool's devices: the engine's limits (= its requests) of the resource.
        resources = dict(containers[0].get("resources") or {})
        resources["limits"] = {**(resources.get("limits") or {}), **extended}
        containers[0]["resources"] = resources
    sized = member.get("hostRequests")
    if isinstance(sized, Mapping) and containers:
        containers[0] = with_host_requests(containers[0], spec, sized)
    spec["containers"] = containers
    return {"metadata": {"labels": pod_labels}, "spec": spec}


def _is_extended(request: Mapping[str, Any]) -> bool:
    """A request resolved against a `DevicePlugin` device: its driver is the extended resource
    (a name with a `/`; a DRA driver's never has one)."""
    return "/" in str(request.get("driver") or "")


def _extended_requests(member: Mapping[str, Any]) -> dict[str, str]:
    """The extended resources a member's device-plugin requests add up to, as limits."""
    totals: dict[str, int] = {}
    for r in member.get("deviceRequests") or ():
        if _is_extended(r):
            key = str(r["driver"])
            totals[key] = totals.get(key, 0) + int(r.get("count", 1))
    return {k: str(v) for k, v in sorted(totals.items())}


def with_host_requests(
    container: Mapping[str, Any], spec: Mapping[str, Any], sized: Mapping[str, Any]
) -> dict[str, Any]:
    """`container` (the engine's, the pod's first) with the hub's proportional requests
    (`hostRequests`: millicores, bytes) for each of CPU and memory the pod (`spec`) requests
    none of, so the pod's requests (`pod_requests`) are the figures the hub fitted."""
    explicit = pod_requests(spec)
    requests = dict((container.get("resources") or {}).get("requests") or {})
    cpu, memory = sized.get("milliCpu"), sized.get("memory")
    if explicit[0] == 0 and isinstance(cpu, int) and cpu > 0:
        requests["cpu"] = f"{cpu}m"
    if explicit[1] == 0 and isinstance(memory, int) and memory > 0:
        requests["memory"] = str(memory)
    resources = {**(container.get("resources") or {}), "requests": requests}
    return {**container, "resources": resources}


def _disruption_budget(replica: str, namespace: str, deployment: str) -> Obj:
    """The replica's PodDisruptionBudget: no Ready pod of it is evicted while it serves (the
    hub replaces the replica first); a pod that is not Ready may be."""
    return {
        "apiVersion": POD_DISRUPTION_BUDGET.api_version,
        "kind": POD_DISRUPTION_BUDGET.kind,
        "metadata": {
            "name": dns_name(replica),
            "namespace": namespace,
            "labels": {labels.DEPLOYMENT: deployment, labels.REPLICA: replica},
        },
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {labels.REPLICA: replica}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _deployment(name: str, namespace: str, base: Mapping[str, str], copies: int, pod: Obj) -> Obj:
    return {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(base)},
        "spec": {
            "replicas": copies,
            "selector": {
                "matchLabels": {
                    labels.REPLICA: base[labels.REPLICA],
                    labels.ENGINE: base[labels.ENGINE],
                }
            },
            # No surge pod: a cluster never needs a GPU that does not exist. The replica's
            # template does not change in place (the hub rolls by making a new replica).
            "strategy": copy_json(dict(DEPLOYMENT_STRATEGY)),
            "template": pod,
        },
    }


def _leader_worker_set(
    name: str,
    namespace: str,
    base: Mapping[str, str],
    copies: int,
    worker_nodes: int,
    leader: Obj,
    worker: Obj,
) -> Obj:
    return {
        "apiVersion": LEADER_WORKER_SET.api_version,
        "kind": LEADER_WORKER_SET.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(base)},
        "spec": {
            "replicas": copies,
            "rolloutStrategy": copy_json(dict(LWS_ROLLOUT_STRATEGY)),
            "leaderWorkerTemplate": {
                "size": 1 + worker_nodes,
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
