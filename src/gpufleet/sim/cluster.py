"""One emulated workload cluster: a `MemoryStore` with Kubernetes-shaped objects and the
components that act on them, driven by the simulation's event loop.

The store holds the same object shapes as a real cluster (Nodes, `resource.k8s.io/v1`
ResourceSlices and ResourceClaims, Pods, Deployments, LeaderWorkerSets), so the real agent reads
it exactly as it reads a real API server. Components, run every `tick_s` in a fixed order
(garbage collector, workload controllers, resourceclaim controller, DRA driver, kube-scheduler,
kubelet), each reading the store and writing through it:

- **kube-scheduler** binds Pending pods, oldest first: a node must carry the pod's nodeSelector
  labels, be Ready and schedulable, tolerate-check every NoSchedule/NoExecute taint, and have
  devices for the pod's claim (`gpufleet.sim.dra`). Node choice per cluster: Spread (most free
  devices; kube-scheduler does not pack DRA devices) or Pack (fewest free that fit), ties by
  name. Pods of one LeaderWorkerSet group go to distinct nodes, decided pod by pod: a group is
  not scheduled all-or-nothing, so part of a gang can bind while the rest stays Pending (what a
  real cluster with pod anti-affinity and no gang scheduler does). It writes the claim's
  `status.allocation` and `reservedFor`, then the pod's `spec.nodeName`; an unschedulable pod
  gets `PodScheduled=False, reason Unschedulable` (what cluster-autoscaler looks for).
- **resourceclaim controller** makes claim `<pod>-<claim>` from the pod's template, owned by the
  pod, records it in `status.resourceClaimStatuses`, and deletes (releases) it once the pod is
  gone.
- **kubelet** starts a bound pod after `pod_start_delay_s` (phase Running, Ready) and finishes a
  deleted pod after `termination_grace_s` (pods carry a finalizer so a delete sets
  `deletionTimestamp` first, as the API server does for graceful deletion). Pods on a NotReady
  node are removed at once (as pod GC force-deletes pods of lost nodes).
- **Deployment controller** keeps `replicas` pods of the current template (RollingUpdate, 25%
  surge and unavailability, rounded as Kubernetes rounds), replacing failed ones; ReplicaSets
  are not modelled (pods carry `pod-template-hash`). **LeaderWorkerSet controller** keeps
  `replicas` groups of `size` pods (`<lws>-<g>` leader, `<lws>-<g>-<w>` workers); a group that
  loses a pod is recreated whole (RecreateGroupOnPodRestart); template changes roll one group
  at a time. **Garbage collector** deletes pods whose owning workload is gone.
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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.core import labels
from gpufleet.core.model import NodeChoice
from gpufleet.sim import dra
from gpufleet.sim.engine import EventLoop
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import (
    DEPLOYMENT,
    EVENT,
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


# --- configuration ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One kind of device a node of a pool has (an InferenceClass `spec.devices` entry)."""

    name: str = "gpu"
    driver: str = "gpu.nvidia.com"
    device_class_name: str = "gpu.nvidia.com"
    count: int = 4
    claim: str = "DRA"
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_class(cls, device: Mapping[str, Any]) -> DeviceSpec:
        """From an InferenceClass device entry (`capacity: {memory: {value: 80Gi}}`)."""
        return cls(
            name=str(device["name"]),
            driver=str(device["driver"]),
            device_class_name=str(device.get("deviceClassName") or device["driver"]),
            count=int(device.get("count", 1)),
            claim=str(device.get("claim", "DRA")),
            attributes=dict(device.get("attributes") or {}),
            capacity={k: str(v["value"]) for k, v in (device.get("capacity") or {}).items()},
        )

    def to_class(self) -> Obj:
        body: Obj = {"name": self.name, "driver": self.driver, "claim": self.claim}
        if self.claim == "DRA":
            body["deviceClassName"] = self.device_class_name
        body["count"] = self.count
        if self.attributes:
            body["attributes"] = {k: dict(v) for k, v in self.attributes.items()}
        if self.capacity:
            body["capacity"] = {k: {"value": v} for k, v in self.capacity.items()}
        return body


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    devices: tuple[DeviceSpec, ...] = (DeviceSpec(),)
    node_count: int = 1
    min_node_count: int = 0
    #: None: a fixed-size pool (the autoscaler never grows it).
    max_node_count: int | None = None
    #: The InferenceClass name; defaults to the pool name.
    class_name: str = ""

    @property
    def inference_class(self) -> str:
        return self.class_name or self.name


