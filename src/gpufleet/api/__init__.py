"""The `gpufleet.io/v1alpha1` API: typed models, loading, validation, conversion to the core.

- `load_manifests(paths)` / `check_paths(paths)`: read YAML files and directories as kubectl
  does, into typed objects tagged with their source.
- `validate(new, old=None)`: admission; every error at once as one `ValidationFailed`.
- `snapshot_from_manifests(manifests, config)`: the core's `Snapshot` of a fleet.

docs/design/shapes.md is the wire contract; docs/api.md documents the API for users.
"""

from gpufleet.api.convert import (
    cluster_from_manifest,
    deployment_from_manifest,
    device_from_spec,
    replica_from_manifest,
    replica_status_from_manifest,
    replica_status_from_status,
    snapshot_from_manifests,
)
from gpufleet.api.errors import FieldError, LimitExceeded, ManifestsInvalid, ValidationFailed
from gpufleet.api.kinds import (
    KINDS,
    ApiObject,
    InferenceClass,
    InferenceCluster,
    ModelDeployment,
    ModelReplica,
    PoolObservation,
    ReplicaObservation,
)
from gpufleet.api.loader import (
    Manifest,
    Skipped,
    Source,
    check_paths,
    load_manifests,
    load_yaml_documents,
    read_bounded,
)
from gpufleet.api.models import API_VERSION
from gpufleet.api.validation import (
    metadata_valid,
    parse_object,
    parse_status_change,
    status_change,
    validate,
)

__all__ = [
    "API_VERSION",
    "KINDS",
    "ApiObject",
    "FieldError",
    "InferenceClass",
    "InferenceCluster",
    "LimitExceeded",
    "Manifest",
    "ManifestsInvalid",
    "ModelDeployment",
    "ModelReplica",
    "PoolObservation",
    "ReplicaObservation",
    "Skipped",
    "Source",
    "ValidationFailed",
    "check_paths",
    "cluster_from_manifest",
    "deployment_from_manifest",
    "device_from_spec",
    "load_manifests",
    "load_yaml_documents",
    "metadata_valid",
    "parse_object",
    "parse_status_change",
    "read_bounded",
    "replica_from_manifest",
    "replica_status_from_manifest",
    "replica_status_from_status",
    "snapshot_from_manifests",
    "status_change",
    "validate",
]
