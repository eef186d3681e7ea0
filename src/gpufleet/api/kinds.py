"""The kinds of the `gpufleet.io/v1alpha1` API: each top-level object (apiVersion, kind,
metadata, spec, status) over the field models of models.py and replica_models.py, and
`KINDS`, every kind by name.
"""

from typing import Any, ClassVar, Final, Literal

from gpufleet.api.models import (
    API_VERSION,
    InferenceClassSpec,
    InferenceClusterSpec,
    InferenceClusterStatus,
    ModelDeploymentSpec,
    ModelDeploymentStatus,
    ObjectMeta,
)
from gpufleet.api.names import cluster_name_problem, deployment_name_problem
from gpufleet.api.replica_models import (
    ModelReplicaSpec,
    ModelReplicaStatus,
    PoolObservationSpec,
    PoolObservationStatus,
    ReplicaObservationSpec,
    ReplicaObservationStatus,
)
from gpufleet.api.rules import ApiModel, Rules


class _Object(ApiModel):
    """A top-level object: apiVersion, kind, metadata."""

    #: Cluster-scoped kinds reject `metadata.namespace`.
    is_namespaced: ClassVar[bool] = True

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    """gpufleet.io/v1alpha1."""
    metadata: ObjectMeta
    """Standard object metadata."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if not type(self).is_namespaced and self.metadata.namespace is not None:
                rules.add(("metadata", "namespace"), "must not be set on a cluster-scoped object")
        with rules.reading():
            problem = type(self).name_problem(self.metadata.name)
            if problem is not None:
                rules.add(("metadata", "name"), problem)

    @staticmethod
    def name_problem(name: str) -> str | None:
        """What is wrong with the name beyond the DNS subdomain rule (None: nothing). A kind
        whose name becomes a label value or part of another name says so. It reads only the
        name, so a status write, which keeps the name, keeps the verdict
        (`parse_status_change`)."""
        return None

    @property
    def display_name(self) -> str:
        """`namespace/name` for namespaced objects, `name` otherwise."""
        if self.metadata.namespace:
            return f"{self.metadata.namespace}/{self.metadata.name}"
        return self.metadata.name

    def to_manifest(self) -> dict[str, Any]:
        """The object as a manifest: camelCase, only the fields that were set, no None fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


class InferenceClass(_Object):
    """The devices one node of a pool offers (platform team)."""

    is_namespaced = False

    kind: Literal["InferenceClass"] = "InferenceClass"
    """InferenceClass."""
    spec: InferenceClassSpec
    """The devices one node of a pool offers."""


class InferenceCluster(_Object):
    """A workload cluster and its GPU node pools (platform team); status by the controller."""

    is_namespaced = False

    @staticmethod
    def name_problem(name: str) -> str | None:
        return cluster_name_problem(name)

    kind: Literal["InferenceCluster"] = "InferenceCluster"
    """InferenceCluster."""
    spec: InferenceClusterSpec
    """The cluster's taints and node pools."""
    status: InferenceClusterStatus | None = None
    """Readiness, gateway, agent and free GPUs per pool, written by the controller."""


class ModelDeployment(_Object):
    """A model to serve: how many replicas, where, and the shape of one replica (ML team)."""

    @staticmethod
    def name_problem(name: str) -> str | None:
        return deployment_name_problem(name)

    kind: Literal["ModelDeployment"] = "ModelDeployment"
    """ModelDeployment."""
    spec: ModelDeploymentSpec
    """How many replicas, where, and the shape of one replica."""
    status: ModelDeploymentStatus | None = None
    """Replicas placed and ready, and conditions, written by the controller."""


class ModelReplica(_Object):
    """One placed replica of a ModelDeployment, pinned to a cluster and its members to pools (controller)."""

    kind: Literal["ModelReplica"] = "ModelReplica"
    """ModelReplica."""
    spec: ModelReplicaSpec
    """The placed replica: its cluster, and each member's pool and device requests."""
    status: ModelReplicaStatus | None = None
    """Conditions and pods per pool, written by the controller from the observations."""


class PoolObservation(_Object):
    """One pool's nodes by free devices, reported by the cluster's agent."""

    kind: Literal["PoolObservation"] = "PoolObservation"
    """PoolObservation."""
    spec: PoolObservationSpec
    """The cluster and pool observed."""
    status: PoolObservationStatus | None = None
    """What the agent saw of the pool."""


class ReplicaObservation(_Object):
    """One replica's pods, live and allocated, reported by the cluster's agent."""

    kind: Literal["ReplicaObservation"] = "ReplicaObservation"
    """ReplicaObservation."""
    spec: ReplicaObservationSpec
    """The replica observed."""
    status: ReplicaObservationStatus | None = None
    """What the agent saw of the replica's pods."""


ApiObject = (
    InferenceClass
    | InferenceCluster
    | ModelDeployment
    | ModelReplica
    | PoolObservation
    | ReplicaObservation
)

#: Every kind of the API, by its `kind`.
KINDS: Final[dict[str, type[ApiObject]]] = {
    cls.__name__: cls
    for cls in (
        InferenceClass,
        InferenceCluster,
        ModelDeployment,
        ModelReplica,
        PoolObservation,
        ReplicaObservation,
    )
}
