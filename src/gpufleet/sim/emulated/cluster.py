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
  node. A pool's sim-only device models (`PoolSpec.partitions`, `tainted_devices`) add counter
  sets and MIG partitions, and device taints (`dra.node_devices`).
- **cluster-autoscaler** (every `autoscaler_scan_s`): for unschedulable pods that would fit an
  empty node of their pool, adds nodes (after `scale_up_delay_s`) up to `maxNodeCount`,
  counting nodes on the way; removes nodes idle for `scale_down_idle_s` down to
  `minNodeCount` (only in pools with a `maxNodeCount`: a fixed-size pool has no autoscaled node
  group behind it). Under stockout it adds nothing and records `NotTriggerScaleUp` events.
- **Evictions** (`gpufleet.sim.emulated.disruption`): `drain(node)` cordons the node and
  evicts its pods as `kubectl drain` does, through the API server's eviction rules: a pod a
  PodDisruptionBudget guards goes only once the budget allows it (or is gone); refused
  evictions are retried every 5 s.
- Operations for scenarios: other tenants' claims, cordon/uncordon, drain, taints, node failure
  and recovery.

A tick costs what changed since the last, not what exists: as informers feed a controller's
work queue, the `ChangeFeed` reads the store's change log (no copies) into per-component queues
before each component runs, and a component visits only what its queue names (a workload that or
whose pods changed; a pod written or orphaned; a pod missing its claim; a claim written or
whose pod went; an unbound pod; a pod the kubelet has to start or finish), in `peek` order,
so that its writes come in the order a pass over every object would make them.
`visit_all=True` makes every pass visit every object: the reference the queues are tested
against.

