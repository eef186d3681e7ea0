"""Valid manifest bodies of every kind, and `edited` to break one field for a test case.

Each builder returns a fresh dict that validates; a test breaks it with
`edited(body, {"spec.nodePools[0].name": "GPU_pool"})`, spelling paths as the validator reports
them (`[i]` for list indices, `[key]` for keys with dots or slashes), or removes a field with
`DELETE`.
"""

import copy
import re
from typing import Any, Final

API_VERSION: Final = "gpufleet.io/v1alpha1"
DELETE: Final = object()
HOPPER: Final = 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"'
MEMORY_24GI: Final = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("24Gi")) >= 0'

_TOKEN = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[([^\]]+)\]")


def _tokens(path: str) -> list[str | int]:
    tokens: list[str | int] = []
    position = 0
    while position < len(path):
        match = _TOKEN.match(path, position)
        if match is None:
            raise ValueError(f"bad path {path!r} at {position}")
        name, bracket = match.groups()
        tokens.append(name if name is not None else int(bracket) if bracket.isdigit() else bracket)
        position = match.end()
    return tokens


def edited(body: dict[str, Any], edits: dict[str, object]) -> dict[str, Any]:
    """A deep copy of `body` with each path set to its value (or removed for DELETE).

    Setting the index one past the end of a list appends.
    """
    result = copy.deepcopy(body)
    for path, value in edits.items():
        *parents, last = _tokens(path)
        node: Any = result
        for token in parents:
            node = node[token]
        if value is DELETE:
            del node[last]
        elif isinstance(node, list) and last == len(node):
            node.append(copy.deepcopy(value))
        else:
            node[last] = copy.deepcopy(value)
    return result


def device(name: str = "gpu", count: int = 4, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "driver": "gpu.nvidia.com",
        "claim": "DRA",
        "deviceClassName": "gpu.nvidia.com",
        "count": count,
        "attributes": {
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
        **fields,
    }


def inference_class(name: str = "h100-8x", *devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceClass",
        "metadata": {"name": name},
        "spec": {"devices": list(devices) or [device(count=8)]},
    }


def bucket(free_gpus: int, nodes: int = 1) -> dict[str, Any]:
    return {"free": {"gpu.nvidia.com": free_gpus}, "nodes": nodes}


def observation(*buckets: dict[str, Any]) -> dict[str, Any]:
    return {
        "observedAt": "2026-11-29T10:00:00Z",
        "ageSeconds": 3,
        "state": "Fresh",
        "observedNodes": sum(b["nodes"] for b in buckets),
        "freeDevices": list(buckets),
        "lastAllocationTime": "2026-11-29T09:59:58Z",
        "excludedNodes": {"Cordoned": 0},
        "conditions": [{"type": "HistogramAvailable", "status": "True"}],
    }


def inference_cluster(name: str = "gke-us-central", **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": {"gpufleet.io/region": "us-central"}},
        "spec": {
            "taints": [{"key": "maintenance", "value": "", "effect": "NoSchedule"}],
            "nodePools": [
                {"name": "h100", "className": "h100-8x", "nodeCount": 2, "maxNodeCount": 4}
            ],
        },
    }
    if status:
        body["status"] = status
    return body


def standalone(count: int = 1, cel: str = MEMORY_24GI) -> dict[str, Any]:
    return {
        "role": "Standalone",
        "nodeSelector": {"devices": [{"name": "gpu", "count": count, "selectors": [{"cel": cel}]}]},
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]}},
    }


def gang(gpus: int = 8) -> list[dict[str, Any]]:
    leader = standalone(gpus, HOPPER) | {"role": "Leader"}
    worker = standalone(gpus, HOPPER) | {"role": "Worker", "worker": {"nodes": 1}}
    return [leader, worker]


def engine(name: str = "engine", *members: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "copies": 1, "members": list(members) or [standalone()], **fields}


def model_deployment(
    name: str = "llama", namespace: str = "ml-team", *engines: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"team": "search"}},
                "spec": {
                    "clusterSelector": {"matchLabels": {"gpufleet.io/region": "us-central"}},
                    "tolerations": [
                        {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "engines": list(engines) or [engine()],
                },
            },
        },
    }


def prefill_decode() -> dict[str, Any]:
    body = model_deployment(
        "llama-pd",
        "ml-team",
        engine("prefill", standalone(1), phase="Prefill", copies=3),
        engine("decode", standalone(2, HOPPER), phase="Decode", copies=2),
    )
    body["spec"]["template"]["spec"]["serving"] = {"mode": "PrefillDecode"}
    return body


def model_replica(name: str = "llama-3f9a1", index: str = "0") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelReplica",
        "metadata": {
            "name": name,
            "namespace": "ml-team",
            "generation": 2,
            "labels": {
                "gpufleet.io/deployment": "llama",
                "gpufleet.io/cluster": "gke-us-central",
                "gpufleet.io/replica-index": index,
            },
        },
        "spec": {
            "deploymentName": "llama",
            "clusterName": "gke-us-central",
            "engines": [
                {
                    "name": "engine",
                    "copies": 1,
                    "members": [
                        {
                            "role": "Standalone",
                            "nodePoolName": "h100",
                            "deviceRequests": [
                                {
                                    "name": "gpu",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "driver": "gpu.nvidia.com",
                                    "count": 1,
                                    "selectors": [{"cel": MEMORY_24GI}],
                                }
                            ],
                            "template": {"spec": {"containers": [{"name": "engine"}]}},
                        }
                    ],
                }
            ],
        },
        "status": {
            "observedGeneration": 2,
            "conditions": [
                {"type": "ModelPodsScheduled", "status": "True", "reason": "AllPodsAllocated"}
            ],
            "pools": [
                {
                    "name": "h100",
                    "lastAllocationTime": "2026-08-20T10:02:11Z",
                    "members": [
                        {
                            "engine": "engine",
                            "role": "Standalone",
                            "livePods": 1,
                            "allocatedPods": 1,
                        }
                    ],
                }
            ],
        },
    }


def pool_observation(*buckets: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PoolObservation",
        "metadata": {"name": "h100", "namespace": "gpufleet-cluster-gke-us-central"},
        "spec": {"clusterName": "gke-us-central", "poolName": "h100"},
        "status": {
            "agent": {"identity": "agent-7f9c", "leaseEpoch": 3},
            "observedAt": "2026-11-29T10:00:00Z",
            "observedNodes": sum(b["nodes"] for b in buckets),
            "freeDevices": list(buckets),
            "excludedNodes": {"Cordoned": 1},
        },
    }


def replica_observation() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ReplicaObservation",
        "metadata": {"name": "llama-3f9a1", "namespace": "gpufleet-cluster-gke-us-central"},
        "spec": {
            "clusterName": "gke-us-central",
            "replicaName": "llama-3f9a1",
            "replicaNamespace": "ml-team",
        },
        "status": {
            "agent": {"identity": "agent-7f9c", "leaseEpoch": 3},
            "observedAt": "2026-11-29T10:00:00Z",
            "observedGeneration": 1,
            "podsScheduled": True,
            "pools": [{"name": "h100", "members": []}],
        },
    }
