"""What the scheduling decision means as objects: ModelReplica bodies and deployment status.

Pure functions. A replica body is a function of its `Placement` and its deployment's manifest
(docs/design/shapes.md, "ModelReplica"): the pinned cluster and pools and the resolved device
requests come from the placement, the pod templates are copied from the deployment's members
(matched by engine name and role). The replica lives in its cluster's hub namespace
(`cluster_namespace`, the only namespace that cluster's agent may read), named
`<deployment namespace>.<replica>` (`replica_object_name`). An owner reference cannot point
to another namespace (the garbage collector would take the owner as absent and delete the
replica), so labels tie it to its deployment: `gpufleet.io/deployment-namespace`,
`gpufleet.io/deployment` and `gpufleet.io/deployment-uid`; the controller deletes the replicas
of a deployment that is gone (`orphaned`, docs/controller.md "Replica garbage collection").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from gpufleet.api import FieldError, ModelReplica, metadata_valid
from gpufleet.api.convert import DEFAULT_NAMESPACE, replica_index
from gpufleet.api.names import (
    cluster_namespace,
    is_cluster_name,
    replica_object_name,
    replica_origin,
    replica_origin_of,
)
from gpufleet.controller.conditions import Obj, ReadObj, condition, set_condition
from gpufleet.core import labels
from gpufleet.core.decision import Condition, Placement
from gpufleet.core.model import (
    ClusterName,
    DeploymentKey,
    DriverName,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    ReplicaStatus,
    ResolvedRequest,
)
from gpufleet.core.pod_requests import template_requests
from gpufleet.store import copy_json, copy_obj

REPLICAS_SCHEDULED: Final = "ReplicasScheduled"
#: The status keys of a ModelDeployment the controller writes.
DEPLOYMENT_OWNED: Final = (
    "observedGeneration",
    "replicas",
    "conditions",
    "revision",
    "updatedReplicas",
)
#: The longest condition message the controller writes (the API allows 32 KiB).
MAX_MESSAGE_CHARS: Final = 4000


class InvalidReason(StrEnum):
    """`ReplicasScheduled=False` reasons of a deployment the controller cannot read."""

    #: Some field is invalid; the message lists every error.
    INVALID_SPEC = "InvalidSpec"
    #: Every error is in a member's `nodeSelector` (typically CEL that does not compile).
    INVALID_NODE_SELECTOR = "InvalidNodeSelector"


def replica_labels(placement: Placement) -> dict[str, str]:
    """The labels that say which deployment, cluster and index a replica is (its deployment's
    uid aside: `uid_label`)."""
    return {
        labels.DEPLOYMENT_NAMESPACE: placement.deployment.namespace,
        labels.DEPLOYMENT: placement.deployment.name,
        labels.CLUSTER: placement.cluster,
        labels.REPLICA_INDEX: str(placement.index),
    }


def uid_label(deployment: ReadObj) -> dict[str, str]:
    """`gpufleet.io/deployment-uid` of the replicas the controller creates for `deployment`."""
    uid = deployment["metadata"].get("uid")
    return {labels.DEPLOYMENT_UID: str(uid)} if uid else {}


def replica_key(cluster: str, deployment_namespace: str, replica: str) -> tuple[str, str] | None:
    """The hub (namespace, name) of replica `replica` of a deployment in
    `deployment_namespace`, placed on cluster `cluster`; None when the cluster's name names no
    hub namespace (`CLUSTER_NAME_RULE`)."""
    if not is_cluster_name(cluster):
        return None
    return (cluster_namespace(cluster), replica_object_name(deployment_namespace, replica))


def deployment_of(replica: ReadObj) -> tuple[str, str]:
    """The (namespace, name) of the deployment `replica` belongs to."""
    namespace, _ = replica_origin_of(replica["metadata"])
    return namespace, str((replica.get("spec") or {}).get("deploymentName"))


class Orphaned(StrEnum):
    """Why the controller deletes a replica no decision names (`orphaned`)."""

    #: Its deployment is gone, being deleted, or was re-created (another uid).
    DEPLOYMENT_DELETED = "DeploymentDeleted"
    #: It is not in its cluster's hub namespace (written by hand, or before per-cluster
    #: namespaces): its cluster's agent cannot read it; scheduling places it again there.
    MISPLACED = "Misplaced"


def orphaned(replica: ReadObj, deployments: Mapping[tuple[str, str], ReadObj]) -> Orphaned | None:
    """Why `replica` is to be deleted, given the deployments that exist (not being deleted) by
    (namespace, name); None when it stays. A replica in its cluster's namespace without the
    `gpufleet.io/deployment-namespace` label was not written by the controller: it stays."""
    meta = replica["metadata"]
    cluster = str((replica.get("spec") or {}).get("clusterName", ""))
    if not is_cluster_name(cluster) or meta.get("namespace") != cluster_namespace(cluster):
        return Orphaned.MISPLACED
    have: Mapping[str, str] = meta.get("labels") or {}
    if not have.get(labels.DEPLOYMENT_NAMESPACE):
        return None
    deployment = deployments.get(deployment_of(replica))
    if deployment is None:
        return Orphaned.DEPLOYMENT_DELETED
    uid = have.get(labels.DEPLOYMENT_UID)
    if uid and deployment["metadata"].get("uid") and uid != deployment["metadata"]["uid"]:
        return Orphaned.DEPLOYMENT_DELETED
    return None


class OrphanWatch:
    """Which replicas `orphaned` must judge again: those whose object changed, and those of a
    deployment (by `deployment_of`) whose entry changed (came, went, began deleting, was
    re-created with another uid). `orphaned` reads nothing else, so a replica judged to stay
    stays until one of these moves: the replicas `take` returns, judged, find what a judgement
    of every replica finds (tests/controller/test_orphan_watch.py holds it to that full scan).

    An index, not a cache: keyed by the replica's (namespace, name) and its deployment's
    (namespace, name), both read from the object it was last given."""

    __slots__ = ("_by_owner", "_due", "_owner")

    def __init__(self) -> None:
        #: Per replica present, its deployment; per deployment, its replicas present.
        self._owner: dict[tuple[str, str], tuple[str, str]] = {}
        self._by_owner: dict[tuple[str, str], set[tuple[str, str]]] = {}
        #: The replicas to judge again.
        self._due: set[tuple[str, str]] = set()

    def replica(self, key: tuple[str, str], obj: ReadObj | None) -> None:
        """The replica at `key` is now `obj` (None: gone, or being deleted)."""
        owner = self._owner.pop(key, None)
        if owner is not None:
            mine = self._by_owner[owner]
            mine.discard(key)
            if not mine:
                del self._by_owner[owner]
        if obj is None:
            self._due.discard(key)
            return
        owner = deployment_of(obj)
        self._owner[key] = owner
        self._by_owner.setdefault(owner, set()).add(key)
        self._due.add(key)

    def deployment(self, key: tuple[str, str]) -> None:
        """The deployment at `key` changed: judge its replicas again."""
        self._due |= self._by_owner.get(key, set())

    def everything(self) -> None:
        """Judge every replica again."""
        self._due |= self._owner.keys()

    def owner(self, key: tuple[str, str]) -> tuple[str, str] | None:
        """The deployment of the replica at `key` (None: no such replica)."""
        return self._owner.get(key)

    def take(self) -> list[tuple[str, str]]:
        """The replicas to judge again, in key order; none is due afterwards."""
        due, self._due = self._due, set()
        return sorted(due)


def _templates(deployment: ReadObj) -> dict[tuple[str, str], Any]:
    engines = deployment["spec"]["template"]["spec"]["engines"]
    return {
        (engine["name"], member.get("role", "Standalone")): member.get("template") or {}
        for engine in engines
        for member in engine["members"]
    }


def replica_spec(placement: Placement, deployment: ReadObj) -> Obj:
    """The ModelReplica spec for a placement of `deployment` (shapes.md)."""
    templates = _templates(deployment)
    serving = deployment["spec"]["template"]["spec"].get("serving") or {}
    engines: list[Obj] = []
    for engine in placement.engines:
        members: list[Obj] = []
        for member in engine.members:
            body: Obj = {"role": member.role.value}
            if member.role.value == "Worker":
                body["worker"] = {"nodes": member.worker_nodes}
            body["nodePoolName"] = member.pool
            if member.requests:
                body["deviceRequests"] = [
                    {
                        "name": r.name,
                        "deviceClassName": r.device_class_name,
                        **({"driver": r.driver} if r.driver else {}),
                        "count": r.count,
                        "selectors": [{"cel": s} for s in r.selectors],
                    }
                    for r in member.requests
                ]
            body["template"] = copy_json(templates.get((engine.name, member.role.value), {}))
            if member.host_requests is not None:
                cpu, memory = member.host_requests
                body["hostRequests"] = {"milliCpu": cpu, "memory": memory}
            members.append(body)
        engine_body: Obj = {"name": engine.name, "copies": engine.copies}
        if engine.phase is not None:
            engine_body["phase"] = engine.phase.value
        engine_body["members"] = members
        engines.append(engine_body)
    return {
        "deploymentName": placement.deployment.name,
        "clusterName": placement.cluster,
        "serving": {"mode": serving.get("mode", "Unified")},
        "engines": engines,
    }


def replica_body(placement: Placement, deployment: ReadObj, revision: str = "") -> Obj:
    """A new ModelReplica for `placement`, in its cluster's hub namespace, labelled with
    `deployment` and the template `revision` it runs (raises `ClusterNameError` for a cluster
    name that names no namespace)."""
    namespace = cluster_namespace(placement.cluster)
    name = replica_object_name(placement.deployment.namespace, placement.name)
    return {
        "apiVersion": deployment["apiVersion"],
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **replica_labels(placement),
                **uid_label(deployment),
                **revision_label(revision),
            },
        },
        "spec": replica_spec(placement, deployment),
    }


#: What the hub adds to the metadata of an object it creates.
_CREATED_META: Final = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp"})


def placed_replica(placement: Placement, body: ReadObj, written: ReadObj) -> Replica | None:
    """What the index reads of `written`, the hub's copy of `body` (`replica_body` of
    `placement`) as its create returned it, built from the placement instead of parsed: the
    core's Replica (signed with its uid and resourceVersion), the same as `read_replica`
    (api `replica_from_manifest` of the parsed object) gives. None, and the object is parsed,
    unless the hub kept the body as built, added only its own valid metadata and no status.
    The body is built from validated parts (the deployment's spec, the pools' devices), so it
    validates; tests/controller/test_placed_replicas.py holds this to `read_replica` on every
    replica the controller creates in simulated runs."""
    meta, built = written.get("metadata"), body["metadata"]
    if (
        written.keys() != body.keys()
        or written.get("spec") != body["spec"]
        or written.get("apiVersion") != body["apiVersion"]
        or written.get("kind") != body["kind"]
        or not isinstance(meta, Mapping)
        or any(meta.get(k) != v for k, v in built.items())
        or not meta.keys() - built.keys() <= _CREATED_META
        or not metadata_valid(ModelReplica, meta)
    ):
        return None
    labelled: Mapping[str, str] = built["labels"]
    namespace, name = replica_origin(
        meta.get("namespace") or DEFAULT_NAMESPACE,
        meta["name"],
        labelled.get(labels.DEPLOYMENT_NAMESPACE),
    )
    spec = body["spec"]
    engines = []
    for engine, engine_body in zip(placement.engines, spec["engines"], strict=True):
        members = []
        for member, member_body in zip(engine.members, engine_body["members"], strict=True):
            milli_cpu, memory = template_requests(member_body["template"])
            sized = member_body.get("hostRequests")
            if sized is not None:  # proportional: the figures the hub sized
                milli_cpu, memory = sized["milliCpu"], sized["memory"]
            requests = tuple(
                ResolvedRequest(
                    name=r.name,
                    device_class_name=r.device_class_name,
                    count=r.count,
                    selectors=tuple(r.selectors),
                    driver=DriverName(r.driver or ""),
                )
                for r in member.requests
            )
            members.append(
                ReplicaMember(
                    role=member.role,
                    pool=member.pool,
                    worker_nodes=member.worker_nodes if "worker" in member_body else 1,
                    requests=requests,
                    milli_cpu=milli_cpu,
                    memory=memory,
                    proportional=sized is not None,
                )
            )
        engines.append(ReplicaEngine(engine.name, tuple(members), engine.copies, engine.phase))
    return Replica(
        name=name,
        deployment=DeploymentKey(namespace, spec["deploymentName"]),
        cluster=ClusterName(spec["clusterName"]),
        index=replica_index(labelled),
        engines=tuple(engines),
        generation=meta.get("generation") or 1,
        status=ReplicaStatus(),
        revision=labelled.get(labels.REVISION, ""),
        signature=(meta.get("uid"), meta.get("resourceVersion")),
    )


def revision_label(revision: str) -> dict[str, str]:
    """`gpufleet.io/revision` of a replica made for template revision `revision` ("": none)."""
    return {labels.REVISION: revision} if revision else {}


def is_old_revision(replica: ReadObj, revision: str) -> bool:
    """Whether `replica` was made for another template revision than `revision`: a rollout
    replaces it, and until then it is left as it runs (never re-stamped). A replica without
    the label was made before rollouts: it counts as current."""
    have = (replica.get("metadata") or {}).get("labels") or {}
    made_for = have.get(labels.REVISION)
    return bool(revision and made_for and made_for != revision)


def restamped(
    current: ReadObj, placement: Placement, deployment: ReadObj, revision: str = ""
) -> Obj | None:
    """`current` with the spec and labels the placement wants; None when it has them.

    Labels other writers added are kept, and so is the deployment uid it was created with
    (a replica of another uid is deleted, not adopted: `orphaned`).
    """
    want_spec = replica_spec(placement, deployment)
    meta = current.get("metadata") or {}
    have_labels: Mapping[str, str] = meta.get("labels") or {}
    want_labels = {**replica_labels(placement), **revision_label(revision)}
    is_labelled = all(have_labels.get(k) == v for k, v in want_labels.items())
    if current.get("spec") == want_spec and is_labelled:
        return None
    updated = copy_obj(current)
    updated["spec"] = want_spec
    updated["metadata"]["labels"] = {**have_labels, **want_labels}
    return updated


def invalid_condition(errors: Iterable[FieldError]) -> Obj:
    """`ReplicasScheduled=False` for a deployment that does not validate, listing every error."""
    errors = list(errors)
    reason = (
        InvalidReason.INVALID_NODE_SELECTOR
        if errors and all("nodeSelector" in e.path for e in errors)
        else InvalidReason.INVALID_SPEC
    )
    message = "invalid spec, its replicas are left as they are: " + "; ".join(
        str(e) for e in errors
    )
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return condition(REPLICAS_SCHEDULED, "False", reason.value, message)


def decision_condition(decided: Condition) -> Obj:
    message = decided.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return condition(decided.type, decided.status, decided.reason, message)


def deployment_status(
    deployment: ReadObj,
    scheduled: ReadObj,
    total: int,
    ready: int,
    now: datetime,
    running: ReadObj | None = None,
    rollout: tuple[str, int, ReadObj] | None = None,
) -> Obj:
    """The desired `DEPLOYMENT_OWNED` keys of a deployment's status.

    `replicas.total` counts the deployment's replicas that exist after this step's writes;
    `replicas.ready` those whose `ModelPodsScheduled` is True (every live pod of the current
    replica generation has its devices allocated; it says nothing about the model serving);
    `replicas.pending` the others: placed, not all pods scheduled. `running` is the
    `ReplicasRunning` condition (None: left as it is). `rollout` is (the template revision,
    replicas placed for it, the `Progressing` condition); None: left as they are.
    """
    current: Obj = deployment.get("status") or {}
    generation = deployment["metadata"].get("generation")
    conditions = set_condition(list(current.get("conditions") or []), scheduled, now, generation)
    if running is not None:
        conditions = set_condition(conditions, running, now, generation)
    if rollout is not None:
        conditions = set_condition(conditions, rollout[2], now, generation)
    desired: Obj = {
        "replicas": {"total": total, "ready": ready, "pending": max(0, total - ready)},
        "conditions": conditions,
    }
    if rollout is not None:
        desired["revision"], desired["updatedReplicas"] = rollout[0], rollout[1]
    else:
        for key in ("revision", "updatedReplicas"):
            if key in current:
                desired[key] = current[key]
    if generation is not None:
        desired["observedGeneration"] = generation
    return desired
