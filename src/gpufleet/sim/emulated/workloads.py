"""The emulated workload controllers of one cluster: the Deployment controller, the
LeaderWorkerSet controller and the garbage collector that deletes the pods they no longer own
(what each does: the cluster's module docstring, `gpufleet.sim.emulated.cluster`).

Each keeps its own work queue, fed by the cluster's `ChangeFeed`, and its own memory. A
workload controller visits only the workloads that, or whose pods, changed since its last pass,
and skips one whose inputs (`_inputs`) are those of its previous pass; `visit_all=True` makes
every pass visit every object (the reference the queues are tested against).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.informer import ChangeFeed, WorkloadIndex, all_keys
from gpufleet.sim.emulated.objects import (
    KUBELET_FINALIZER,
    LWS_GROUP_INDEX,
    LWS_GROUP_KEY,
    LWS_NAME,
    LWS_TEMPLATE_HASH,
    LWS_WORKER_INDEX,
    POD_TEMPLATE_HASH,
    ObjKey,
    any_alive,
    is_alive,
    is_ready,
    key_of,
    owner_ref,
    scale_down_order,
    template_hash_of,
)
from gpufleet.sim.emulated.sim_store import BY_OWNER, SimStore
from gpufleet.sim.emulated.workload_rollout import deployment_strategy, lws_strategy
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    Change,
    ChangeType,
    Conflict,
    Kind,
    NotFound,
    Obj,
    StoreError,
)

_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"


# --- writes the components share -------------------------------------------------------


def delete(store: SimStore, kind: Kind, obj: Obj) -> None:
    with contextlib.suppress(NotFound):
        store.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))


def delete_pod(store: SimStore, pod: Obj) -> None:
    if pod["metadata"].get("deletionTimestamp"):
        return
    delete(store, POD, pod)


def finish(store: SimStore, pod: Obj) -> None:
    """The kubelet is done with a deleted pod: its finalizer goes, and with it the pod."""
    meta = pod["metadata"]
    try:
        current = store.peek_one(POD, meta["name"], meta["namespace"])
        if current is None:
            return
        finalizers = [
            f for f in current["metadata"].get("finalizers") or [] if f != KUBELET_FINALIZER
        ]
        store.update_shared(
            {**current, "metadata": {**current["metadata"], "finalizers": finalizers}}
        )
    except (Conflict, NotFound):
        return


def force_remove(store: SimStore, pod: Obj) -> None:
    delete(store, POD, pod)
    finish(store, pod)


# --- garbage collector ----------------------------------------------------------------


class GarbageCollector:
    """Deletes the pods none of whose owners exists (owners of a kind the sim runs: a
    DaemonSet's pod is left alone). A pod becomes such an orphan only when
    it is written or an owner of it is deleted, so only those pods are looked at."""

    def __init__(
        self, store: SimStore, feed: ChangeFeed, index: WorkloadIndex, visit_all: bool
    ) -> None:
        self.store = store
        self._feed = feed
        self._index = index
        self._visit_all = visit_all
        #: Pods written, and workloads deleted, since its last pass.
        self._written_pods: set[ObjKey] = set()
        self._gone_workloads: set[str] = set()
        feed.watch(POD, self._pod_changed)
        feed.watch(DEPLOYMENT, self._workload_changed)
        feed.watch(LEADER_WORKER_SET, self._workload_changed)

    def _pod_changed(self, change: Change) -> None:
        meta = change.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if change.type is ChangeType.DELETED:
            self._written_pods.discard(key)
        else:
            self._written_pods.add(key)

    def _workload_changed(self, change: Change) -> None:
        if change.type is ChangeType.DELETED:
            self._gone_workloads.add(change.obj["metadata"]["uid"])

    def run(self) -> None:
        self._feed.sync()
        written, self._written_pods = self._written_pods, set()
        gone, self._gone_workloads = self._gone_workloads, set()
        if self._visit_all:
            written = all_keys(self.store, POD)
        for uid in gone:
            written.update(key_of(p) for p in self.store.peek_indexed(POD, BY_OWNER, uid))
        if not written:
            return
        deployments = self._index.keys(DEPLOYMENT)
        sets = self._index.keys(LEADER_WORKER_SET)
        for key in sorted(written):
            pod = self.store.peek_one(POD, key[1], key[0])
            if pod is None:
                continue
            # The sim runs no DaemonSet controller: a DaemonSet's pod (addHostPod) stays.
            refs = [
                r
                for r in pod["metadata"].get("ownerReferences") or []
                if r.get("kind") != "DaemonSet"
            ]
            if refs and not any(r["uid"] in deployments or r["uid"] in sets for r in refs):
                delete_pod(self.store, pod)


# --- workload controllers ---------------------------------------------------------------


class WorkloadController:
    """What the Deployment and LeaderWorkerSet controllers share: the queue of dirty
    workloads, the inputs each read on its last pass, the template hashes, pod creation."""

    kind: ClassVar[Kind]

    def __init__(
        self,
        store: SimStore,
        loop: EventLoop,
        feed: ChangeFeed,
        index: WorkloadIndex,
        visit_all: bool,
    ) -> None:
        self.store = store
        self.loop = loop
        self._feed = feed
        self._index = index
        self._visit_all = visit_all
        #: Workloads whose object or pods changed since the last pass.
        self._dirty: set[str] = set()
        # Per workload uid, what the controller read on its last pass (see `_inputs`); a
        # deleted workload's entries go when the feed hands its deletion.
        self._seen: dict[str, _Inputs] = {}
        #: Per workload uid, the generation its template hash was computed at, and the hash.
        self._template_hashes: dict[str, tuple[int, str]] = {}
        feed.watch(self.kind, self._workload_changed)
        index.on_owners(self._owners_changed)

    def _workload_changed(self, change: Change) -> None:
        uid = change.obj["metadata"]["uid"]
        self._dirty.add(uid)
        if change.type is ChangeType.DELETED:
            self._seen.pop(uid, None)
            self._template_hashes.pop(uid, None)

    def _owners_changed(self, uids: Iterable[str]) -> None:
        self._dirty.update(uids)

    def run(self) -> None:
        self._feed.sync()
        dirty, self._dirty = self._dirty, set()
        for obj in self._workloads(dirty):
            meta = obj["metadata"]
            pods = self.store.owned_pods(meta["uid"], meta["namespace"])
            inputs = _inputs(obj, pods)
            if self._seen.get(meta["uid"]) != inputs:
                self.reconcile(obj, pods)
            self._seen[meta["uid"]] = inputs

    def reconcile(self, obj: Obj, pods: list[Obj]) -> None:
        raise NotImplementedError

    def _workloads(self, dirty: set[str]) -> list[Obj]:
        """The workloads of `kind` among the uids in `dirty`, in `peek` order (every one with
        `visit_all`). Any other has the inputs its controller last read (`_inputs`): neither
        it nor a pod of it changed since."""
        if self._visit_all:
            return self.store.peek(self.kind)
        keys = self._index.keys(self.kind)
        found: list[Obj] = []
        for key in sorted(keys[uid] for uid in dirty if uid in keys):
            obj = self.store.peek_one(self.kind, key[1], key[0])
            if obj is not None:
                found.append(obj)
        return found

    def _template_hash(self, meta: Obj, template: Obj) -> str:
        """`template_hash_of(template)`, remembered per workload for its `generation`: the
        template is part of the spec, and the API server moves the generation with every
        change of the spec (a status write leaves it)."""
        uid, generation = meta["uid"], int(meta.get("generation", 1))
        cached = self._template_hashes.get(uid)
        if cached is not None and cached[0] == generation:
            return cached[1]
        thash = template_hash_of(template)
        self._template_hashes[uid] = (generation, thash)
        return thash

    def _create_pod_named(
        self, owner: Obj, template: Obj, name: str, extra_labels: Mapping[str, str]
    ) -> Obj:
        tmeta = template.get("metadata") or {}
        return self.store.create_shared(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": owner["metadata"]["namespace"],
                    "labels": {**(tmeta.get("labels") or {}), **extra_labels},
                    **(
                        {"annotations": dict(tmeta["annotations"])}
                        if tmeta.get("annotations")
                        else {}
                    ),
                    "ownerReferences": [owner_ref(owner, owner["apiVersion"], owner["kind"])],
                    "finalizers": [KUBELET_FINALIZER],
                },
                "spec": json.loads(json.dumps(template.get("spec") or {})),
                "status": {"phase": "Pending"},
            }
        )

    def _delete_pod(self, pod: Obj) -> None:
        delete_pod(self.store, pod)

    def _patch_status_if_changed(self, obj: Obj, status: Mapping[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        kind = DEPLOYMENT if obj["kind"] == "Deployment" else LEADER_WORKER_SET
        with contextlib.suppress(StoreError):
            self.store.patch_status_shared(
                kind, obj["metadata"]["name"], obj["metadata"]["namespace"], status
            )


class DeploymentController(WorkloadController):
    """Keeps `replicas` pods of the current template by the Deployment's `spec.strategy`."""

    kind = DEPLOYMENT

    def reconcile(self, obj: Obj, pods: list[Obj]) -> None:
        self._reconcile_deployment(obj, pods)

    def _reconcile_deployment(self, dep: Obj, pods: list[Obj]) -> None:
        meta, spec = dep["metadata"], dep["spec"]
        replicas = int(spec.get("replicas", 1))
        template = spec["template"]
        thash = self._template_hash(meta, template)
        for pod in pods:
            if pod["status"].get("phase") in ("Failed", "Succeeded"):
                self._delete_pod(pod)
        alive = [p for p in pods if is_alive(p)]
        new = [p for p in alive if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) == thash]
        old = [p for p in alive if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) != thash]
        strategy = deployment_strategy(spec, replicas)
        surge, unavailable = strategy.max_surge, strategy.max_unavailable
        if strategy.is_recreate and self._recreating(dep, pods, thash):
            return
        # Scale the new set down first (unbound pods first, then newest).
        excess = len(new) - replicas
        if excess > 0:
            for pod in sorted(new, key=scale_down_order)[:excess]:
                self._delete_pod(pod)
                new.remove(pod)
        while len(new) < replicas and len(new) + len(old) < replicas + surge:
            new.append(self._create_pod(dep, template, thash))
        ready_new = sum(1 for p in new if is_ready(p))
        ready_old = sum(1 for p in old if is_ready(p))
        for pod in sorted(old, key=scale_down_order):
            if not is_ready(pod):
                self._delete_pod(pod)
            elif ready_new + ready_old - 1 >= replicas - unavailable or replicas == 0:
                self._delete_pod(pod)
                ready_old -= 1
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(new) + len(old),
            "updatedReplicas": len(new),
            "readyReplicas": ready_new + ready_old,
        }
        self._patch_status_if_changed(dep, status)

    def _recreating(self, dep: Obj, pods: list[Obj], thash: str) -> bool:
        """Recreate: while a pod of another template is left (terminating ones too), delete
        the live ones and create nothing; whether that is so."""
        stale = [p for p in pods if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) != thash]
        if not stale:
            return False
        for pod in stale:
            if is_alive(pod):
                self._delete_pod(pod)
        status = {
            "observedGeneration": dep["metadata"].get("generation", 1),
            "replicas": 0,
            "updatedReplicas": 0,
            "readyReplicas": 0,
        }
        self._patch_status_if_changed(dep, status)
        return True

    def _create_pod(self, owner: Obj, template: Obj, thash: str) -> Obj:
        name = f"{owner['metadata']['name']}-{thash}-{self._suffix()}"
        return self._create_pod_named(owner, template, name, {POD_TEMPLATE_HASH: thash})

    def _suffix(self) -> str:
        return "".join(self.loop.rng.choice(_NAME_CHARS) for _ in range(5))


