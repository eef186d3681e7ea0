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

`HubReplicas` keeps each such view while the replica's (uid, resourceVersion) are unchanged, so
an unchanged replica is the same object step after step (what the agent derived from it is
reused by identity, as for the store's own view); its oracle is `as_deployed` of the store's
object (tests/agent/test_hub.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
        #: Per hub name: (uid, resourceVersion) and the view made of that version.
        self._views: dict[str, tuple[tuple[object, object], Mapping[str, Any]]] = {}

    def read(self) -> list[Mapping[str, Any]]:
        """The cluster's replicas, each as its deployment sees it (raises `StoreError` when
        the hub cannot be read). Only the replicas labelled with the cluster: the namespace
        is the cluster's, the label guards against a replica written there by mistake."""
        found = self.hub.view(MODEL_REPLICA, self.namespace, {labels.CLUSTER: self.cluster})
        views = self._views
        kept: dict[str, tuple[tuple[object, object], Mapping[str, Any]]] = {}
        out: list[Mapping[str, Any]] = []
        for replica in found:
            meta = replica["metadata"]
            signature = (meta.get("uid"), meta.get("resourceVersion"))
            known = views.get(meta["name"])
            if known is None or known[0] != signature or None in signature:
                known = (signature, as_deployed(replica))
            kept[meta["name"]] = known
            out.append(known[1])
        self._views = kept
        return out
