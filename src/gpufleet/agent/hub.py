"""What the agent reads on the hub: its cluster's ModelReplicas, from its own hub namespace.

Each cluster has one namespace on the hub, `gpufleet-cluster-<cluster>`
(`gpufleet.api.names.cluster_namespace`), and its agent's credentials allow nothing wider
(docs/operations.md, "Security model"): the controller writes the cluster's ModelReplicas
there, the agent writes its observations there. Outside it, it only gets its own
InferenceCluster by name (the pools it declares, `Agent.read_declared_pools`); it reads no
InferenceClass: its devices come from the cluster's ResourceSlices.

A replica on the hub is named `<deployment namespace>.<replica>` and labelled with its
deployment's namespace (`gpufleet.io/deployment-namespace`). The rest of the agent reads each
one *as its deployment sees it* (`as_deployed`): in its deployment's namespace, under the
replica's own name. That is where its workloads and pods go and what their
`gpufleet.io/replica` label says, so the agent's workloads are named as before the replicas
moved to the cluster's namespace.

`HubReplicas` keeps each such view while the replica's (uid, resourceVersion) are unchanged (a
read compares them with the last read's, in C: pair by pair when the names are the same, in
the same order, as they are but when a replica came or went; else as sets; and makes only the
moved views again), so
an unchanged replica is the same object step after step (what the agent derived from it is
reused by identity, as for the store's own view); its oracle is `as_deployed` of the store's
object (tests/agent/test_hub.py).

`ObservationVersions` keeps the name -> resourceVersion of the ReplicaObservations in the
cluster's hub namespace (what a push compares its last writes with) from the hub's change feed
(`Store.changes`, the ReplicaObservations of every namespace, of which only its own are looked
at), so a push reads only what changed since the last one instead of viewing every
observation again. Its first read, and a read whose cursor the feed no longer holds
(`Expired`), views the namespace instead (the cursor taken before, as `ClusterFeed` does). Its
oracle is the plain read of the namespace's versions (tests/agent/test_hub.py).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpufleet.api.names import cluster_namespace, replica_origin_of
from gpufleet.core import labels
from gpufleet.store.port import (
    LATEST,
    MODEL_REPLICA,
    REPLICA_OBSERVATION,
    Change,
    ChangeType,
    Expired,
    Store,
)

__all__ = ["HubReplicas", "ObservationVersions", "as_deployed"]


def as_deployed(replica: Mapping[str, Any]) -> Mapping[str, Any]:
    """`replica` (a hub object) in its deployment's namespace, under its own name
    (`replica_origin`); the rest is shared with `replica`, which is only read."""
    meta = replica["metadata"]
    namespace, name = replica_origin_of(meta)
    if namespace == meta.get("namespace") and name == meta["name"]:
        return replica
    return {**replica, "metadata": {**meta, "namespace": namespace, "name": name}}


class HubReplicas:
    """The ModelReplicas of one cluster, read from its hub namespace (module docstring)."""

    def __init__(self, hub: Store, cluster: str) -> None:
        self.hub = hub
        self.cluster = cluster
        self.namespace = cluster_namespace(cluster)
        #: The names, uids and resourceVersions of the last read (in its order), and per
        #: name the view made of it.
        self._names: list[str] = []
        self._uids: list[object] = []
        self._versions: list[object] = []
        self._views: dict[str, Mapping[str, Any]] = {}

    def read(self) -> list[Mapping[str, Any]]:
        """The cluster's replicas, each as its deployment sees it (raises `StoreError` when
        the hub cannot be read). Only the replicas labelled with the cluster: the namespace
        is the cluster's, the label guards against a replica written there by mistake."""
        found = self.hub.view(MODEL_REPLICA, self.namespace, {labels.CLUSTER: self.cluster})
        metas = list(map(_METADATA, found))
        names = list(map(_NAME, metas))
        uids = list(map(_UID, metas))
        versions = list(map(_VERSION, metas))
        views = self._views
        if names == self._names and None not in uids and None not in versions:
            # The same names in the same order (compared in C): only the views whose (uid,
            # resourceVersion) moved are made again, found pair by pair (in C too).
            moved = map(
                operator.or_,
                map(operator.ne, uids, self._uids),
                map(operator.ne, versions, self._versions),
            )
            for i in itertools.compress(range(len(names)), moved):
                views[names[i]] = as_deployed(found[i])
            self._uids, self._versions = uids, versions
            return list(map(views.__getitem__, names))
        signatures = dict(zip(names, zip(uids, versions, strict=True), strict=True))
        if len(signatures) != len(names) or None in uids or None in versions:
            return self._read_each(found)  # not what a store holds: every view made again
        # The views of replicas whose signature moved (compared in C) are made again.
        last = dict(zip(self._names, zip(self._uids, self._versions, strict=True), strict=True))
        moved_names = {name for name, _ in signatures.items() ^ last.items()}
        for replica, name in zip(found, names, strict=True):
            if name in moved_names:
                views[name] = as_deployed(replica)
        for name in last.keys() - signatures.keys():
            del views[name]
        self._names, self._uids, self._versions = names, uids, versions
        return list(map(views.__getitem__, names))

    def _read_each(self, found: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Each replica's view made again (no signature to keep it by)."""
        self._names, self._uids, self._versions, self._views = [], [], [], {}
        return [as_deployed(replica) for replica in found]


class ObservationVersions:
    """Name -> resourceVersion of the ReplicaObservations in one hub namespace, kept from the
    hub's change feed (module docstring)."""

    _KINDS: Final = (REPLICA_OBSERVATION,)

    def __init__(self, hub: Store, namespace: str) -> None:
        self.hub = hub
        self.namespace = namespace
        #: The cursor to read the changes after; None: view the namespace first.
        self._cursor: int | None = None
        #: The versions as of the cursor; a mapping handed out is never changed afterwards.
        self._versions: dict[str, object] = {}
        #: How many times the namespace was viewed (the first read included); for tests.
        self.relists = 0

    def read(self) -> Mapping[str, object]:
        """The observations' versions by name (raises what the store raises): the mapping of
        the last read while none of the namespace's observations changed, a new one else."""
        if self._cursor is not None:
            try:
                changes, cursor = self.hub.changes(self._cursor, self._KINDS)
            except Expired:
                self._cursor = None
            else:
                self._apply(changes)
                self._cursor = cursor
                return self._versions
        cursor = self.hub.changes(LATEST, self._KINDS)[1]
        metas = list(map(_METADATA, self.hub.view(REPLICA_OBSERVATION, self.namespace)))
        self._versions = dict(zip(map(_NAME, metas), map(_VERSION, metas), strict=True))
        self._cursor = cursor
        self.relists += 1
        return self._versions

    def _apply(self, changes: Sequence[Change]) -> None:
        """Take in the changes of the namespace's observations (oldest first: the last change
        of a name is its newest version)."""
        namespace = self.namespace
        mine = [c for c in changes if c.obj["metadata"].get("namespace") == namespace]
        if not mine:
            return
        versions = dict(self._versions)
        for change in mine:
            meta = change.obj["metadata"]
            if change.type is ChangeType.DELETED:
                versions.pop(meta["name"], None)
            else:
                versions[meta["name"]] = meta.get("resourceVersion")
        self._versions = versions


_METADATA: Final = operator.itemgetter("metadata")
_NAME: Final = operator.itemgetter("name")
_UID: Final = operator.methodcaller("get", "uid")
_VERSION: Final = operator.methodcaller("get", "resourceVersion")
