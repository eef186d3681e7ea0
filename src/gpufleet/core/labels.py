"""The labels every component shares (docs/design/shapes.md, "Labels").

Renaming any of these breaks charging: the ReplicaObservation selects pods by them, so a
renamed label makes the controller charge a replica twice.
"""

from typing import Final

#: Prefix reserved for gpufleet's own labels; users may not set it in deployment templates.
RESERVED_LABEL_PREFIX: Final = "gpufleet.io/"

#: On Nodes of a workload cluster: the pool name. The agent groups nodes by it.
POOL: Final = "gpufleet.io/pool"
#: On ModelReplicas, pods and workloads: the ModelDeployment name.
DEPLOYMENT: Final = "gpufleet.io/deployment"
#: On ModelReplicas: the ModelDeployment's namespace and uid. A replica lives in its cluster's
#: hub namespace, not its deployment's, so no owner reference can tie it to its deployment
#: (they cannot cross namespaces): these labels do, and the controller deletes the replicas
#: of a deployment that is gone (docs/controller.md, "Replica garbage collection").
DEPLOYMENT_NAMESPACE: Final = "gpufleet.io/deployment-namespace"
DEPLOYMENT_UID: Final = "gpufleet.io/deployment-uid"
#: On ModelReplicas: the InferenceCluster name.
CLUSTER: Final = "gpufleet.io/cluster"
#: On ModelReplicas: the identity index, decimal.
REPLICA_INDEX: Final = "gpufleet.io/replica-index"
#: On pods and workloads: the ModelReplica name.
REPLICA: Final = "gpufleet.io/replica"
#: On pods and workloads: the engine name.
ENGINE: Final = "gpufleet.io/engine"
#: On pods and workloads: the member role (`Standalone`, `Leader` or `Worker`).
MEMBER: Final = "gpufleet.io/member"
#: On pods: `metadata.generation` of the ModelReplica the pod was made for.
REPLICA_GENERATION: Final = "gpufleet.io/replica-generation"
#: On ModelReplicas: the revision of the deployment's template the replica was made for (a
#: hash of what a replica runs: engines, serving, metadata); a rollout replaces the replicas
#: of another revision (core/rollout.py). Absent: made before rollouts, counts as current.
REVISION: Final = "gpufleet.io/revision"
