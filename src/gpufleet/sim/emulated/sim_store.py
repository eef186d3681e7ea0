"""The emulated workload cluster's store (`SimStore`): a `MemoryStore` with the indexes and
per-revision caches its components ask on every pass."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from gpufleet.core import labels
from gpufleet.sim.emulated import dra
from gpufleet.sim.emulated.objects import ObjKey, is_node_ready, is_unschedulable, key_of
from gpufleet.store import MemoryStore, pod_updates
from gpufleet.store.port import (
    EVENT,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ChangeType,
    Invalid,
    Obj,
    kind_of,
)


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
    of pods. Unschedulable pods are indexed too (`unschedulable_pods`). `changes_after` is the change log without copies, which the components' work
    queues and `taken` follow."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._published: tuple[int, dict[str, list[dra.PublishedDevice]]] = (-1, {})
        self._published_keys: tuple[int, dict[str, tuple[dra.DeviceKey, ...]]] = (-1, {})
        self._taken: tuple[int, frozenset[dra.DeviceKey]] = (-1, frozenset())
        # What `taken` keeps: per claim, the devices it holds; per device, how many claims
        # hold it; and how far in the change log it has read.
        self._claim_devices: dict[ObjKey, tuple[dra.DeviceKey, ...]] = {}
        self._taken_count: Counter[dra.DeviceKey] = Counter()
        self._taken_cursor = 0
        #: Every time a device came to be held by two claims (an invariant of the run: never),
        #: with the claims holding it then; `taken` finds them as it reads the change log.
        self.double_held: list[tuple[dra.DeviceKey, tuple[ObjKey, ...]]] = []
        self._ready_nodes: tuple[int, frozenset[str]] = (-1, frozenset())
        self._nodes_by_pool: tuple[int, dict[str, list[str]]] = (-1, {})
        self._unpublished: tuple[tuple[int, int], list[str]] = ((-1, -1), [])
        self.add_index(POD, BY_OWNER, owner_uids)
        self.add_index(POD, _BY_NODE, _node_name)
        self.add_index(EVENT, _BY_OBJECT, _involved_uid)
        self.add_index(RESOURCE_CLAIM, BY_OWNER, owner_uids)
        self.add_index(POD, _UNSCHEDULABLE, _is_unschedulable)

    def update_shared(self, obj: Obj) -> Obj:
        """`MemoryStore.update_shared`, with the API server's rules for a Pod's spec
        (`gpufleet.store.pod_updates`: gates only removed, scheduling directives only narrowed
        while gated, frozen after): a write that breaks one is refused (`Invalid`)."""
        if kind_of(obj) == POD:
            meta = obj.get("metadata") or {}
            current = self.peek_one(POD, str(meta.get("name", "")), meta.get("namespace"))
            if current is not None and obj.get("spec") is not current.get("spec"):
                broken = pod_updates.violation(current.get("spec") or {}, obj.get("spec") or {})
                if broken is not None:
                    raise Invalid(
                        f"Pod {meta.get('namespace')}/{meta.get('name')} is invalid: {broken}"
                    )
        return super().update_shared(obj)

    def ready_nodes(self) -> frozenset[str]:
        """The names of the Ready nodes (cached per revision of the Nodes)."""
        revision = self.kind_revision(NODE)
        if self._ready_nodes[0] != revision:
            ready = frozenset(n["metadata"]["name"] for n in self.peek(NODE) if is_node_ready(n))
            self._ready_nodes = (revision, ready)
        return self._ready_nodes[1]

    def nodes_by_pool(self) -> dict[str, list[str]]:
        """The names of the nodes of each pool (label `gpufleet.io/pool`, "" for none), in
        node order (cached per revision of the Nodes)."""
        revision = self.kind_revision(NODE)
        if self._nodes_by_pool[0] != revision:
            by_pool: dict[str, list[str]] = {}
            for n in self.peek(NODE):
                pool = (n["metadata"].get("labels") or {}).get(labels.POOL, "")
                by_pool.setdefault(pool, []).append(n["metadata"]["name"])
            self._nodes_by_pool = (revision, by_pool)
        return self._nodes_by_pool[1]

    def unpublished_nodes(self) -> list[str]:
        """The Ready nodes no ResourceSlice names yet, in node order (cached per revision of
        the Nodes and the ResourceSlices): what the DRA driver still has to publish."""
        revisions = (self.kind_revision(NODE), self.kind_revision(RESOURCE_SLICE))
        if self._unpublished[0] != revisions:
            published = {s["spec"].get("nodeName") for s in self.peek(RESOURCE_SLICE)}
            waiting = [
                n["metadata"]["name"]
                for n in self.peek(NODE)
                if n["metadata"]["name"] not in published and is_node_ready(n)
            ]
            self._unpublished = (revisions, waiting)
        return self._unpublished[1]

    def owned_pods(self, owner_uid: str, namespace: str) -> list[Obj]:
        """The pods of `namespace` with an ownerReference to `owner_uid`, in `peek` order."""
        return self.peek_indexed(POD, BY_OWNER, owner_uid, namespace)

    def pods_on(self, node: str) -> list[Obj]:
        """The pods bound to `node`, in `peek` order."""
        return self.peek_indexed(POD, _BY_NODE, node)

    def nodes_with_pods(self) -> set[str]:
        """The nodes at least one pod is bound to (`pods_on` is empty for any other)."""
        return {str(node) for node in self.indexed_values(POD, _BY_NODE)}

    def unschedulable_pods(self) -> list[Obj]:
        """The pods `is_unschedulable` holds for, in `peek` order: what the run's invariants
        look at every sample, among pods that are almost all running."""
        return self.peek_indexed(POD, _UNSCHEDULABLE, True)

    def owned_claims(self, owner_uid: str) -> list[Obj]:
        """The ResourceClaims with an ownerReference to `owner_uid`, in `peek` order."""
        return self.peek_indexed(RESOURCE_CLAIM, BY_OWNER, owner_uid)

    def events_of(self, uid: str, namespace: str) -> list[Obj]:
        """The Events of `namespace` about the object `uid`, in `peek` order."""
        return self.peek_indexed(EVENT, _BY_OBJECT, uid, namespace)

    def published(self) -> dict[str, list[dra.PublishedDevice]]:
        revision = self.kind_revision(RESOURCE_SLICE)
        if self._published[0] != revision:
            self._published = (revision, dra.published_devices(self.peek(RESOURCE_SLICE)))
        return self._published[1]

    def published_keys(self) -> dict[str, tuple[dra.DeviceKey, ...]]:
        """Per node, the key of each device `published` on it, in its order (cached per
        revision of the ResourceSlices, as `published` is)."""
        revision = self.kind_revision(RESOURCE_SLICE)
        if self._published_keys[0] != revision:
            keys = {node: tuple(d.key for d in devs) for node, devs in self.published().items()}
            self._published_keys = (revision, keys)
        return self._published_keys[1]

    def taken(self) -> frozenset[dra.DeviceKey]:
        """`dra.taken_devices` of every claim, kept up to date from the change log: the
        scheduler asks after each pod it binds (the claims changed), and reading every claim
        again each time cost more than the rest of its pass."""
        revision = self.kind_revision(RESOURCE_CLAIM)
        if self._taken[0] != revision:
            # Most claim writes take or free no device (a claim made, `reservedFor`): the
            # set is made again only when a device came to be held or stopped being held.
            moved = False
            for change in self.changes_after(self._taken_cursor):
                if change.kind != RESOURCE_CLAIM:
                    continue
                key = key_of(change.obj)
                for device in self._claim_devices.pop(key, ()):
                    self._taken_count[device] -= 1
                    if not self._taken_count[device]:
                        del self._taken_count[device]
                        moved = True
                if change.type is ChangeType.DELETED:
                    continue
                devices = tuple(dra.taken_devices([change.obj]))
                if devices:
                    self._claim_devices[key] = devices
                    for device in devices:
                        self._taken_count[device] += 1
                        moved = moved or self._taken_count[device] == 1
                        if self._taken_count[device] == 2:
                            self._record_double(device)
            self._taken_cursor = self.revision
            taken = frozenset(self._taken_count) if moved else self._taken[1]
            self._taken = (revision, taken)
        return self._taken[1]

    def _record_double(self, device: dra.DeviceKey) -> None:
        holders = tuple(sorted(k for k, held in self._claim_devices.items() if device in held))
        self.double_held.append((device, holders))


BY_OWNER: Final = "owner"
_BY_NODE: Final = "node"
_BY_OBJECT: Final = "involvedObject"
_UNSCHEDULABLE: Final = "unschedulable"


def owner_uids(obj: Obj) -> list[str]:
    return [r["uid"] for r in obj["metadata"].get("ownerReferences") or []]


def _node_name(pod: Obj) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


def _is_unschedulable(pod: Obj) -> list[bool]:
    return [True] if is_unschedulable(pod) else []


def _involved_uid(event: Obj) -> list[str]:
    uid = (event.get("involvedObject") or {}).get("uid")
    return [uid] if uid else []
