"""One emulated workload cluster: a `MemoryStore` with Kubernetes-shaped objects and the
components that act on them, driven by the simulation's event loop.

The store holds the same object shapes as a real cluster (Nodes, `resource.k8s.io/v1`
ResourceSlices and ResourceClaims, Pods, Deployments, LeaderWorkerSets), so the real agent reads
it exactly as it reads a real API server. Components, run every `tick_s` in a fixed order
(garbage collector, workload controllers, resourceclaim controller, DRA driver, kube-scheduler,
kubelet), each reading the store and writing through it:

- **kube-scheduler** binds Pending pods, oldest first: a node must carry the pod's nodeSelector
  labels, be Ready and schedulable, tolerate-check every NoSchedule/NoExecute taint, and have
  devices for the pod's claim (`gpufleet.sim.emulated.dra`). Node choice per cluster: Spread (the
  default profile's scoring, `gpufleet.sim.emulated.kube_scoring`) or Pack (fewest free devices that
  fit, ties by name); required node affinity and required pod anti-affinity filter nodes (the
  agent writes both: steering, and the claiming pods of one gang copy on distinct nodes). Pods
  are scheduled one by one: a group is not scheduled all-or-nothing, so part of a gang can bind
  while the rest stays Pending (what a real cluster with no gang scheduler does). It writes the claim's
  `status.allocation` and `reservedFor`, then the pod's `spec.nodeName`; an unschedulable pod
  gets `PodScheduled=False, reason Unschedulable` (what cluster-autoscaler looks for).
- **resourceclaim controller** makes claim `<pod>-<claim>` from the pod's template, owned by the
  pod, records it in `status.resourceClaimStatuses`, and deletes (releases) it once the pod is
  gone.
- **kubelet** starts a bound pod after `pod_start_delay_s` (phase Running, Ready) and finishes a
  deleted pod after `termination_grace_s` (pods carry a finalizer so a delete sets
  `deletionTimestamp` first, as the API server does for graceful deletion). Pods on a NotReady
  node are removed at once (as pod GC force-deletes pods of lost nodes).
- **Deployment controller** keeps `replicas` pods of the current template by its
  `spec.strategy` (RollingUpdate with `maxSurge`/`maxUnavailable`, default 25% each, rounded as
  Kubernetes rounds, or Recreate: `gpufleet.sim.emulated.workload_rollout`), replacing failed ones;
  ReplicaSets are not modelled (pods carry `pod-template-hash`). **LeaderWorkerSet
  controller** keeps `replicas` groups of `size` pods (`<lws>-<g>` leader, `<lws>-<g>-<w>`
  workers); a group that loses a pod is recreated whole (RecreateGroupOnPodRestart); template
  changes roll by `rolloutStrategy.rollingUpdateConfiguration` (maxSurge default 0, surge
  groups past `replicas`; maxUnavailable default 1). **Garbage collector** deletes pods whose
  owning workload is gone.
- **DRA driver** publishes one ResourceSlice per node and driver (`gpu-0..gpu-N-1`, attributes and
  capacity of the pool's class) `dra_publish_delay_s` after the node appears; slices go with the
  node.
- **cluster-autoscaler** (every `autoscaler_scan_s`): for unschedulable pods that would fit an
  empty node of their pool, adds nodes (after `scale_up_delay_s`) up to `maxNodeCount`,
  counting nodes on the way; removes nodes idle for `scale_down_idle_s` down to
  `minNodeCount` (only in pools with a `maxNodeCount`: a fixed-size pool has no autoscaled node
  group behind it). Under stockout it adds nothing and records `NotTriggerScaleUp` events.
- Operations for scenarios: other tenants' claims, cordon/uncordon, taints, node failure and
  recovery.

A tick costs what changed since the last, not what exists: as informers feed a controller's
work queue, `_sync` reads the store's change log (no copies) into per-component queues before
each component runs, and a component visits only what its queue names (a workload that or
whose pods changed; a pod written or orphaned; a pod missing its claim; a claim written or
whose pod went; an unbound pod; a pod the kubelet has to start or finish), in `peek` order,
so that its writes come in the order a pass over every object would make them.
`visit_all=True` makes every pass visit every object: the reference the queues are tested
against.

The parts live beside this module: `cluster_spec` (what a cluster is made of), `sim_store` (its
store), `objects` (pure helpers on its objects), `kube_scheduler` and `autoscaler`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.core import labels
from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.autoscaler import ClusterAutoscaler
from gpufleet.sim.emulated.cluster_spec import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.kube_scheduler import KubeScheduler
from gpufleet.sim.emulated.objects import (
    GPU_TAINT,
    KUBELET_FINALIZER,
    LWS_GROUP_INDEX,
    LWS_GROUP_KEY,
    LWS_NAME,
    LWS_TEMPLATE_HASH,
    LWS_WORKER_INDEX,
    POD_TEMPLATE_HASH,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    ObjKey,
    allocation_status,
    any_alive,
    is_alive,
    is_ready,
    is_unbound,
    is_unschedulable,
    key_of,
    natural_pod_key,
    owner_ref,
    scale_down_order,
    set_taint,
    template_hash_of,
)
from gpufleet.sim.emulated.sim_store import BY_OWNER, SimStore, owner_uids
from gpufleet.sim.emulated.workload_rollout import deployment_strategy, lws_strategy
from gpufleet.store import format_time
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    Change,
    ChangeType,
    Conflict,
    Kind,
    NotFound,
    Obj,
    StoreError,
)

__all__ = [
    "ClusterBehaviour",
    "ClusterSpec",
    "DeviceSpec",
    "PoolSpec",
    "SimStore",
    "WorkloadCluster",
]

_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"


# --- the cluster ------------------------------------------------------------------------


class WorkloadCluster:
    """An emulated workload cluster. `start()` registers its components on the loop."""

    def __init__(self, spec: ClusterSpec, loop: EventLoop, visit_all: bool = False) -> None:
        """`visit_all`: every pass visits every object instead of only what changed since
        the last (the reference the incremental passes are tested against; same outcome)."""
        self.spec = spec
        self.behaviour = spec.behaviour
        self.loop = loop
        self.store = SimStore(clock=loop.clock, uid_seed=f"cluster/{spec.name}")
        self.pools = {p.name: p for p in spec.pools}
        self.class_drivers = {
            d.device_class_name: d.driver for p in spec.pools for d in p.devices if d.claim == "DRA"
        }
        self._node_seq: dict[str, int] = defaultdict(int)
        self._node_created: dict[str, datetime] = {}
        self._bound_at: dict[str, datetime] = {}
        self._terminating_at: dict[str, datetime] = {}
        self._failed_at: dict[str, datetime] = {}
        self._foreign_seq = 0
        # Quiet ticks: the store revision after the last tick that ran, and the earliest time
        # a timer (pod start, grace, slice publish, eviction, autoscaler scan) needs a tick.
        self._settled_revision = -1
        self._due: datetime | None = None
        #: Ticks skipped because nothing changed and no timer was due (for benchmarks).
        self.ticks_skipped = 0
        # Per workload uid, what its controller read on its last pass (see `_inputs`); a
        # deleted workload's entries go when `_sync` reads its deletion.
        self._deployments_seen: dict[str, _Inputs] = {}
        self._lws_seen: dict[str, _Inputs] = {}
        #: Per workload uid, its template (the stored object itself) and that template's hash.
        self._template_hashes: dict[str, tuple[Obj, str]] = {}
        # The components' work queues, fed by `_sync` from the store's change log as informers
        # feed a controller's queue, so that a pass visits what changed since the last one
        # rather than every object. Objects are keyed (namespace or "", name), workloads and
        # pods also by uid. Each queue holds at least what its component would act on.
        self._visit_all = visit_all
        self._cursor = 0
        #: Per pod, its owners' uids as last written (a rewrite may change them).
        self._pod_owners: dict[ObjKey, tuple[str, ...]] = {}
        self._live_pods: set[str] = set()
        #: Per workload kind, the key of each workload by uid.
        self._workload_keys: dict[Kind, dict[str, ObjKey]] = {DEPLOYMENT: {}, LEADER_WORKER_SET: {}}
        #: Workloads whose object or pods changed since their controller's last pass.
        self._dirty_deployments: set[str] = set()
        self._dirty_lws: set[str] = set()
        #: For the garbage collector: pods written, and workloads deleted, since its last pass.
        self._written_pods: set[ObjKey] = set()
        self._gone_workloads: set[str] = set()
        #: For the resourceclaim controller: pods still missing a claim; claims written, and
        #: pods deleted, since its last pass.
        self._claimless: set[ObjKey] = set()
        self._written_claims: set[ObjKey] = set()
        self._gone_pods: set[str] = set()
        #: Unbound Pending pods (the scheduler's queue); pods the kubelet has to start or
        #: finish (bound and Pending, or deleted).
        self._unbound: set[ObjKey] = set()
        self._kubelet_pods: set[ObjKey] = set()
        self.scheduler = KubeScheduler(self.store, self.behaviour, self.class_drivers, loop)
        self.autoscaler = ClusterAutoscaler(spec, loop, self.store, self.class_drivers, self)
        for pool in spec.pools:
            for _ in range(pool.node_count):
                name = self.add_node(pool.name)
                self._publish_slices(name)

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        self.loop.every(self.behaviour.tick_s, self.tick, f"{self.name}/tick")

    def tick(self) -> None:
        """Run every in-cluster component once, in a fixed order.

        A tick is skipped when the last tick that ran wrote nothing, the store has not changed
        since, and no timer is due: every component is a function of the store and its timers,
        so running it would change nothing (the same result, only faster).
        """
        due = self._due
        if self.store.revision == self._settled_revision and (due is None or self.loop.now < due):
            self.ticks_skipped += 1
            return
        self._due = None
        before = self.store.revision
        self._run_components()
        # Settled only when the tick wrote nothing: a later component's write may concern an
        # earlier one (the kubelet removes a pod; the claim controller must release its claim).
        self._settled_revision = before if self.store.revision == before else -1

    def _wake_at(self, when: datetime) -> None:
        if self._due is None or when < self._due:
            self._due = when

    def _sync(self) -> None:
        """Bring the work queues up to the store's revision. Every component calls this
        first, so it also sees what the components before it wrote in this tick."""
        changes = self.store.changes_after(self._cursor)
        if not changes:
            return
        self._cursor = changes[-1].cursor
        for change in changes:
            kind = change.kind
            if kind == POD:
                self._pod_changed(change)
            elif kind == RESOURCE_CLAIM:
                if change.type is not ChangeType.DELETED:
                    meta = change.obj["metadata"]
                    self._written_claims.add((meta["namespace"], meta["name"]))
            elif kind in (DEPLOYMENT, LEADER_WORKER_SET):
                uid = change.obj["metadata"]["uid"]
                is_deployment = kind == DEPLOYMENT
                (self._dirty_deployments if is_deployment else self._dirty_lws).add(uid)
                if change.type is ChangeType.DELETED:
                    self._gone_workloads.add(uid)
                    self._workload_keys[kind].pop(uid, None)
                    (self._deployments_seen if is_deployment else self._lws_seen).pop(uid, None)
                    self._template_hashes.pop(uid, None)
                else:
                    self._workload_keys[kind][uid] = key_of(change.obj)

    def _pod_changed(self, change: Change) -> None:
        pod = change.obj
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        # The owners before and after the change: a pod re-owned changes both workloads.
        before = self._pod_owners.pop(key, ())
        self._dirty_deployments.update(before)
        self._dirty_lws.update(before)
        if change.type is ChangeType.DELETED:
            self._live_pods.discard(uid)
            self._gone_pods.add(uid)
            for queue in (self._written_pods, self._claimless, self._unbound, self._kubelet_pods):
                queue.discard(key)
            # The kubelet's timers of a pod that is gone (a uid never comes back).
            self._bound_at.pop(uid, None)
            self._terminating_at.pop(uid, None)
            return
        after = self._pod_owners[key] = tuple(owner_uids(pod))
        self._dirty_deployments.update(after)
        self._dirty_lws.update(after)
        self._live_pods.add(uid)
        self._written_pods.add(key)
        _enqueue(self._claimless, key, _is_missing_claim(pod))
        _enqueue(self._unbound, key, is_unbound(pod))
        _enqueue(self._kubelet_pods, key, _is_kubelet_work(pod))

    def _has_unschedulable(self) -> bool:
        """Whether a pod waits unbound, marked Unschedulable (after the scheduler's pass)."""
        for key in self._unbound:
            pod = self.store.peek_one(POD, key[1], key[0])
            if pod is not None and is_unschedulable(pod):
                return True
        return False

    def _all_keys(self, kind: Kind) -> set[ObjKey]:
        """Every object's key, for `visit_all`."""
        return {key_of(o) for o in self.store.peek(kind)}

    def _run_components(self) -> None:
        self._garbage_collect()
        self._deployment_controller()
        self._lws_controller()
        self._claim_controller()
        self._dra_driver()
        self._node_lifecycle()
        self._scheduler()
        self._kubelet()
        wake = self.autoscaler.run(self._has_unschedulable)
        if wake is not None:
            self._wake_at(wake)

    # --- scenario operations --------------------------------------------------------------

    def add_node(self, pool_name: str) -> str:
        """Add a Ready node to a pool (its slices follow after the publish delay)."""
        self._node_seq[pool_name] += 1
        name = f"{pool_name}-{self._node_seq[pool_name] - 1}"
        taints = [dict(GPU_TAINT)] if self.behaviour.has_gpu_taint else []
        self.store.create_shared(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {labels.POOL: pool_name, "kubernetes.io/hostname": name},
                },
                "spec": {"taints": taints},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "allocatable": {"cpu": "48", "memory": "192Gi", "pods": "110"},
                },
            }
        )
        self._node_created[name] = self.loop.now
        return name

    def remove_node(self, name: str) -> None:
        """Delete a node and its slices; its pods are removed and recreated elsewhere."""
        for s in self.store.peek(RESOURCE_SLICE):
            if s["spec"].get("nodeName") == name:
                self.store.delete(RESOURCE_SLICE, s["metadata"]["name"])
        for pod in self._pods_on(name):
            self._force_remove(pod)
        self.store.delete(NODE, name)
        self._node_created.pop(name, None)
        self.autoscaler.forget_node(name)

    def cordon(self, name: str, is_cordoned: bool = True) -> None:
        def change(node: Obj) -> None:
            node["spec"]["unschedulable"] = is_cordoned
            set_taint(node, UNSCHEDULABLE_TAINT, is_cordoned)

        self._update_node(name, change)

    def uncordon(self, name: str) -> None:
        self.cordon(name, False)

    def taint(self, name: str, key: str, effect: str = "NoSchedule", value: str = "") -> None:
        taint = (
            {"key": key, "value": value, "effect": effect}
            if value
            else {"key": key, "effect": effect}
        )
        self._update_node(name, lambda n: set_taint(n, taint, True))

    def untaint(self, name: str, key: str, effect: str = "") -> None:
        """Remove the node's taints with `key` (and `effect`, when given)."""

        def change(node: Obj) -> None:
            node["spec"]["taints"] = [
                t
                for t in node["spec"].get("taints") or []
                if not (t["key"] == key and (not effect or t["effect"] == effect))
            ]

        self._update_node(name, change)

    def fail_node(self, name: str) -> None:
        """The node stops reporting: NotReady, tainted unreachable; its pods fail shortly after."""

        def change(node: Obj) -> None:
            set_taint(node, UNREACHABLE_TAINT, True)

        self._update_node(name, change)
        self._set_ready(name, False)
        self._failed_at[name] = self.loop.now

    def recover_node(self, name: str) -> None:
        self._update_node(name, lambda n: set_taint(n, UNREACHABLE_TAINT, False))
        self._set_ready(name, True)
        self._failed_at.pop(name, None)

    def add_foreign_claim(
        self, node: str, count: int = 1, namespace: str = "other-tenant", driver: str = ""
    ) -> str:
        """Another tenant's claim, allocated on `node` (first free devices). Returns its name."""
        device = next(
            d
            for p in self.spec.pools
            for d in p.devices
            if d.claim == "DRA" and (not driver or d.driver == driver)
        )
        self._foreign_seq += 1
        name = f"foreign-{self._foreign_seq}"
        request = dra.Request("device", device.driver, count, ())
        devices = self.store.published().get(node, [])
        results = dra.allocate([request], devices, set(self.store.taken()))
        if results is None:
            raise ValueError(f"node {node} has fewer than {count} free {device.driver} devices")
        self.store.create(
            {
                "apiVersion": RESOURCE_CLAIM.api_version,
                "kind": RESOURCE_CLAIM.kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "device",
                                "exactly": {
                                    "deviceClassName": device.device_class_name,
                                    "allocationMode": "ExactCount",
                                    "count": count,
                                },
                            }
                        ]
                    }
                },
            }
        )
        self.store.patch_status_shared(
            RESOURCE_CLAIM, name, namespace, {"allocation": allocation_status(results, node)}
        )
        return name

    def remove_foreign_claim(self, name: str, namespace: str = "other-tenant") -> None:
        self.store.delete(RESOURCE_CLAIM, name, namespace)

    # --- queries for scenarios and tests --------------------------------------------------

    def nodes(self, pool: str | None = None) -> list[Obj]:
        sel = {labels.POOL: pool} if pool else None
        return self.store.list(NODE, None, sel)

    def peek_nodes(self, pool: str) -> list[Obj]:
        return self.store.peek(NODE, None, {labels.POOL: pool})

    def free_devices(self) -> dict[str, int]:
        """Per node, devices published and not taken (what the scheduler sees as free)."""
        published = self.store.published()
        taken = self.store.taken()
        return {
            n["metadata"]["name"]: sum(
                1 for d in published.get(n["metadata"]["name"], []) if d.key not in taken
            )
            for n in self.store.peek(NODE)
        }

    # --- garbage collector ----------------------------------------------------------------

    def _garbage_collect(self) -> None:
        """Delete the pods none of whose owners exists. A pod becomes such an orphan only when
        it is written or an owner of it is deleted, so only those pods are looked at."""
        self._sync()
        written, self._written_pods = self._written_pods, set()
        gone, self._gone_workloads = self._gone_workloads, set()
        if self._visit_all:
            written = self._all_keys(POD)
        for uid in gone:
            written.update(key_of(p) for p in self.store.peek_indexed(POD, BY_OWNER, uid))
        if not written:
            return
        deployments, sets = self._workload_keys[DEPLOYMENT], self._workload_keys[LEADER_WORKER_SET]
        for key in sorted(written):
            pod = self.store.peek_one(POD, key[1], key[0])
            if pod is None:
                continue
            refs = pod["metadata"].get("ownerReferences") or []
            if refs and not any(r["uid"] in deployments or r["uid"] in sets for r in refs):
                self._delete_pod(pod)

    # --- Deployment controller ------------------------------------------------------------

    def _deployment_controller(self) -> None:
        self._sync()
        dirty, self._dirty_deployments = self._dirty_deployments, set()
        for dep in self._workloads(DEPLOYMENT, dirty):
            meta = dep["metadata"]
            pods = self._owned_pods(meta["uid"], meta["namespace"])
            inputs = _inputs(dep, pods)
            if self._deployments_seen.get(meta["uid"]) != inputs:
                self._reconcile_deployment(dep, pods)
            self._deployments_seen[meta["uid"]] = inputs

    def _workloads(self, kind: Kind, dirty: set[str]) -> list[Obj]:
        """The workloads of `kind` among the uids in `dirty`, in `peek` order (every one with
        `visit_all`). Any other has the inputs its controller last read (`_inputs`): neither
        it nor a pod of it changed since."""
        if self._visit_all:
            return self.store.peek(kind)
        keys = self._workload_keys[kind]
        found: list[Obj] = []
        for key in sorted(keys[uid] for uid in dirty if uid in keys):
            obj = self.store.peek_one(kind, key[1], key[0])
            if obj is not None:
                found.append(obj)
        return found

    def _reconcile_deployment(self, dep: Obj, pods: list[Obj]) -> None:
        meta, spec = dep["metadata"], dep["spec"]
        replicas = int(spec.get("replicas", 1))
        template = spec["template"]
        thash = self._template_hash(meta["uid"], template)
        for pod in pods:
            if pod["status"].get("phase") in ("Failed", "Succeeded"):
                self._delete_pod(pod)
        alive = [p for p in pods if is_alive(p)]
        new = [p for p in alive if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) == thash]
        is_new = {id(p) for p in new}
        old = [p for p in alive if id(p) not in is_new]
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

    def _template_hash(self, uid: str, template: Obj) -> str:
        """`template_hash_of(template)`, remembered while the workload keeps the same template object:
        stored objects never change in place, and a status write shares the spec."""
        cached = self._template_hashes.get(uid)
        if cached is not None and cached[0] is template:
            return cached[1]
        thash = template_hash_of(template)
        self._template_hashes[uid] = (template, thash)
        return thash

    # --- LeaderWorkerSet controller -------------------------------------------------------

    def _lws_controller(self) -> None:
        self._sync()
        dirty, self._dirty_lws = self._dirty_lws, set()
        for lws in self._workloads(LEADER_WORKER_SET, dirty):
            meta = lws["metadata"]
            pods = self._owned_pods(meta["uid"], meta["namespace"])
            inputs = _inputs(lws, pods)
            if self._lws_seen.get(meta["uid"]) != inputs:
                self._reconcile_lws(lws, pods)
            self._lws_seen[meta["uid"]] = inputs

    def _reconcile_lws(self, lws: Obj, owned: list[Obj]) -> None:
        meta, spec = lws["metadata"], lws["spec"]
        replicas = int(spec.get("replicas", 1))
        lwt = spec["leaderWorkerTemplate"]
        size = int(lwt.get("size", 1))
        thash = self._template_hash(meta["uid"], lwt)
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

    # --- resourceclaim controller ---------------------------------------------------------

    def _claim_controller(self) -> None:
        """Make the claims pods miss (the pods queued in `_claimless`, in `peek` order), then
        release the claims whose pods are gone (among the claims written and those of the pods
        deleted since the last pass: a claim is released only after one of these)."""
        self._sync()
        claimless = self._all_keys(POD) if self._visit_all else self._claimless
        pods: list[Obj] = []
        for key in sorted(claimless):
            found = self.store.peek_one(POD, key[1], key[0])
            if found is not None:
                pods.append(found)
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            statuses = {s["name"] for s in pod["status"].get("resourceClaimStatuses") or []}
            for ref in pod["spec"].get("resourceClaims") or []:
                template_name = ref.get("resourceClaimTemplateName")
                if not template_name or ref["name"] in statuses:
                    continue
                template = self.store.peek_one(
                    RESOURCE_CLAIM_TEMPLATE, template_name, meta["namespace"]
                )
                if template is None:
                    continue  # as in Kubernetes: the pod waits for its template
                claim_name = f"{meta['name']}-{ref['name']}"
                existing = self.store.peek_one(RESOURCE_CLAIM, claim_name, meta["namespace"])
                if existing is not None:
                    owners = existing["metadata"].get("ownerReferences") or []
                    if not any(r["uid"] == meta["uid"] for r in owners):
                        # A claim of an earlier pod of the same name, not yet released: wait
                        # (Kubernetes avoids the clash with a random suffix; we name claims
                        # `<pod>-<claim>` and wait instead).
                        continue
                else:
                    self.store.create_shared(
                        {
                            "apiVersion": RESOURCE_CLAIM.api_version,
                            "kind": RESOURCE_CLAIM.kind,
                            "metadata": {
                                "name": claim_name,
                                "namespace": meta["namespace"],
                                "labels": dict(
                                    (template["spec"].get("metadata") or {}).get("labels") or {}
                                ),
                                "annotations": {
                                    "resource.kubernetes.io/pod-claim-name": ref["name"]
                                },
                                "ownerReferences": [owner_ref(pod, "v1", "Pod")],
                            },
                            "spec": template["spec"]["spec"],
                        }
                    )
                entries = [
                    *(pod["status"].get("resourceClaimStatuses") or []),
                    {"name": ref["name"], "resourceClaimName": claim_name},
                ]
                pod = self.store.patch_status_shared(
                    POD, meta["name"], meta["namespace"], {"resourceClaimStatuses": entries}
                )
        # The claims written since the last pass, this pass's included (a new claim's pod
        # is live, so it stays), and the claims of the pods deleted since.
        self._sync()
        written, self._written_claims = self._written_claims, set()
        gone, self._gone_pods = self._gone_pods, set()
        if self._visit_all:
            written = self._all_keys(RESOURCE_CLAIM)
        for uid in gone:
            written.update(key_of(c) for c in self.store.owned_claims(uid))
        for key in sorted(written):
            claim = self.store.peek_one(RESOURCE_CLAIM, key[1], key[0])
            if claim is None:
                continue
            refs = [r for r in claim["metadata"].get("ownerReferences") or [] if r["kind"] == "Pod"]
            if refs and not any(r["uid"] in self._live_pods for r in refs):
                self._delete(RESOURCE_CLAIM, claim)

    # --- DRA driver -----------------------------------------------------------------------

    def _dra_driver(self) -> None:
        delay = timedelta(seconds=self.behaviour.dra_publish_delay_s)
        for name in list(self.store.unpublished_nodes()):
            created = self._node_created.get(name, self.loop.now)
            if self.loop.now >= created + delay:
                self._publish_slices(name)
            else:
                self._wake_at(created + delay)

    def _publish_slices(self, node_name: str) -> None:
        node = self.store.peek_one(NODE, node_name)
        if node is None:
            return
        pool = self.pools.get(node["metadata"]["labels"].get(labels.POOL, ""))
        if pool is None:
            return
        by_driver: dict[str, list[Obj]] = defaultdict(list)
        for d in pool.devices:
            if d.claim != "DRA":
                continue
            for i in range(d.count):
                device: Obj = {"name": f"{d.name}-{i}"}
                if d.attributes:
                    device["attributes"] = {k: dict(v) for k, v in d.attributes.items()}
                if d.capacity:
                    device["capacity"] = {k: {"value": v} for k, v in d.capacity.items()}
                by_driver[d.driver].append(device)
        for driver, devices in sorted(by_driver.items()):
            self.store.create_shared(
                {
                    "apiVersion": RESOURCE_SLICE.api_version,
                    "kind": RESOURCE_SLICE.kind,
                    "metadata": {
                        "name": f"{node_name}-{driver.replace('.', '-')}",
                        "ownerReferences": [owner_ref(node, "v1", "Node")],
                    },
                    "spec": {
                        "driver": driver,
                        "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                        "nodeName": node_name,
                        "devices": devices,
                    },
                }
            )

    # --- node lifecycle controller --------------------------------------------------------

    def _node_lifecycle(self) -> None:
        delay = timedelta(seconds=self.behaviour.node_eviction_delay_s)
        for name, since in sorted(self._failed_at.items()):
            if self.loop.now < since + delay:
                self._wake_at(since + delay)
                continue
            for pod in self._pods_on(name):
                if pod["status"].get("phase") not in ("Failed", "Succeeded"):
                    self.store.patch_status_shared(
                        POD,
                        pod["metadata"]["name"],
                        pod["metadata"]["namespace"],
                        {"phase": "Failed", "reason": "NodeLost"},
                    )

    # --- kube-scheduler -------------------------------------------------------------------

    def _scheduler(self) -> None:
        self._sync()
        queued = self._all_keys(POD) if self._visit_all else self._unbound
        pending: list[Obj] = []
        for key in sorted(queued):  # `peek` order first, so that the sort's ties stay in it
            pod = self.store.peek_one(POD, key[1], key[0])
            if pod is not None and is_unbound(pod):
                pending.append(pod)
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], natural_pod_key(p)))
        if not pending:
            return
        nodes = self.scheduler.node_index()
        for pod in pending:
            self.scheduler.schedule_one(pod, nodes)

    # --- kubelet --------------------------------------------------------------------------

    def _kubelet(self) -> None:
        now = self.loop.now
        ready_nodes = self.store.ready_nodes()
        start = timedelta(seconds=self.behaviour.pod_start_delay_s)
        grace = timedelta(seconds=self.behaviour.termination_grace_s)
        self._sync()
        queued = self._all_keys(POD) if self._visit_all else self._kubelet_pods
        pods: list[Obj] = []
        for key in sorted(queued):
            found = self.store.peek_one(POD, key[1], key[0])
            if found is not None:
                pods.append(found)
        for pod in pods:
            meta = pod["metadata"]
            uid = meta["uid"]
            node = pod["spec"].get("nodeName")
            if meta.get("deletionTimestamp"):
                since = self._terminating_at.setdefault(uid, now)
                if not node or node not in ready_nodes or now >= since + grace:
                    self._finish(pod)
                else:
                    self._wake_at(since + grace)
                continue
            if not node or node not in ready_nodes or pod["status"].get("phase") != "Pending":
                continue
            bound = self._bound_at.setdefault(uid, now)
            if now < bound + start:
                self._wake_at(bound + start)
            else:
                conditions = [
                    c
                    for c in pod["status"].get("conditions") or []
                    if c["type"] not in ("Ready", "ContainersReady")
                ]
                conditions += [
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ]
                self.store.patch_status_shared(
                    POD,
                    meta["name"],
                    meta["namespace"],
                    {"phase": "Running", "startTime": format_time(now), "conditions": conditions},
                )

    def _finish(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            current = self.store.peek_one(POD, meta["name"], meta["namespace"])
            if current is None:
                return
            finalizers = [
                f for f in current["metadata"].get("finalizers") or [] if f != KUBELET_FINALIZER
            ]
            self.store.update_shared(
                {**current, "metadata": {**current["metadata"], "finalizers": finalizers}}
            )
        except (Conflict, NotFound):
            return

    # --- helpers --------------------------------------------------------------------------

    def _owned_pods(self, owner_uid: str, namespace: str) -> list[Obj]:
        return self.store.owned_pods(owner_uid, namespace)

    def _pods_on(self, node: str) -> list[Obj]:
        return self.store.pods_on(node)

    def _create_pod(self, owner: Obj, template: Obj, thash: str) -> Obj:
        name = f"{owner['metadata']['name']}-{thash}-{self._suffix()}"
        return self._create_pod_named(owner, template, name, {POD_TEMPLATE_HASH: thash})

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
                    "ownerReferences": [owner_ref(owner, owner["apiVersion"], owner["kind"])],
                    "finalizers": [KUBELET_FINALIZER],
                },
                "spec": json.loads(json.dumps(template.get("spec") or {})),
                "status": {"phase": "Pending"},
            }
        )

    def _suffix(self) -> str:
        return "".join(self.loop.rng.choice(_NAME_CHARS) for _ in range(5))

    def _delete_pod(self, pod: Obj) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            return
        self._delete(POD, pod)

    def _force_remove(self, pod: Obj) -> None:
        self._delete(POD, pod)
        self._finish(pod)

    def _delete(self, kind: Kind, obj: Obj) -> None:
        with contextlib.suppress(NotFound):
            self.store.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))

    def _patch_status_if_changed(self, obj: Obj, status: Mapping[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        kind = DEPLOYMENT if obj["kind"] == "Deployment" else LEADER_WORKER_SET
        with contextlib.suppress(StoreError):
            self.store.patch_status_shared(
                kind, obj["metadata"]["name"], obj["metadata"]["namespace"], status
            )

    def _update_node(self, name: str, change: Callable[[Obj], None]) -> None:
        node = self.store.get(NODE, name)
        if node is None:
            raise NotFound(f"node {name} not found")
        change(node)
        self.store.update(node)

    def _set_ready(self, name: str, is_ready: bool) -> None:
        node = self.store.get(NODE, name)
        if node is None:
            raise NotFound(f"node {name} not found")
        conditions = [c for c in node["status"].get("conditions") or [] if c["type"] != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if is_ready else "Unknown",
                "reason": "KubeletReady" if is_ready else "NodeStatusUnknown",
            }
        )
        self.store.patch_status_shared(NODE, name, None, {"conditions": conditions})


# --- pure helpers -----------------------------------------------------------------------


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


def _enqueue(queue: set[ObjKey], key: ObjKey, is_wanted: bool) -> None:
    if is_wanted:
        queue.add(key)
    else:
        queue.discard(key)


def _is_missing_claim(pod: Obj) -> bool:
    """The resourceclaim controller has a claim to make for the pod."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    statuses = {s["name"] for s in pod["status"].get("resourceClaimStatuses") or []}
    return any(
        ref.get("resourceClaimTemplateName") and ref["name"] not in statuses
        for ref in pod["spec"].get("resourceClaims") or []
    )


def _is_kubelet_work(pod: Obj) -> bool:
    """The kubelet has to start the pod (once its node is Ready) or finish it."""
    if pod["metadata"].get("deletionTimestamp"):
        return True
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") == "Pending"