class LwsController(WorkloadController):
    """Keeps `replicas` groups of `size` pods of a LeaderWorkerSet."""

    kind = LEADER_WORKER_SET

    def reconcile(self, obj: Obj, pods: list[Obj]) -> None:
        self._reconcile_lws(obj, pods)

    def _reconcile_lws(self, lws: Obj, owned: list[Obj]) -> None:
        meta, spec = lws["metadata"], lws["spec"]
        replicas = int(spec.get("replicas", 1))
        lwt = spec["leaderWorkerTemplate"]
        size = int(lwt.get("size", 1))
        thash = self._template_hash(meta, lwt)
        strategy = lws_strategy(spec, replicas)
        groups: dict[int, list[Obj]] = defaultdict(list)
        for pod in owned:
            groups[int(pod["metadata"]["labels"][LWS_GROUP_INDEX])].append(pod)

        def is_whole(g: int) -> bool:
            pods = groups.get(g, [])
            return len(pods) == size and all(is_ready(p) for p in pods)

        def is_stale(g: int) -> bool:
            return any(p["metadata"]["labels"].get(LWS_TEMPLATE_HASH) != thash for p in groups[g])

        # While a group below `replicas` is of another template, up to maxSurge extra groups
        # of the new one (past `replicas`); a group goes only while maxUnavailable allows.
        # Surge groups stay until every group below `replicas` is new, whole and ready.
        is_rolling = any(is_stale(g) for g in groups if g < replicas) or (
            any(g >= replicas for g in groups) and not all(is_whole(g) for g in range(replicas))
        )
        limit = replicas + (strategy.max_surge if is_rolling else 0)
        available = sum(1 for g in groups if g < limit and is_whole(g))
        floor = replicas - strategy.max_unavailable
        for g in sorted(groups):
            pods = groups[g]
            broken = len(pods) < size or any(
                p["status"].get("phase") in ("Failed", "Succeeded") or not is_alive(p) for p in pods
            )
            if g >= limit or (broken and any_alive(pods)):
                for p in pods:
                    self._delete_pod(p)
                available -= g < limit and is_whole(g)
            elif is_stale(g) and g < replicas and (not is_whole(g) or available - 1 >= floor):
                for p in pods:
                    self._delete_pod(p)
                available -= is_whole(g)
        ready = 0
        for g in range(limit):
            if groups.get(g):
                ready += is_whole(g)
                continue
            for w in range(size):
                template = lwt["leaderTemplate"] if w == 0 else lwt["workerTemplate"]
                self._create_lws_pod(lws, template, thash, g, w)
        status = {"replicas": len(groups), "readyReplicas": ready}
        self._patch_status_if_changed(lws, status)

    def _create_lws_pod(self, lws: Obj, template: Obj, thash: str, group: int, worker: int) -> Obj:
        lws_name = lws["metadata"]["name"]
        name = f"{lws_name}-{group}" if worker == 0 else f"{lws_name}-{group}-{worker}"
        group_key = hashlib.sha256(f"{lws['metadata']['uid']}/{group}".encode()).hexdigest()[:40]
        extra = {
            LWS_NAME: lws_name,
            LWS_GROUP_INDEX: str(group),
            LWS_WORKER_INDEX: str(worker),
            LWS_GROUP_KEY: group_key,
            LWS_TEMPLATE_HASH: thash,
        }
        return self._create_pod_named(lws, template, name, extra)


#: A workload controller's inputs for one workload: the resourceVersions of the workload and of
#: its pods. Versions are unique in a store, so equal inputs mean the same objects unchanged.
_Inputs = tuple[str, tuple[str, ...]]


def _inputs(workload: Obj, pods: list[Obj]) -> _Inputs:
    """What a workload controller's pass over `workload` reads. A pass is a function of these
    alone (no clock; the random pod-name suffix is drawn only when it creates a pod, which
    changes them), so a pass that would see the inputs of a previous one whose writes changed
    nothing would write nothing either: it can be skipped."""
    versions = tuple(p["metadata"]["resourceVersion"] for p in pods)
    return (workload["metadata"]["resourceVersion"], versions)