@dataclass(frozen=True, slots=True)
class ClusterBehaviour:
    """How one emulated cluster behaves. Times in seconds of simulated time."""

    node_choice: NodeChoice = NodeChoice.SPREAD
    #: Cadence of the in-cluster controllers (scheduler, kubelet, controllers, driver).
    tick_s: float = 1.0
    pod_start_delay_s: float = 5.0
    termination_grace_s: float = 2.0
    dra_publish_delay_s: float = 10.0
    #: NodeReady=False to pods failed (NoExecute eviction of a lost node).
    node_eviction_delay_s: float = 5.0
    is_autoscaling: bool = True
    is_stocked_out: bool = False
    autoscaler_scan_s: float = 10.0
    scale_up_delay_s: float = 60.0
    scale_down_idle_s: float = 600.0
    #: Taint GPU nodes with `nvidia.com/gpu:NoSchedule`, as the GPU operator does.
    has_gpu_taint: bool = True
    #: The agent: how often it observes, and how long its report takes to reach the hub.
    report_interval_s: float = 5.0
    report_delay_s: float = 0.0
    #: The agent's heartbeat for this cluster; None: the fleet's `AgentConfig` default.
    heartbeat_interval_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    pools: tuple[PoolSpec, ...]
    behaviour: ClusterBehaviour = field(default_factory=ClusterBehaviour)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Cluster-level taints (the InferenceCluster's `spec.taints`: `key`, `value`, `effect`).
    taints: tuple[Mapping[str, str], ...] = ()


# --- the cluster ------------------------------------------------------------------------


class SimStore(MemoryStore):
    """The workload cluster's store. The emulated components read it with `peek`/`peek_one`
    (no copies: they never change what they read and write through the Store methods); the
    agent reads it through the `Store` port, which copies as an API client's decoding does.

    `published()` and `taken()` are what the emulated DRA allocator sees; they are cached per
    revision of the ResourceSlices and ResourceClaims, since every component asks for them and
    they change far less often than pods do. Callers must not change what they return.

    Pods are indexed by owner uid (`owned_pods`), node (`pods_on`), claims by owner uid
    (`owned_claims`), and Events by the uid of their object (`events_of`): the controllers ask
    these on every pass, and a scan of every pod per owner made a pass quadratic in the number
    of pods. `changes_after` is the change log without copies, which the components' work
    queues and `taken` follow."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._published: tuple[int, dict[str, list[dra.PublishedDevice]]] = (-1, {})
        self._taken: tuple[int, frozenset[dra.DeviceKey]] = (-1, frozenset())
        # What `taken` keeps: per claim, the devices it holds; per device, how many claims
        # hold it; and how far in the change log it has read.
        self._claim_devices: dict[_Key, tuple[dra.DeviceKey, ...]] = {}
        self._taken_count: Counter[dra.DeviceKey] = Counter()
        self._taken_cursor = 0
        self._ready_nodes: tuple[int, frozenset[str]] = (-1, frozenset())
        self._unpublished: tuple[tuple[int, int], list[str]] = ((-1, -1), [])
        self.add_index(POD, _BY_OWNER, _owner_uids)
        self.add_index(POD, _BY_NODE, _node_name)
        self.add_index(EVENT, _BY_OBJECT, _involved_uid)
        self.add_index(RESOURCE_CLAIM, _BY_OWNER, _owner_uids)

    def ready_nodes(self) -> frozenset[str]:
        """The names of the Ready nodes (cached per revision of the Nodes)."""
        revision = self.kind_revision(NODE)
        if self._ready_nodes[0] != revision:
            ready = frozenset(n["metadata"]["name"] for n in self.peek(NODE) if _is_node_ready(n))
            self._ready_nodes = (revision, ready)
        return self._ready_nodes[1]

    def unpublished_nodes(self) -> list[str]:
        """The Ready nodes no ResourceSlice names yet, in node order (cached per revision of
        the Nodes and the ResourceSlices): what the DRA driver still has to publish."""
        revisions = (self.kind_revision(NODE), self.kind_revision(RESOURCE_SLICE))
        if self._unpublished[0] != revisions:
            published = {s["spec"].get("nodeName") for s in self.peek(RESOURCE_SLICE)}
            waiting = [
                n["metadata"]["name"]
                for n in self.peek(NODE)
                if n["metadata"]["name"] not in published and _is_node_ready(n)
            ]
            self._unpublished = (revisions, waiting)
        return self._unpublished[1]

    def owned_pods(self, owner_uid: str, namespace: str) -> list[Obj]:
        """The pods of `namespace` with an ownerReference to `owner_uid`, in `peek` order."""
        return self.peek_indexed(POD, _BY_OWNER, owner_uid, namespace)

    def pods_on(self, node: str) -> list[Obj]:
        """The pods bound to `node`, in `peek` order."""
        return self.peek_indexed(POD, _BY_NODE, node)

    def owned_claims(self, owner_uid: str) -> list[Obj]:
        """The ResourceClaims with an ownerReference to `owner_uid`, in `peek` order."""
        return self.peek_indexed(RESOURCE_CLAIM, _BY_OWNER, owner_uid)

    def events_of(self, uid: str, namespace: str) -> list[Obj]:
        """The Events of `namespace` about the object `uid`, in `peek` order."""
        return self.peek_indexed(EVENT, _BY_OBJECT, uid, namespace)

    def published(self) -> dict[str, list[dra.PublishedDevice]]:
        revision = self.kind_revision(RESOURCE_SLICE)
        if self._published[0] != revision:
            self._published = (revision, dra.published_devices(self.peek(RESOURCE_SLICE)))
        return self._published[1]

    def taken(self) -> frozenset[dra.DeviceKey]:
        """`dra.taken_devices` of every claim, kept up to date from the change log: the
        scheduler asks after each pod it binds (the claims changed), and reading every claim
        again each time cost more than the rest of its pass."""
        revision = self.kind_revision(RESOURCE_CLAIM)
        if self._taken[0] != revision:
            for change in self.changes_after(self._taken_cursor):
                if change.kind != RESOURCE_CLAIM:
                    continue
                key = _key_of(change.obj)
                for device in self._claim_devices.pop(key, ()):
                    self._taken_count[device] -= 1
                    if not self._taken_count[device]:
                        del self._taken_count[device]
                if change.type is ChangeType.DELETED:
                    continue
                devices = tuple(dra.taken_devices([change.obj]))
                if devices:
                    self._claim_devices[key] = devices
                    for device in devices:
                        self._taken_count[device] += 1
            self._taken_cursor = self.revision
            self._taken = (revision, frozenset(self._taken_count))
        return self._taken[1]


_BY_OWNER: Final = "owner"
_BY_NODE: Final = "node"
_BY_OBJECT: Final = "involvedObject"


def _owner_uids(obj: Obj) -> list[str]:
    return [r["uid"] for r in obj["metadata"].get("ownerReferences") or []]


def _node_name(pod: Obj) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


def _involved_uid(event: Obj) -> list[str]:
    uid = (event.get("involvedObject") or {}).get("uid")
    return [uid] if uid else []


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
        self._idle_since: dict[str, datetime] = {}
        self._failed_at: dict[str, datetime] = {}
        #: Nodes the autoscaler asked for and not yet created, per pool.
        self._provisioning: dict[str, int] = defaultdict(int)
        self._foreign_seq = 0
        self._event_seq = 0
        self._last_scan: datetime | None = None
        # Quiet ticks: the store revision after the last tick that ran, and the earliest time
        # a timer (pod start, grace, slice publish, eviction, autoscaler scan) needs a tick.
        self._settled_revision = -1
        self._due: datetime | None = None
        self._has_unschedulable = False
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
        self._pod_owners: dict[_Key, tuple[str, ...]] = {}
        self._live_pods: set[str] = set()
        #: Per workload kind, the key of each workload by uid.
        self._workload_keys: dict[Kind, dict[str, _Key]] = {DEPLOYMENT: {}, LEADER_WORKER_SET: {}}
        #: Workloads whose object or pods changed since their controller's last pass.
        self._dirty_deployments: set[str] = set()
        self._dirty_lws: set[str] = set()
        #: For the garbage collector: pods written, and workloads deleted, since its last pass.
        self._written_pods: set[_Key] = set()
        self._gone_workloads: set[str] = set()
        #: For the resourceclaim controller: pods still missing a claim; claims written, and
        #: pods deleted, since its last pass.
        self._claimless: set[_Key] = set()
        self._written_claims: set[_Key] = set()
        self._gone_pods: set[str] = set()
        #: Unbound Pending pods (the scheduler's queue); pods the kubelet has to start or
        #: finish (bound and Pending, or deleted).
        self._unbound: set[_Key] = set()
        self._kubelet_pods: set[_Key] = set()
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
        now = self.loop.now
        if self.store.revision == self._settled_revision and (self._due is None or now < self._due):
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
                    self._workload_keys[kind][uid] = _key_of(change.obj)

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
        after = self._pod_owners[key] = tuple(_owner_uids(pod))
        self._dirty_deployments.update(after)
        self._dirty_lws.update(after)
        self._live_pods.add(uid)
        self._written_pods.add(key)
        _enqueue(self._claimless, key, _is_missing_claim(pod))
        _enqueue(self._unbound, key, _is_unbound(pod))
        _enqueue(self._kubelet_pods, key, _is_kubelet_work(pod))

    def _all_keys(self, kind: Kind) -> set[_Key]:
        """Every object's key, for `visit_all`."""
        return {_key_of(o) for o in self.store.peek(kind)}

    def _run_components(self) -> None:
        self._garbage_collect()
        self._deployment_controller()
        self._lws_controller()
        self._claim_controller()
        self._dra_driver()
        self._node_lifecycle()
        self._scheduler()
        self._kubelet()
        if self.behaviour.is_autoscaling and (
            self._last_scan is None
            or (self.loop.now - self._last_scan).total_seconds() >= self.behaviour.autoscaler_scan_s
        ):
            self._last_scan = self.loop.now
            self._autoscaler()
        if self.behaviour.is_autoscaling and (
            self._has_unschedulable or self._idle_since or any(self._provisioning.values())
        ):
            assert self._last_scan is not None
            self._wake_at(self._last_scan + timedelta(seconds=self.behaviour.autoscaler_scan_s))

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
        self._idle_since.pop(name, None)

    def cordon(self, name: str, is_cordoned: bool = True) -> None:
        def change(node: Obj) -> None:
            node["spec"]["unschedulable"] = is_cordoned
            _set_taint(node, UNSCHEDULABLE_TAINT, is_cordoned)

        self._update_node(name, change)

    def uncordon(self, name: str) -> None:
        self.cordon(name, False)

    def taint(self, name: str, key: str, effect: str = "NoSchedule", value: str = "") -> None:
        taint = (
            {"key": key, "value": value, "effect": effect}
            if value
            else {"key": key, "effect": effect}
        )
        self._update_node(name, lambda n: _set_taint(n, taint, True))

    def untaint(self, name: str, key: str) -> None:
        def change(node: Obj) -> None:
            node["spec"]["taints"] = [
                t for t in node["spec"].get("taints") or [] if t["key"] != key
            ]

        self._update_node(name, change)

    def fail_node(self, name: str) -> None:
        """The node stops reporting: NotReady, tainted unreachable; its pods fail shortly after."""

        def change(node: Obj) -> None:
            _set_taint(node, UNREACHABLE_TAINT, True)

        self._update_node(name, change)
        self._set_ready(name, False)
        self._failed_at[name] = self.loop.now

    def recover_node(self, name: str) -> None:
        self._update_node(name, lambda n: _set_taint(n, UNREACHABLE_TAINT, False))
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
            RESOURCE_CLAIM, name, namespace, {"allocation": _allocation(results, node)}
        )
        return name

    def remove_foreign_claim(self, name: str, namespace: str = "other-tenant") -> None:
        self.store.delete(RESOURCE_CLAIM, name, namespace)

    # --- queries for scenarios and tests --------------------------------------------------

    def nodes(self, pool: str | None = None) -> list[Obj]:
        sel = {labels.POOL: pool} if pool else None
        return self.store.list(NODE, None, sel)

    def _peek_nodes(self, pool: str) -> list[Obj]:
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
            written.update(_key_of(p) for p in self.store.peek_indexed(POD, _BY_OWNER, uid))
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
        alive = [p for p in pods if _is_alive(p)]
        new = [p for p in alive if p["metadata"]["labels"].get(POD_TEMPLATE_HASH) == thash]
        is_new = {id(p) for p in new}
        old = [p for p in alive if id(p) not in is_new]
        surge = max(1, math.ceil(replicas * 0.25)) if replicas else 0
        unavailable = math.floor(replicas * 0.25)
        # Scale the new set down first (unbound pods first, then newest).
        excess = len(new) - replicas
        if excess > 0:
            for pod in sorted(new, key=_scale_down_order)[:excess]:
                self._delete_pod(pod)
                new.remove(pod)
        while len(new) < replicas and len(new) + len(old) < replicas + surge:
            new.append(self._create_pod(dep, template, thash))
        ready_new = sum(1 for p in new if _is_ready(p))
        ready_old = sum(1 for p in old if _is_ready(p))
        for pod in sorted(old, key=_scale_down_order):
            if not _is_ready(pod):
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

    def _template_hash(self, uid: str, template: Obj) -> str:
        """`_hash(template)`, remembered while the workload keeps the same template object:
        stored objects never change in place, and a status write shares the spec."""
        cached = self._template_hashes.get(uid)
        if cached is not None and cached[0] is template:
            return cached[1]
        thash = _hash(template)
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
        groups: dict[int, list[Obj]] = defaultdict(list)
        for pod in owned:
            groups[int(pod["metadata"]["labels"][LWS_GROUP_INDEX])].append(pod)
        # Roll one group at a time: only while every group is whole and ready.
        is_rolling = any(
            len(groups[g]) < size or not all(_is_ready(p) for p in groups[g])
            for g in groups
            if g < replicas
        )
        for g in sorted(groups):
            pods = groups[g]
            broken = (
                any(
                    p["status"].get("phase") in ("Failed", "Succeeded") or not _is_alive(p)
                    for p in pods
                )
                or len(pods) < size
            )
            stale = any(p["metadata"]["labels"].get(LWS_TEMPLATE_HASH) != thash for p in pods)
            if g >= replicas or (broken and len(pods) > 0 and _any_alive(pods)):
                for p in pods:
                    self._delete_pod(p)
                is_rolling = is_rolling or g < replicas
            elif stale and not is_rolling:
                for p in pods:
                    self._delete_pod(p)
                is_rolling = True
        ready = 0
        for g in range(replicas):
            if groups.get(g):
                ready += all(_is_ready(p) for p in groups[g]) and len(groups[g]) == size
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
                                "ownerReferences": [_owner_ref(pod, "v1", "Pod")],
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
            written.update(_key_of(c) for c in self.store.owned_claims(uid))
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
                        "ownerReferences": [_owner_ref(node, "v1", "Node")],
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
            if pod is not None and _is_unbound(pod):
                pending.append(pod)
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], _natural_pod_key(p)))
        if not pending:
            return
        nodes = self.store.peek(NODE)
        for pod in pending:
            self._schedule_one(pod, nodes)

    def _schedule_one(self, pod: Obj, nodes: list[Obj]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        claims: list[Obj] = []
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = self.store.peek_one(
                RESOURCE_CLAIM, entry["resourceClaimName"], meta["namespace"]
            )
            if claim is not None:
                claims.append(claim)
        if len(claims) < len(spec.get("resourceClaims") or []):
            return  # its claims are not made yet
        published = self.store.published()
        taken = self.store.taken()
        group = (meta.get("labels") or {}).get(LWS_GROUP_KEY)
        gang_nodes = (
            {
                p["spec"].get("nodeName")
                for p in self.store.peek(POD, meta["namespace"], {LWS_GROUP_KEY: group})
                if _is_alive(p)
            }
            if group
            else set()
        )
        claim_requests = [dra.claim_requests(c, self.class_drivers) for c in claims]
        reasons: dict[str, int] = defaultdict(int)
        # The nodes that pass the filters, with their free devices: the node chosen is the
        # first of them in the node choice's order whose devices can hold every claim. So the
        # claims are tried in that order and the first fit ends the search; only when no node
        # fits is every node tried, and every reason counted.
        candidates: list[tuple[str, int]] = []
        for node in nodes:
            name = node["metadata"]["name"]
            reason = _node_filter(node, spec)
            if reason is None and name in gang_nodes:
                reason = "node(s) already had a pod of the same group"
            if reason is not None:
                reasons[reason] += 1
                continue
            free = sum(1 for d in published.get(name, []) if d.key not in taken)
            candidates.append((name, free))
        if self.behaviour.node_choice is NodeChoice.PACK:
            candidates.sort(key=lambda f: (f[1], dra.natural_key(f[0])))
        else:
            candidates.sort(key=lambda f: (-f[1], dra.natural_key(f[0])))
        chosen: tuple[str, list[tuple[Obj, list[dict[str, str]]]]] | None = None
        for name, _ in candidates:
            fits = self._allocate_on(published.get(name, []), taken, claims, claim_requests)
            if fits is not None:
                chosen = (name, fits)
                break
            reasons["cannot allocate all claims"] += 1
        if chosen is None:
            summary = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            message = f"0/{len(nodes)} nodes are available: {summary}."
            self._mark_unschedulable(pod, message)
            return
        node_name, allocations = chosen
        for claim, results in allocations:
            self.store.patch_status_shared(
                RESOURCE_CLAIM,
                claim["metadata"]["name"],
                claim["metadata"]["namespace"],
                {
                    "allocation": _allocation(results, node_name),
                    "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
                },
            )
        try:
            current = self.store.peek_one(POD, meta["name"], meta["namespace"])
            if current is None:
                return
            self.store.update_shared(
                {**current, "spec": {**current["spec"], "nodeName": node_name}}
            )
        except Conflict:
            return
        conditions = [
            c for c in pod["status"].get("conditions") or [] if c["type"] != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": format_time(self.loop.now),
            }
        )
        self.store.patch_status_shared(
            POD, meta["name"], meta["namespace"], {"conditions": conditions}
        )

    @staticmethod
    def _allocate_on(
        devices: Sequence[dra.PublishedDevice],
        taken: Container[dra.DeviceKey],
        claims: Sequence[Obj],
        claim_requests: Sequence[Sequence[dra.Request]],
    ) -> list[tuple[Obj, list[dict[str, str]]]] | None:
        """Each claim's devices on a node with `devices` (first fit, one claim after the
        other), or None when one of them does not fit."""
        # Only this node's devices are looked up in `taken`: not a copy of every taken one.
        node_taken = {d.key for d in devices if d.key in taken}
        allocations: list[tuple[Obj, list[dict[str, str]]]] = []
        for claim, requests in zip(claims, claim_requests, strict=True):
            results = dra.allocate(requests, devices, node_taken)
            if results is None:
                return None
            node_taken |= {(r["driver"], r["pool"], r["device"]) for r in results}
            allocations.append((claim, results))
        return allocations

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        conditions = pod["status"].get("conditions") or []
        for c in conditions:
            if c["type"] == "PodScheduled" and c.get("message") == message:
                return
        conditions = [c for c in conditions if c["type"] != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": format_time(self.loop.now),
            }
        )
        self.store.patch_status_shared(
            POD, pod["metadata"]["name"], pod["metadata"]["namespace"], {"conditions": conditions}
        )

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

    # --- cluster-autoscaler ---------------------------------------------------------------

    def _autoscaler(self) -> None:
        self._scale_up()
        self._scale_down()

    def _scale_up(self) -> None:
        pending: dict[str, list[Obj]] = defaultdict(list)
        for pod in self.store.peek(POD):
            if pod["spec"].get("nodeName") or not _is_alive(pod):
                continue
            if not any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in pod["status"].get("conditions") or []
            ):
                continue
            pool = (pod["spec"].get("nodeSelector") or {}).get(labels.POOL)
            if pool in self.pools:
                pending[pool].append(pod)
        self._has_unschedulable = bool(pending)
        published = {s["spec"].get("nodeName") for s in self.store.peek(RESOURCE_SLICE)}
        for pool_name, pods in sorted(pending.items()):
            pool = self.pools[pool_name]
            template = self._template_devices(pool)
            demands: list[tuple[str | None, dict[str, int], Obj]] = []
            for pod in pods:
                demand = self._pod_demand(pod, template)
                if demand is None:
                    self._record_event(pod, "NotTriggerScaleUp", "pod does not fit a new node")
                    continue
                group = (pod["metadata"].get("labels") or {}).get(LWS_GROUP_KEY)
                demands.append((group, demand, pod))
            if not demands:
                continue
            existing = len(self._peek_nodes(pool_name))
            upcoming = self._provisioning[pool_name] + sum(
                1 for n in self._peek_nodes(pool_name) if n["metadata"]["name"] not in published
            )
            needed = _nodes_needed(demands, _full(pool), upcoming)
            ceiling = pool.max_node_count if pool.max_node_count is not None else existing
            room = max(0, ceiling - existing - self._provisioning[pool_name])
            add = min(needed, room)
            if needed > 0 and (add == 0 or self.behaviour.is_stocked_out):
                reason = "stockout" if self.behaviour.is_stocked_out else "max node count reached"
                for _, _, pod in demands:
                    self._record_event(
                        pod, "NotTriggerScaleUp", f"pod didn't trigger scale-up: {reason}"
                    )
                continue
            for _ in range(add):
                self._provisioning[pool_name] += 1
                self.loop.after(
                    self.behaviour.scale_up_delay_s,
                    functools.partial(self._provisioned, pool_name),
                    f"{self.name}/scale-up/{pool_name}",
                )
            if add:
                for _, _, pod in demands:
                    self._record_event(
                        pod, "TriggeredScaleUp", f"pod triggered scale-up: {pool_name}"
                    )

    def _provisioned(self, pool_name: str) -> None:
        self._provisioning[pool_name] -= 1
        self.add_node(pool_name)

    def _scale_down(self) -> None:
        now = self.loop.now
        taken_nodes: set[str] = set()
        for claim in self.store.peek(RESOURCE_CLAIM):
            for term in _allocation_nodes(claim):
                taken_nodes.add(term)
        busy = {
            p["spec"].get("nodeName")
            for p in self.store.peek(POD)
            if p["status"].get("phase") not in ("Failed", "Succeeded")
        }
        idle_for = timedelta(seconds=self.behaviour.scale_down_idle_s)
        for pool in self.spec.pools:
            if pool.max_node_count is None:
                continue  # a fixed-size pool: no autoscaling node group behind it
            nodes = self._peek_nodes(pool.name)
            count = len(nodes)
            for node in sorted(nodes, key=lambda n: dra.natural_key(n["metadata"]["name"])):
                name = node["metadata"]["name"]
                if name in busy or name in taken_nodes:
                    self._idle_since.pop(name, None)
                    continue
                since = self._idle_since.setdefault(name, now)
                if now >= since + idle_for and count > pool.min_node_count:
                    self.remove_node(name)
                    count -= 1

    def _template_devices(self, pool: PoolSpec) -> list[dra.PublishedDevice]:
        out: list[dra.PublishedDevice] = []
        for d in pool.devices:
            if d.claim != "DRA":
                continue
            for i in range(d.count):
                out.append(
                    dra.PublishedDevice(
                        d.driver,
                        "template",
                        f"{d.name}-{i}",
                        "template",
                        {k: dict(v) for k, v in d.attributes.items()},
                        {k: {"value": v} for k, v in d.capacity.items()},
                    )
                )
        return out

    def _pod_demand(self, pod: Obj, template: list[dra.PublishedDevice]) -> dict[str, int] | None:
        """Devices per driver the pod needs, or None when an empty node of the pool can't fit it."""
        node = {"spec": {"taints": [dict(GPU_TAINT)] if self.behaviour.has_gpu_taint else []}}
        if _untolerated(node, pod["spec"]):
            return None
        demand: dict[str, int] = defaultdict(int)
        taken: set[dra.DeviceKey] = set()
        for entry in pod["status"].get("resourceClaimStatuses") or []:
            claim = self.store.peek_one(
                RESOURCE_CLAIM, entry["resourceClaimName"], pod["metadata"]["namespace"]
            )
            if claim is None:
                continue
            results = dra.allocate(dra.claim_requests(claim, self.class_drivers), template, taken)
            if results is None:
                return None
            for r in results:
                demand[r["driver"]] += 1
                taken.add((r["driver"], r["pool"], r["device"]))
        return dict(demand)

    def _record_event(self, pod: Obj, reason: str, message: str) -> None:
        meta = pod["metadata"]
        for e in self.store.events_of(meta["uid"], meta["namespace"]):
            if e.get("reason") == reason:
                return
        self._event_seq += 1
        self.store.create_shared(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{self._event_seq:x}",
                    "namespace": meta["namespace"],
                },
                "involvedObject": {
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "source": {"component": "cluster-autoscaler"},
                "type": "Normal",
            }
        )

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
                    "ownerReferences": [_owner_ref(owner, owner["apiVersion"], owner["kind"])],
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


