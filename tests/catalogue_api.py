"""One independent mutation per validation rule, per kind, each with the error it must produce.

A `Mutation` edits a valid base body (`BASES`) so that exactly one rule breaks, at `path`, with
a message that starts with `message`. The mutations of one base touch disjoint fields and do
not interact, so any combination of them must produce exactly the union of their errors
(issue 18). The CRD's CEL rules are checked against the same catalogue
(tests/kube/test_kube_crds.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builders_api import (
    DELETE,
    bucket,
    device,
    engine,
    gang,
    inference_class,
    inference_cluster,
    model_deployment,
    model_replica,
    observation,
    pool_observation,
    prefill_decode,
    replica_observation,
    standalone,
)
from gpufleet.api.names import DNS_LABEL_RULE, DNS_SUBDOMAIN_RULE


@dataclass(frozen=True)
class Mutation:
    id: str
    edits: dict[str, object]
    path: str
    message: str
    #: The rule is a cross-field rule the CRD states in `x-kubernetes-validations`.
    cel: bool = False


def _cluster() -> dict[str, Any]:
    pool = {"className": "h100-8x", "nodeCount": 1}
    body = inference_cluster(
        conditions=[
            {"type": "Ready", "status": "True"},
            {"type": "Degraded", "status": "False"},
        ],
        gpuPools=[
            {"name": "h0", "nodes": 2, "observation": observation(bucket(8), bucket(4))},
            {"name": "h1", "nodes": 2},
            {"name": "h2", "nodes": 2},
        ],
    )
    body["spec"]["taints"] = [
        {"key": "maintenance", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoSchedule"},
        {"key": "third", "effect": "NoExecute"},
    ]
    body["spec"]["nodePools"] = [
        {"name": "p0", **pool, "nodeCount": 2, "maxNodeCount": 4},
        {"name": "p1", **pool, "maxNodeCount": 8},
        {"name": "p2", **pool},
        {"name": "p3", **pool},
    ]
    return body


def _class() -> dict[str, Any]:
    return inference_class(
        "h100-8x", device("gpu0"), device("gpu1"), device("gpu2"), device("gpu3")
    )


def _deployment() -> dict[str, Any]:
    body = model_deployment(
        "llama",
        "ml-team",
        engine("e0", standalone()),
        engine("e1", *gang()),
        engine("e2", standalone()),
        engine("e3", standalone()),
    )
    body["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "other", "operator": "Exists"},
        {"key": "third", "operator": "Equal", "value": "x"},
    ]
    body["status"] = {
        "observedGeneration": 1,
        "conditions": [
            {"type": "ReplicasScheduled", "status": "True"},
            {"type": "Ready", "status": "True"},
        ],
    }
    return body


def _replica() -> dict[str, Any]:
    body = model_replica()
    first = body["spec"]["engines"][0]
    second = copy.deepcopy(first) | {"name": "other"}
    third = copy.deepcopy(first) | {"name": "third"}
    body["spec"]["engines"] += [second, third]
    body["status"]["pools"].append({"name": "l4", "members": []})
    body["status"]["conditions"].append({"type": "Other", "status": "False"})
    return body


def _pool_observation() -> dict[str, Any]:
    body = pool_observation(bucket(8), bucket(4, 2), bucket(0))
    body["status"]["conditions"] = [
        {"type": "HistogramAvailable", "status": "True"},
        {"type": "ScaleUpBlocked", "status": "False"},
    ]
    return body


def _replica_observation() -> dict[str, Any]:
    body = replica_observation()
    body["status"]["pools"] = [{"name": "h100"}, {"name": "l4"}]
    return body


DEVICE = "spec.devices"
POOL = "spec.nodePools"
ENGINE = "spec.template.spec.engines"
REQUESTS = "nodeSelector.devices"
GPU_POOL = "status.gpuPools"
RULE_DUPLICATE = 'duplicate name "{}" (also at index {})'


def _meta(namespaced: bool) -> list[Mutation]:
    mutations = [
        Mutation("name", {"metadata.name": "Bad_Name"}, "metadata.name", DNS_SUBDOMAIN_RULE),
        Mutation("unknown", {"spec.colour": "blue"}, "spec.colour", "unknown field"),
    ]
    if namespaced:
        mutations.append(
            Mutation(
                "namespace", {"metadata.namespace": "ml.team"}, "metadata.namespace", DNS_LABEL_RULE
            )
        )
    else:
        mutations.append(
            Mutation(
                "scope",
                {"metadata.namespace": "ml"},
                "metadata.namespace",
                "must not be set on a cluster-scoped object",
            )
        )
    return mutations


CLASS = [
    *_meta(namespaced=False),
    Mutation("device name", {f"{DEVICE}[0].name": "GPU"}, f"{DEVICE}[0].name", DNS_LABEL_RULE),
    Mutation("device count", {f"{DEVICE}[0].count": 0}, f"{DEVICE}[0].count", "must be at least 1"),
    Mutation(
        "DRA needs a device class",
        {f"{DEVICE}[1].deviceClassName": DELETE},
        f"{DEVICE}[1].deviceClassName",
        "is required when claim is DRA",
        cel=True,
    ),
    Mutation(
        "attribute has one value",
        {f"{DEVICE}[1].attributes.architecture": {"string": "Hopper", "int": 3}},
        f"{DEVICE}[1].attributes.architecture",
        "must set exactly one of string, version, bool, int",
        cel=True,
    ),
    Mutation(
        "semver",
        {f"{DEVICE}[0].attributes.cudaComputeCapability.version": "9"},
        f"{DEVICE}[0].attributes.cudaComputeCapability.version",
        "must be a semantic version",
    ),
    Mutation(
        "quantity",
        {f"{DEVICE}[2].capacity.memory.value": "lots"},
        f"{DEVICE}[2].capacity.memory.value",
        "must be a Kubernetes quantity",
    ),
    Mutation("required", {f"{DEVICE}[2].driver": DELETE}, f"{DEVICE}[2].driver", "is required"),
    Mutation(
        "devices unique",
        {f"{DEVICE}[3].name": "gpu2"},
        f"{DEVICE}[3]",
        RULE_DUPLICATE.format("gpu2", 2),
        cel=True,
    ),
    Mutation(
        "enum",
        {f"{DEVICE}[3].claim": "Bogus"},
        f"{DEVICE}[3].claim",
        "must be one of 'DRA', 'Synthetic' or",
    ),
]

CLUSTER = [
    *_meta(namespaced=False),
    Mutation("pool name", {f"{POOL}[0].name": "GPU_pool"}, f"{POOL}[0].name", DNS_LABEL_RULE),
    Mutation(
        "pool count", {f"{POOL}[0].nodeCount": -1}, f"{POOL}[0].nodeCount", "must be at least 0"
    ),
    Mutation(
        "max at least min",
        {f"{POOL}[1].minNodeCount": 9},
        f"{POOL}[1].maxNodeCount",
        "must be at least minNodeCount (9)",
        cel=True,
    ),
    Mutation(
        "count at most max",
        {f"{POOL}[2].nodeCount": 3, f"{POOL}[2].maxNodeCount": 2},
        f"{POOL}[2].nodeCount",
        "must be at most maxNodeCount (2)",
        cel=True,
    ),
    Mutation(
        "pools unique",
        {f"{POOL}[3].name": "p2"},
        f"{POOL}[3]",
        RULE_DUPLICATE.format("p2", 2),
        cel=True,
    ),
    Mutation(
        "class required", {f"{POOL}[3].className": DELETE}, f"{POOL}[3].className", "is required"
    ),
    Mutation(
        "taints unique",
        {"spec.taints[1].key": "maintenance"},
        "spec.taints[1]",
        'duplicate key and effect "maintenance:NoSchedule" (also at index 0)',
        cel=True,
    ),
    Mutation(
        "taint effect",
        {"spec.taints[2].effect": "Bogus"},
        "spec.taints[2].effect",
        "must be one of",
    ),
    Mutation(
        "label value type",
        {"metadata.labels.team": 3},
        "metadata.labels.team",
        "must be a string",
    ),
    Mutation(
        "conditions unique",
        {"status.conditions[1].type": "Ready"},
        "status.conditions[1]",
        'duplicate type "Ready" (also at index 0)',
        cel=True,
    ),
    Mutation(
        "gpuPools unique",
        {f"{GPU_POOL}[2].name": "h1"},
        f"{GPU_POOL}[2]",
        RULE_DUPLICATE.format("h1", 1),
        cel=True,
    ),
    Mutation(
        "free vectors unique",
        {f"{GPU_POOL}[0].observation.freeDevices[1]": bucket(8)},
        f"{GPU_POOL}[0].observation.freeDevices[1]",
        'duplicate free vector "gpu.nvidia.com=8" (also at index 0)',
    ),
    Mutation(
        "timestamp",
        {f"{GPU_POOL}[0].observation.observedAt": "yesterday"},
        f"{GPU_POOL}[0].observation.observedAt",
        "must be an RFC 3339 timestamp",
    ),
    Mutation(
        "status bound", {f"{GPU_POOL}[1].nodes": -2}, f"{GPU_POOL}[1].nodes", "must be at least 0"
    ),
]

_E = ENGINE
DEPLOYMENT = [
    *_meta(namespaced=True),
    Mutation("replicas", {"spec.replicas": 1001}, "spec.replicas", "must be at most 1000"),
    Mutation("engine name", {f"{_E}[0].name": "E_0"}, f"{_E}[0].name", DNS_LABEL_RULE),
    Mutation("copies", {f"{_E}[0].copies": 0}, f"{_E}[0].copies", "must be at least 1"),
    Mutation(
        "request count",
        {f"{_E}[0].members[0].{REQUESTS}[0].count": 0},
        f"{_E}[0].members[0].{REQUESTS}[0].count",
        "must be at least 1",
    ),
    Mutation(
        "CEL compiles",
        {f"{_E}[0].members[0].{REQUESTS}[0].selectors[0].cel": "device.("},
        f"{_E}[0].members[0].{REQUESTS}[0].selectors[0].cel",
        "does not compile",
    ),
    Mutation(
        "worker only on Worker",
        {f"{_E}[0].members[0].worker": {"nodes": 1}},
        f"{_E}[0].members[0].worker",
        "is only allowed on a Worker member",
        cel=True,
    ),
    Mutation(
        "Worker needs worker",
        {f"{_E}[1].members[1].worker": DELETE},
        f"{_E}[1].members[1].worker",
        "is required for a Worker member",
        cel=True,
    ),
    Mutation(
        "requests unique",
        {f"{_E}[1].members[0].{REQUESTS}[1]": standalone()["nodeSelector"]["devices"][0]},
        f"{_E}[1].members[0].{REQUESTS}[1]",
        RULE_DUPLICATE.format("gpu", 0),
        cel=True,
    ),
    Mutation(
        "engine shape",
        {f"{_E}[2].members[0].role": "Leader"},
        f"{_E}[2].members",
        "must be exactly one Standalone member, or one Leader and one Worker (got Leader)",
        cel=True,
    ),
    Mutation(
        "a member claims",
        {f"{_E}[2].members[0].nodeSelector": DELETE},
        f"{_E}[2].members",
        "at least one member must have a nodeSelector",
        cel=True,
    ),
    Mutation(
        "phase needs PrefillDecode",
        {f"{_E}[2].phase": "Prefill"},
        f"{_E}[2].phase",
        "is only allowed when serving.mode is PrefillDecode",
        cel=True,
    ),
    Mutation(
        "engines unique",
        {f"{_E}[3].name": "e2"},
        f"{_E}[3]",
        RULE_DUPLICATE.format("e2", 2),
        cel=True,
    ),
    Mutation(
        "template is a mapping",
        {f"{_E}[3].members[0].template": "pod"},
        f"{_E}[3].members[0].template",
        "must be a mapping",
    ),
    Mutation(
        "toleration without key",
        {
            "spec.template.spec.tolerations[0].key": "",
            "spec.template.spec.tolerations[0].operator": "Equal",
        },
        "spec.template.spec.tolerations[0].operator",
        "must be Exists when key is empty",
        cel=True,
    ),
    Mutation(
        "Exists has no value",
        {"spec.template.spec.tolerations[1].value": "v"},
        "spec.template.spec.tolerations[1].value",
        "must be empty when operator is Exists",
        cel=True,
    ),
    Mutation(
        "toleration operator",
        {"spec.template.spec.tolerations[2].operator": "Maybe"},
        "spec.template.spec.tolerations[2].operator",
        "must be one of",
    ),
    Mutation(
        "reserved label",
        {"spec.template.metadata.labels[gpufleet.io/engine]": "x"},
        "spec.template.metadata.labels[gpufleet.io/engine]",
        "the gpufleet.io/ prefix is reserved",
        cel=True,
    ),
    Mutation(
        "selector label type",
        {"spec.template.spec.clusterSelector.matchLabels.zone": 3},
        "spec.template.spec.clusterSelector.matchLabels.zone",
        "must be a string",
    ),
    Mutation(
        "status conditions unique",
        {"status.conditions[1].type": "ReplicasScheduled"},
        "status.conditions[1]",
        'duplicate type "ReplicasScheduled" (also at index 0)',
        cel=True,
    ),
    Mutation(
        "status integer",
        {"status.observedGeneration": "1"},
        "status.observedGeneration",
        "must be an integer",
    ),
]

PREFILL_DECODE = [
    *_meta(namespaced=True),
    Mutation(
        "one Prefill and one Decode",
        {f"{_E}[1].phase": "Prefill"},
        _E,
        "PrefillDecode needs exactly two engines, one Prefill and one Decode",
        cel=True,
    ),
    Mutation("copies bound", {f"{_E}[0].copies": 65}, f"{_E}[0].copies", "must be at most 64"),
]

_R = "spec.engines"
REPLICA = [
    *_meta(namespaced=True),
    Mutation("engine name", {f"{_R}[2].name": "E"}, f"{_R}[2].name", DNS_LABEL_RULE),
    Mutation(
        "pool required",
        {f"{_R}[0].members[0].nodePoolName": DELETE},
        f"{_R}[0].members[0].nodePoolName",
        "is required",
    ),
    Mutation(
        "resolved requests unique",
        {
            f"{_R}[0].members[0].deviceRequests[1]": model_replica()[  # the same request twice
                "spec"
            ]["engines"][0]["members"][0]["deviceRequests"][0]
        },
        f"{_R}[0].members[0].deviceRequests[1]",
        RULE_DUPLICATE.format("gpu", 0),
        cel=True,
    ),
    Mutation(
        "replica engine shape",
        {f"{_R}[1].members[0].role": "Worker", f"{_R}[1].members[0].worker": {"nodes": 1}},
        f"{_R}[1].members",
        "must be exactly one Standalone member, or one Leader and one Worker (got Worker)",
        cel=True,
    ),
    Mutation(
        "replica engines unique",
        {f"{_R}[1].name": "engine"},
        f"{_R}[1]",
        RULE_DUPLICATE.format("engine", 0),
        cel=True,
    ),
    Mutation(
        "status pools unique",
        {"status.pools[1].name": "h100"},
        "status.pools[1]",
        RULE_DUPLICATE.format("h100", 0),
        cel=True,
    ),
    Mutation(
        "status conditions unique",
        {"status.conditions[1].type": "ModelPodsScheduled"},
        "status.conditions[1]",
        'duplicate type "ModelPodsScheduled" (also at index 0)',
        cel=True,
    ),
    Mutation(
        "pod counts",
        {"status.pools[0].members[0].livePods": -1},
        "status.pools[0].members[0].livePods",
        "must be at least 0",
    ),
]

POOL_OBSERVATION = [
    *_meta(namespaced=True),
    Mutation("spec required", {"spec.poolName": DELETE}, "spec.poolName", "is required"),
    Mutation(
        "observed nodes", {"status.observedNodes": -1}, "status.observedNodes", "must be at least 0"
    ),
    Mutation(
        "free vectors unique",
        {"status.freeDevices[2]": bucket(8, 3)},
        "status.freeDevices[2]",
        'duplicate free vector "gpu.nvidia.com=8" (also at index 0)',
    ),
    Mutation(
        "bucket nodes",
        {"status.freeDevices[1].nodes": 0},
        "status.freeDevices[1].nodes",
        "must be at least 1",
    ),
    Mutation(
        "epoch", {"status.agent.leaseEpoch": -1}, "status.agent.leaseEpoch", "must be at least 0"
    ),
    Mutation(
        "observedAt",
        {"status.observedAt": "now"},
        "status.observedAt",
        "must be an RFC 3339 timestamp",
    ),
    Mutation(
        "conditions unique",
        {"status.conditions[1].type": "HistogramAvailable"},
        "status.conditions[1]",
        'duplicate type "HistogramAvailable" (also at index 0)',
        cel=True,
    ),
    Mutation(
        "condition status",
        {"status.conditions[0].status": "Yes"},
        "status.conditions[0].status",
        "must be one of",
    ),
]

REPLICA_OBSERVATION = [
    *_meta(namespaced=True),
    Mutation(
        "identity", {"status.agent.identity": ""}, "status.agent.identity", "must not be empty"
    ),
    Mutation(
        "boolean", {"status.podsScheduled": "yes"}, "status.podsScheduled", "must be a boolean"
    ),
    Mutation(
        "observedAt required", {"status.observedAt": DELETE}, "status.observedAt", "is required"
    ),
    Mutation(
        "pools unique",
        {"status.pools[1].name": "h100"},
        "status.pools[1]",
        RULE_DUPLICATE.format("h100", 0),
        cel=True,
    ),
    Mutation("replica name", {"spec.replicaName": 7}, "spec.replicaName", "must be a string"),
]

#: Each valid base body with its catalogue.
BASES: dict[str, tuple[Callable[[], dict[str, Any]], list[Mutation]]] = {
    "InferenceClass": (_class, CLASS),
    "InferenceCluster": (_cluster, CLUSTER),
    "ModelDeployment": (_deployment, DEPLOYMENT),
    "ModelDeployment/PrefillDecode": (prefill_decode, PREFILL_DECODE),
    "ModelReplica": (_replica, REPLICA),
    "PoolObservation": (_pool_observation, POOL_OBSERVATION),
    "ReplicaObservation": (_replica_observation, REPLICA_OBSERVATION),
}