Each component is a small class with its own queue and state, beside this module: `workloads`
(garbage collector, Deployment and LeaderWorkerSet controllers), `pods` (resourceclaim
controller, DRA driver, node lifecycle, kube-scheduler's queue, kubelet), `kube_scheduler`
(binding one pod) and `autoscaler`; `informer` is the change feed that fills their queues.
`WorkloadCluster` owns the store and the components, runs them in order and is the scenarios'
handle on the cluster. The other parts: `cluster_spec` (what a cluster is made of), `sim_store`
(its store), `objects` (pure helpers on its objects).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpufleet.core import labels
from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.autoscaler import ClusterAutoscaler
from gpufleet.sim.emulated.cluster_spec import ClusterBehaviour, ClusterSpec, DeviceSpec, PoolSpec
from gpufleet.sim.emulated.disruption import Drains
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.informer import ChangeFeed, WorkloadIndex
from gpufleet.sim.emulated.kube_scheduler import KubeScheduler
from gpufleet.sim.emulated.objects import (
    GPU_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    allocation_status,
    set_taint,
)
from gpufleet.sim.emulated.pods import (
    DraDriver,
    Kubelet,
    NodeLifecycle,
    ResourceClaimController,
    SchedulingQueue,
)
from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.sim.emulated.workloads import (
    DeploymentController,
    GarbageCollector,
    LwsController,
    force_remove,
)
from gpufleet.store.port import NODE, RESOURCE_CLAIM, RESOURCE_SLICE, NotFound, Obj

__all__ = [
    "ClusterBehaviour",
    "ClusterSpec",
    "DeviceSpec",
    "PoolSpec",
    "SimStore",
    "WorkloadCluster",
]


class WorkloadCluster:
    """An emulated workload cluster. `start()` registers its components on the loop."""

    def __init__(self, spec: ClusterSpec, loop: EventLoop, visit_all: bool = False) -> None:
        """`visit_all`: every pass visits every object instead of only what changed since
        the last (the reference the incremental passes are tested against; same outcome)."""
        self.spec = spec
        self.loop = loop
        self.store = SimStore(clock=loop.clock, uid_seed=f"cluster/{spec.name}")
        self.pools = {p.name: p for p in spec.pools}
        class_drivers = {
            d.device_class_name: d.driver for p in spec.pools for d in p.devices if d.claim == "DRA"
        }
        self._node_seq: dict[str, int] = defaultdict(int)
        self._foreign_seq = 0
        # Quiet ticks: the store revision after the last tick that ran, and the earliest time
        # a timer (pod start, grace, slice publish, eviction, autoscaler scan) needs a tick.
        self._settled_revision = -1
        self._due: datetime | None = None
        #: Ticks skipped because nothing changed and no timer was due (for benchmarks).
        self.ticks_skipped = 0
        # The components, in the order a tick runs them; each registers its handlers on the
        # feed (the index first: the workload controllers hear pod owners through it).
        behaviour, store = spec.behaviour, self.store
        feed = self._feed = ChangeFeed(store)
        index = WorkloadIndex(feed)
        self._garbage_collector = GarbageCollector(store, feed, index, visit_all)
        self._deployments = DeploymentController(store, loop, feed, index, visit_all)
        self._leader_worker_sets = LwsController(store, loop, feed, index, visit_all)
        self._claims = ResourceClaimController(store, feed, visit_all)
        self._dra_driver = DraDriver(store, loop, behaviour, self.pools, self._wake_at)
        self._node_lifecycle = NodeLifecycle(store, loop, behaviour, self._wake_at)
        scheduler = KubeScheduler(store, behaviour, class_drivers, loop)
        self._scheduling = SchedulingQueue(store, feed, scheduler, visit_all)
        self._kubelet = Kubelet(store, loop, behaviour, feed, self._wake_at, visit_all)
        self.autoscaler = ClusterAutoscaler(spec, loop, store, class_drivers, self)
        #: `kubectl drain`s under way: evictions through the PodDisruptionBudgets, retried.
        self.drains = Drains(store, loop, self._wake_at)
        for pool in spec.pools:
            for _ in range(pool.node_count):
                name = self.add_node(pool.name)
                self._dra_driver.publish_slices(name)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def behaviour(self) -> ClusterBehaviour:
        return self.spec.behaviour

    @property
    def scheduler(self) -> KubeScheduler:
        return self._scheduling.scheduler

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

    def _run_components(self) -> None:
        self.drains.run()
        self._garbage_collector.run()
        self._deployments.run()
        self._leader_worker_sets.run()
        self._claims.run()
        self._dra_driver.run()
        self._node_lifecycle.run()
        self._scheduling.run()
        self._kubelet.run()
        wake = self.autoscaler.run()
        if wake is not None:
            self._wake_at(wake)

    # --- scenario operations --------------------------------------------------------------

    def add_node(self, pool_name: str) -> str:
        """Add a Ready node to a pool (its slices follow after the publish delay)."""
        self._node_seq[pool_name] += 1
        name = f"{pool_name}-{self._node_seq[pool_name] - 1}"
        taints = [dict(GPU_TAINT)] if self.behaviour.has_gpu_taint else []
        shape = self.pools.get(pool_name) or PoolSpec(pool_name)
        extended = {  # a device plugin's GPUs, on the node's allocatable
            d.resource_name: str(d.count)
            for d in shape.devices
            if d.claim == "DevicePlugin" and d.resource_name
        }
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
                    "allocatable": {
                        "cpu": shape.node_cpu,
                        "memory": shape.node_memory,
                        "pods": "110",
                        **extended,
                    },
                },
            }
        )
        self._dra_driver.node_added(name)
        return name

    def remove_node(self, name: str) -> None:
        """Delete a node and its slices; its pods are removed and recreated elsewhere."""
        for s in self.store.peek(RESOURCE_SLICE):
            if s["spec"].get("nodeName") == name:
                self.store.delete(RESOURCE_SLICE, s["metadata"]["name"])
        for pod in self.store.pods_on(name):
            force_remove(self.store, pod)
        self.store.delete(NODE, name)
        self._dra_driver.node_removed(name)
        self.autoscaler.forget_node(name)
        self.drains.forget(name)

    def cordon(self, name: str, is_cordoned: bool = True) -> None:
        def change(node: Obj) -> None:
            node["spec"]["unschedulable"] = is_cordoned
            set_taint(node, UNSCHEDULABLE_TAINT, is_cordoned)

        self._update_node(name, change)

    def uncordon(self, name: str) -> None:
        self.cordon(name, False)

    def drain(self, name: str) -> None:
        """`kubectl drain --ignore-daemonsets`: cordon (unless cordoned), then evict every pod
        on the node through its PodDisruptionBudgets, retrying the refused ones."""
        node = self.store.peek_one(NODE, name)
        if node is None:
            raise NotFound(f"node {name}")
        if not node["spec"].get("unschedulable"):
            self.cordon(name)
        self.drains.drain(name)

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
        self._node_lifecycle.node_failed(name)

    def recover_node(self, name: str) -> None:
        self._update_node(name, lambda n: set_taint(n, UNREACHABLE_TAINT, False))
        self._set_ready(name, True)
        self._node_lifecycle.node_recovered(name)

    def add_foreign_claim(
        self,
        node: str,
        count: int = 1,
        namespace: str = "other-tenant",
        driver: str = "",
        named: str = "",
    ) -> str:
        """Another tenant's claim, allocated on `node` (first free devices, or the one named
        `named`: a MIG partition). Returns its name."""
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
        if named:
            taken = self.store.taken()
            results = [
                {"request": "device", "driver": d.driver, "pool": d.pool, "device": d.name}
                for d in devices
                if d.name == named and d.key not in taken
            ] or None
        if results is None:
            want = f"device {named}" if named else f"{count} {device.driver} devices"
            raise ValueError(f"node {node} has no free {want}")
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

    def add_host_pod(
        self,
        node: str,
        cpu: str,
        memory: str,
        namespace: str = "other-tenant",
        *,
        is_daemon: bool = False,
    ) -> str:
        """Another tenant's (or, `is_daemon`, a DaemonSet's: owned by one) pod, bound to
        `node` and Running, requesting `cpu` and `memory` (no devices): it takes host room,
        as kube-scheduler and the agent count it. Returns its name."""
        self._foreign_seq += 1
        name = f"host-{self._foreign_seq}"
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if is_daemon:
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent", "uid": "ds"}
            ]
        self.store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "main",
                            "resources": {"requests": {"cpu": cpu or "0", "memory": memory or "0"}},
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }
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
