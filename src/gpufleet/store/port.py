"""The store port: the only way the agent and the controller read and write objects.

A `Store` holds Kubernetes-shaped objects (plain dicts, camelCase, exactly as the API server
returns them) and offers what a controller needs from an API server: get, list with label
selectors, a change feed, create, update guarded by `metadata.resourceVersion`, status
patches and delete. Two implementations exist: `MemoryStore` (this package; the simulator and
most tests) and the Kubernetes one in `gpufleet.kube`.

Semantics follow the API server, so logic written against one behaves the same on the other:

- `create` stamps `uid`, `resourceVersion`, `creationTimestamp` and `generation` (1) and
  fails with `AlreadyExists`.
- `update` replaces the object if its `resourceVersion` equals the stored one, else raises
  `Conflict` (the caller re-reads and retries); `generation` grows when `spec` changes. The
  status is not changed by `update` (the status subresource is separate).
- `patch_status` merges `status` (a JSON merge patch of the status field), optionally guarded
  by a resourceVersion.
- `delete` removes the object; with finalizers it only sets `deletionTimestamp`.

Reading: the contract consumers rely on (and the only one: nothing else of an implementation).

- `get` and `list` return the caller's own copies: mutating them never changes the store.
- `view` returns the objects of one listing (sorted by namespace, then name) that may be
  *shared* with the store: a reader must never mutate them (they are typed `Mapping`). A
  stored object is never changed in place either: every write stores a new object, so an
  object once handed out keeps its content for good. The same `resourceVersion` of the same
  object (by uid) always means the same content; a reader may key what it derives from an
  object by (uid, resourceVersion), or by (uid, generation) for what it derives from the spec
  alone. Nothing is promised about the identity (`id`, `is`) of what `view` returns: two views
  of an unchanged store may or may not hand out the same objects, so a reader never keys a
  cache by identity. A view may lag the store's own writes (an informer cache does) but
  never goes back to an older version of an object.
- `changes(cursor, kinds)` returns every change of the given kinds (all kinds when None)
  after `cursor`, oldest first, and the cursor to pass next time. Each `Change` holds the
  object after the change (for DELETED, the last version before it); like `view`'s, it must
  never be mutated. Applying the changes in order to what a view showed at `cursor` gives
  what a view shows at the returned cursor: a reader never misses a change. Cursors only grow;
  0 means "from the start". When the store no longer holds the changes after `cursor` (it
  compacted them, or a watch was dropped) it raises `Expired`: the reader must list again
  (`view`) and continue from a fresh cursor.
- `changes(LATEST, kinds)` returns no change and the newest cursor: a reader that is about to
  list takes its cursor first, so a change made while it lists is read again from the feed
  (an object at a version the listing already showed is no change) rather than missed.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple, Protocol

Obj = dict[str, Any]


class Kind(NamedTuple):
    """A resource type: apiVersion and kind, and whether objects live in namespaces.

    A named tuple rather than a frozen dataclass: every table, feed and index looks kinds
    up by hash, and a tuple hashes and compares in C (a dataclass's generated `__hash__`
    and `__eq__` were about 1.5% of the simulated day)."""

    api_version: str
    kind: str
    namespaced: bool = True

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"


#: A cursor past every change: `changes(LATEST)` returns none, and the newest cursor.
LATEST: Final = sys.maxsize

GROUP_VERSION = "gpufleet.io/v1alpha1"

INFERENCE_CLASS = Kind(GROUP_VERSION, "InferenceClass", namespaced=False)
INFERENCE_CLUSTER = Kind(GROUP_VERSION, "InferenceCluster", namespaced=False)
MODEL_DEPLOYMENT = Kind(GROUP_VERSION, "ModelDeployment")
MODEL_REPLICA = Kind(GROUP_VERSION, "ModelReplica")
POOL_OBSERVATION = Kind(GROUP_VERSION, "PoolObservation")
REPLICA_OBSERVATION = Kind(GROUP_VERSION, "ReplicaObservation")

NODE = Kind("v1", "Node", namespaced=False)
POD = Kind("v1", "Pod")
NAMESPACE = Kind("v1", "Namespace", namespaced=False)
EVENT = Kind("v1", "Event")
LEASE = Kind("coordination.k8s.io/v1", "Lease")
DEPLOYMENT = Kind("apps/v1", "Deployment")
LEADER_WORKER_SET = Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
RESOURCE_SLICE = Kind("resource.k8s.io/v1", "ResourceSlice", namespaced=False)
RESOURCE_CLAIM = Kind("resource.k8s.io/v1", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATE = Kind("resource.k8s.io/v1", "ResourceClaimTemplate")
POD_DISRUPTION_BUDGET = Kind("policy/v1", "PodDisruptionBudget")

KNOWN_KINDS: tuple[Kind, ...] = (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
    NODE,
    POD,
    NAMESPACE,
    EVENT,
    LEASE,
    DEPLOYMENT,
    LEADER_WORKER_SET,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    POD_DISRUPTION_BUDGET,
)


def kind_of(obj: Mapping[str, Any]) -> Kind:
    """The `Kind` of an object from its apiVersion and kind (must be a known kind)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    for known in KNOWN_KINDS:
        if known.api_version == api_version and known.kind == kind:
            return known
    raise StoreError(f"unknown kind {kind!r} of apiVersion {api_version!r}")


class StoreError(Exception):
    """A request the store refused; subclasses say why."""


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    """The object changed since it was read (stale resourceVersion): re-read and retry."""


class Expired(StoreError):
    """The change feed no longer holds the requested cursor (410 Gone): list again."""


class Invalid(StoreError):
    """The request itself is malformed (no name, namespace missing or not allowed...)."""


class ChangeType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Change:
    """One change in the feed; `obj` is the object after the change (before, for DELETED)."""

    cursor: int
    type: ChangeType
    kind: Kind
    obj: Obj

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.obj["metadata"].get("namespace")
        return None if ns is None else str(ns)


class Store(Protocol):
    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist. Authoritative: it reads the server,
        never a cache that may lag (the controller relies on this to tell a lagging list
        from a deleted object)."""
        ...

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> list[Obj]:
        """Objects of a kind, sorted by (namespace, name); `namespace=None` means all."""
        ...

    def view(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | Mapping[str, str] | None = None,
    ) -> Sequence[Mapping[str, Any]]:
        """`list` for readers that never change what they read: the objects may be shared
        with the store (no copies), so a caller must treat them as read-only. Their identity
        means nothing (see the module docstring): key what is derived from them by (uid,
        resourceVersion)."""
        ...

    def create(self, obj: Obj) -> Obj: ...

    def update(self, obj: Obj) -> Obj: ...

    def patch_status(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Mapping[str, Any]:
        """Merge-patch the status subresource (a None value removes a key), guarded by
        `resource_version` when given; returns the object as written, which, like `view`'s,
        may be shared with the store: read-only. Status writers read the result (its
        resourceVersion, what they wrote) and never change it."""
        ...

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None: ...

    def changes(
        self, cursor: int, kinds: Sequence[Kind] | None = None
    ) -> tuple[builtins.list[Change], int]:
        """Changes after `cursor` (0 = from the start), oldest first, and the cursor to pass
        next time; `Expired` when the store no longer holds them (list again). See the module
        docstring for what a reader may rely on."""
        ...
