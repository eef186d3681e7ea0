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
read diffs the signatures with the last read's, in C, and makes only the moved views again), so
an unchanged replica is the same object step after step (what the agent derived from it is
reused by identity, as for the store's own view); its oracle is `as_deployed` of the store's
object (tests/agent/test_hub.py).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpufleet.api.names import cluster_namespace, replica_origin_of
from gpufleet.core import labels
from gpufleet.store.port import MODEL_REPLICA, Store

__all__ = ["HubReplicas", "as_deployed"]


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
        #: Per hub name: (uid, resourceVersion) of the last read, and the view made of it.
        self._signatures: dict[str, tuple[object, object]] = {}
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
        signatures = dict(zip(names, zip(uids, versions, strict=True), strict=True))
        if len(signatures) != len(names) or None in uids or None in versions:
            return self._read_each(found)  # not what a store holds: every view made again
        # The views of replicas whose signature moved (compared in C) are made again.
        views = self._views
        moved = {name for name, _ in signatures.items() ^ self._signatures.items()}
        for replica, name in zip(found, names, strict=True):
            if name in moved:
                views[name] = as_deployed(replica)
        for name in self._signatures.keys() - signatures.keys():
            del views[name]
        self._signatures = signatures
        return list(map(views.__getitem__, names))

    def _read_each(self, found: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Each replica's view made again (no signature to keep it by)."""
        self._signatures, self._views = {}, {}
        return [as_deployed(replica) for replica in found]


_METADATA: Final = operator.itemgetter("metadata")
_NAME: Final = operator.itemgetter("name")
_UID: Final = operator.methodcaller("get", "uid")
_VERSION: Final = operator.methodcaller("get", "resourceVersion")