#: An object's key in the store within its kind: (namespace or "", name); sorted keys are
#: `peek` order.
_Key = tuple[str, str]


def _key_of(obj: Obj) -> _Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _enqueue(queue: set[_Key], key: _Key, is_wanted: bool) -> None:
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


def _is_unbound(pod: Obj) -> bool:
    """The scheduler has to bind the pod."""
    return (
        not pod["spec"].get("nodeName")
        and _is_alive(pod)
        and pod["status"].get("phase", "Pending") == "Pending"
    )


def _is_kubelet_work(pod: Obj) -> bool:
    """The kubelet has to start the pod (once its node is Ready) or finish it."""
    if pod["metadata"].get("deletionTimestamp"):
        return True
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") == "Pending"


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def _owner_ref(owner: Obj, api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _allocation(results: list[dict[str, str]], node: str) -> Obj:
    return {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def _allocation_nodes(claim: Obj) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r["pool"] for r in (allocation.get("devices") or {}).get("results") or []]


def _set_taint(node: Obj, taint: Mapping[str, str], present: bool) -> None:
    taints = [
        t
        for t in node["spec"].get("taints") or []
        if not (t["key"] == taint["key"] and t["effect"] == taint["effect"])
    ]
    if present:
        taints.append(dict(taint))
    node["spec"]["taints"] = taints


def _is_alive(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp")


def _any_alive(pods: Iterable[Obj]) -> bool:
    return any(_is_alive(p) for p in pods)


def _is_ready(pod: Obj) -> bool:
    return pod["status"].get("phase") == "Running" and _is_alive(pod)


def _is_node_ready(node: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def _scale_down_order(pod: Obj) -> tuple[int, int, str]:
    """Kubernetes deletes unbound before bound, not-ready before ready, newest first."""
    return (
        1 if pod["spec"].get("nodeName") else 0,
        1 if _is_ready(pod) else 0,
        "".join(chr(255 - ord(c)) for c in pod["metadata"]["creationTimestamp"]),
    )


def _natural_pod_key(pod: Obj) -> tuple[Any, ...]:
    return (pod["metadata"]["namespace"], *dra.natural_key(pod["metadata"]["name"]))


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
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


def _untolerated(node: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> str | None:
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not _tolerates(tolerations, taint):
            return str(taint["key"])
    return None


def _node_filter(node: Obj, pod_spec: Mapping[str, Any]) -> str | None:
    """Why the node cannot take the pod (kube-scheduler's wording), or None."""
    node_labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if node_labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    if not _is_node_ready(node):
        return "node(s) were not ready"
    if node["spec"].get("unschedulable"):
        return "node(s) were unschedulable"
    taint = _untolerated(node, pod_spec)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint}}}"
    return None


def _full(pool: PoolSpec) -> dict[str, int]:
    full: dict[str, int] = defaultdict(int)
    for d in pool.devices:
        if d.claim == "DRA":
            full[d.driver] += d.count
    return dict(full)


def _nodes_needed(
    demands: list[tuple[str | None, dict[str, int], Obj]], full: Mapping[str, int], upcoming: int
) -> int:
    """New nodes for the pending pods, first-fit decreasing onto `upcoming` nodes first."""
    bins: list[tuple[dict[str, int], set[str]]] = [(dict(full), set()) for _ in range(upcoming)]
    order = sorted(demands, key=lambda d: (-sum(d[1].values()), d[2]["metadata"]["name"]))
    for group, demand, _ in order:
        for free, groups in bins:
            if group is not None and group in groups:
                continue
            if all(free.get(k, 0) >= v for k, v in demand.items()):
                for k, v in demand.items():
                    free[k] -= v
                if group is not None:
                    groups.add(group)
                break
        else:
            free = dict(full)
            for k, v in demand.items():
                free[k] -= v
            bins.append((free, {group} if group is not None else set()))
    return max(0, len(bins) - upcoming)
