"""The emulated components of one cluster that act on pods, claims and nodes one by one: the
resourceclaim controller, the DRA driver, the node lifecycle controller, kube-scheduler's
queue and the kubelet (what each does: the cluster's module docstring,
`gpufleet.sim.emulated.cluster`).

Each keeps its own work queue, fed by the cluster's `ChangeFeed`, and its own timers; a timer
that falls due later asks the cluster for a tick then (`wake_at`). `visit_all=True` makes every
pass visit every object (the reference the queues are tested against).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from gpufleet.core import labels
from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.cluster_spec import ClusterBehaviour, PoolSpec
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.informer import ChangeFeed, all_keys, enqueue
from gpufleet.sim.emulated.kube_scheduler import KubeScheduler
from gpufleet.sim.emulated.objects import (
    ObjKey,
    is_unbound,
    is_unschedulable,
    key_of,
    natural_pod_key,
    owner_ref,
)
from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.sim.emulated.workloads import delete, finish
from gpufleet.store import format_time
from gpufleet.store.port import (
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    Change,
    ChangeType,
    Obj,
)

#: Asks the cluster for a tick at the given time (a timer falls due).
WakeAt = Callable[[datetime], None]


# --- resourceclaim controller ---------------------------------------------------------


class ResourceClaimController:
    """Makes claim `<pod>-<claim>` from the pod's template and releases it once the pod is
    gone."""

    def __init__(self, store: SimStore, feed: ChangeFeed, visit_all: bool) -> None:
        self.store = store
        self._feed = feed
        self._visit_all = visit_all
        #: Pods still missing a claim; claims written, and pods deleted, since the last pass.
        self._claimless: set[ObjKey] = set()
        self._written_claims: set[ObjKey] = set()
        self._gone_pods: set[str] = set()
        self._live_pods: set[str] = set()
        feed.watch(POD, self._pod_changed)
        feed.watch(RESOURCE_CLAIM, self._claim_changed)

    def _pod_changed(self, change: Change) -> None:
        pod = change.obj
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        if change.type is ChangeType.DELETED:
            self._live_pods.discard(uid)
            self._gone_pods.add(uid)
            self._claimless.discard(key)
            return
        self._live_pods.add(uid)
        enqueue(self._claimless, key, _is_missing_claim(pod))

    def _claim_changed(self, change: Change) -> None:
        if change.type is not ChangeType.DELETED:
            meta = change.obj["metadata"]
            self._written_claims.add((meta["namespace"], meta["name"]))

    def run(self) -> None:
        """Make the claims pods miss (the pods queued in `_claimless`, in `peek` order), then
        release the claims whose pods are gone (among the claims written and those of the pods
        deleted since the last pass: a claim is released only after one of these)."""
        self._feed.sync()
        claimless = all_keys(self.store, POD) if self._visit_all else self._claimless
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
        self._feed.sync()
        written, self._written_claims = self._written_claims, set()
        gone, self._gone_pods = self._gone_pods, set()
        if self._visit_all:
            written = all_keys(self.store, RESOURCE_CLAIM)
        for uid in gone:
            written.update(key_of(c) for c in self.store.owned_claims(uid))
        for key in sorted(written):
            claim = self.store.peek_one(RESOURCE_CLAIM, key[1], key[0])
            if claim is None:
                continue
            refs = [r for r in claim["metadata"].get("ownerReferences") or [] if r["kind"] == "Pod"]
            if refs and not any(r["uid"] in self._live_pods for r in refs):
                delete(self.store, RESOURCE_CLAIM, claim)


# --- DRA driver -----------------------------------------------------------------------


class DraDriver:
    """Publishes one ResourceSlice per node and driver `dra_publish_delay_s` after the node
    appears."""

    def __init__(
        self,
        store: SimStore,
        loop: EventLoop,
        behaviour: ClusterBehaviour,
        pools: dict[str, PoolSpec],
        wake_at: WakeAt,
    ) -> None:
        self.store = store
        self.loop = loop
        self.behaviour = behaviour
        self.pools = pools
        self._wake_at = wake_at
        #: When each node appeared (its slices are published after the delay).
        self._node_created: dict[str, datetime] = {}

    def node_added(self, name: str) -> None:
        self._node_created[name] = self.loop.now

    def node_removed(self, name: str) -> None:
        self._node_created.pop(name, None)

    def run(self) -> None:
        delay = timedelta(seconds=self.behaviour.dra_publish_delay_s)
        for name in list(self.store.unpublished_nodes()):
            created = self._node_created.get(name, self.loop.now)
            if self.loop.now >= created + delay:
                self.publish_slices(name)
            else:
                self._wake_at(created + delay)

    def publish_slices(self, node_name: str) -> None:
        node = self.store.peek_one(NODE, node_name)
        if node is None:
            return
        pool = self.pools.get(node["metadata"]["labels"].get(labels.POOL, ""))
        if pool is None:
            return
        for driver, spec in dra.slice_specs(node_name, pool):
            self.store.create_shared(
                {
                    "apiVersion": RESOURCE_SLICE.api_version,
                    "kind": RESOURCE_SLICE.kind,
                    "metadata": {
                        "name": f"{node_name}-{driver.replace('.', '-')}",
                        "ownerReferences": [owner_ref(node, "v1", "Node")],
                    },
                    "spec": spec,
                }
            )


# --- node lifecycle controller --------------------------------------------------------


class NodeLifecycle:
    """Fails the pods of a node that stopped reporting, `node_eviction_delay_s` after."""

    def __init__(
        self, store: SimStore, loop: EventLoop, behaviour: ClusterBehaviour, wake_at: WakeAt
    ) -> None:
        self.store = store
        self.loop = loop
        self.behaviour = behaviour
        self._wake_at = wake_at
        #: When each failed node stopped reporting.
        self._failed_at: dict[str, datetime] = {}

    def node_failed(self, name: str) -> None:
        self._failed_at[name] = self.loop.now

    def node_recovered(self, name: str) -> None:
        self._failed_at.pop(name, None)

    def run(self) -> None:
        delay = timedelta(seconds=self.behaviour.node_eviction_delay_s)
        for name, since in sorted(self._failed_at.items()):
            if self.loop.now < since + delay:
                self._wake_at(since + delay)
                continue
            for pod in self.store.pods_on(name):
                if pod["status"].get("phase") not in ("Failed", "Succeeded"):
                    self.store.patch_status_shared(
                        POD,
                        pod["metadata"]["name"],
                        pod["metadata"]["namespace"],
                        {"phase": "Failed", "reason": "NodeLost"},
                    )


# --- kube-scheduler's queue -----------------------------------------------------------


class SchedulingQueue:
    """kube-scheduler's queue of unbound Pending pods, oldest first, each handed to the
    scheduler (`KubeScheduler.schedule_one`)."""

    def __init__(
        self, store: SimStore, feed: ChangeFeed, scheduler: KubeScheduler, visit_all: bool
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self._feed = feed
        self._visit_all = visit_all
        self._unbound: set[ObjKey] = set()
        feed.watch(POD, self._pod_changed)

    def _pod_changed(self, change: Change) -> None:
        meta = change.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if change.type is ChangeType.DELETED:
            self._unbound.discard(key)
        else:
            enqueue(self._unbound, key, is_unbound(change.obj))

    def has_unschedulable(self) -> bool:
        """Whether a pod waits unbound, marked Unschedulable (after the scheduler's pass)."""
        for key in self._unbound:
            pod = self.store.peek_one(POD, key[1], key[0])
            if pod is not None and is_unschedulable(pod):
                return True
        return False

    def run(self) -> None:
        self._feed.sync()
        queued = all_keys(self.store, POD) if self._visit_all else self._unbound
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


class Kubelet:
    """Starts a bound pod after `pod_start_delay_s`, finishes a deleted one after
    `termination_grace_s` (at once when its node is not Ready)."""

    def __init__(
        self,
        store: SimStore,
        loop: EventLoop,
        behaviour: ClusterBehaviour,
        feed: ChangeFeed,
        wake_at: WakeAt,
        visit_all: bool,
    ) -> None:
        self.store = store
        self.loop = loop
        self.behaviour = behaviour
        self._feed = feed
        self._wake_at = wake_at
        self._visit_all = visit_all
        #: Pods to start or finish (bound and Pending, or deleted).
        self._kubelet_pods: set[ObjKey] = set()
        self._bound_at: dict[str, datetime] = {}
        self._terminating_at: dict[str, datetime] = {}
        feed.watch(POD, self._pod_changed)

    def _pod_changed(self, change: Change) -> None:
        pod = change.obj
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if change.type is ChangeType.DELETED:
            self._kubelet_pods.discard(key)
            # The kubelet's timers of a pod that is gone (a uid never comes back).
            self._bound_at.pop(meta["uid"], None)
            self._terminating_at.pop(meta["uid"], None)
            return
        enqueue(self._kubelet_pods, key, _is_kubelet_work(pod))

    def run(self) -> None:
        now = self.loop.now
        ready_nodes = self.store.ready_nodes()
        start = timedelta(seconds=self.behaviour.pod_start_delay_s)
        grace = timedelta(seconds=self.behaviour.termination_grace_s)
        self._feed.sync()
        queued = all_keys(self.store, POD) if self._visit_all else self._kubelet_pods
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
                    finish(self.store, pod)
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


# --- pure helpers -----------------------------------------------------------------------


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
