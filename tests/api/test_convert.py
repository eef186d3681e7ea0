"""Converters into the core: whole dataclasses compared on small cases."""

from datetime import UTC, datetime
from typing import Any

from builders_api import (
    HOPPER,
    MEMORY_24GI,
    bucket,
    device,
    edited,
    engine,
    gang,
    inference_class,
    inference_cluster,
    model_deployment,
    model_replica,
    observation,
    standalone,
)
from gpufleet.api import (
    InferenceClass,
    InferenceCluster,
    ModelDeployment,
    ModelReplica,
    cluster_from_manifest,
    deployment_from_manifest,
    parse_object,
    replica_from_manifest,
    snapshot_from_manifests,
)
from gpufleet.api.convert import template_revision
from gpufleet.cel import compile_selector
from gpufleet.core.model import (
    Attribute,
    AttributeKind,
    Bucket,
    ClaimMode,
    Cluster,
    ClusterName,
    Deployment,
    DeploymentKey,
    Device,
    DeviceRequest,
    DriverName,
    Engine,
    HostRoom,
    Member,
    MemberPods,
    Pool,
    PoolName,
    PoolObservation,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    ReplicaPoolStatus,
    ReplicaStatus,
    ResolvedRequest,
    Role,
    SchedulingConfig,
    Snapshot,
    Steering,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

GPU = DriverName("gpu.nvidia.com")
AT_10 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
H100 = Device(
    name="gpu",
    driver=GPU,
    claim=ClaimMode.DRA,
    device_class_name="gpu.nvidia.com",
    count=8,
    attributes={
        "architecture": Attribute(AttributeKind.STRING, "Hopper"),
        "cudaComputeCapability": Attribute(AttributeKind.VERSION, "9.0.0"),
    },
    capacity={"memory": "81559Mi"},
)


def parsed_class(body: dict[str, Any]) -> InferenceClass:
    obj = parse_object(body)
    assert isinstance(obj, InferenceClass)
    return obj


def parsed_cluster(body: dict[str, Any]) -> InferenceCluster:
    obj = parse_object(body)
    assert isinstance(obj, InferenceCluster)
    return obj


def ready_cluster(*buckets: dict[str, Any]) -> dict[str, Any]:
    body = inference_cluster(
        conditions=[{"type": "Ready", "status": "True"}],
        gateway={"address": "10.0.0.1"},
        agent={"identity": "agent-7f9c", "leaseEpoch": 3, "observedAt": "2026-11-29T10:00:00Z"},
        gpuPools=[{"name": "h100", "nodes": 4, "observation": observation(*buckets)}],
    )
    return edited(body, {"spec.nodePools[1]": {"name": "orphan", "className": "missing"}})


def test_cluster_with_observation() -> None:
    classes = {"h100-8x": parsed_class(inference_class())}
    cluster = cluster_from_manifest(
        parsed_cluster(ready_cluster(bucket(3), bucket(8, nodes=1))), classes, SchedulingConfig()
    )
    assert cluster == Cluster(
        name=ClusterName("gke-us-central"),
        labels={"gpufleet.io/region": "us-central"},
        taints=(Taint(key="maintenance", effect=TaintEffect.NO_SCHEDULE),),
        is_ready=True,
        gateway_address="10.0.0.1",
        pools=(  # `orphan` has no class and no published devices: left out
            Pool(
                name=PoolName("h100"),
                class_name="h100-8x",
                devices=(H100,),
                node_count=2,
                max_node_count=4,
                observation=PoolObservation(
                    observed_nodes=2,
                    buckets=(Bucket({GPU: 3}, 1), Bucket({GPU: 8}, 1)),
                    observed_at=AT_10,
                    last_allocation_time=datetime(2026, 11, 29, 9, 59, 58, tzinfo=UTC),
                    excluded_nodes={"Cordoned": 0},
                ),
            ),
        ),
        agent_observed_at=AT_10,
        steering=Steering.PREFERRED,  # the API's default
    )


def test_a_signature_signs_each_pool_with_its_name_and_changes_nothing_else() -> None:
    classes = {"h100-8x": parsed_class(inference_class())}
    parsed = parsed_cluster(ready_cluster(bucket(3)))
    plain = cluster_from_manifest(parsed, classes, SchedulingConfig())
    signed = cluster_from_manifest(parsed, classes, SchedulingConfig(), ("uid", "7"))
    assert signed == plain
    assert [p.signature for p in plain.pools] == [()]
    assert [p.signature for p in signed.pools] == [("uid", "7", "h100")]


def test_published_devices_win_over_the_class() -> None:
    body = edited(
        inference_cluster(
            gpuPools=[{"name": "h100", "nodes": 4, "devices": [device("gpu", count=4)]}]
        ),
        {"spec.nodePools[0].className": "missing"},
    )
    cluster = cluster_from_manifest(parsed_cluster(body), {}, SchedulingConfig())
    assert [(p.name, [d.count for d in p.devices], p.observation) for p in cluster.pools] == [
        ("h100", [4], None)
    ]
    assert (cluster.is_ready, cluster.gateway_address, cluster.agent_observed_at) == (
        False,
        "",
        None,
    )


def test_histogram_over_the_cap_falls_back() -> None:
    classes = {"h100-8x": parsed_class(inference_class())}
    body = ready_cluster(*(bucket(i) for i in range(300)))
    (pool, *_) = cluster_from_manifest(parsed_cluster(body), classes, SchedulingConfig()).pools
    assert pool.observation is not None
    assert (pool.observation.buckets, pool.observation.unusable_reason) == (None, "TooManyBuckets")
    assert pool.observation.observed_nodes == 300


def test_absent_histogram_takes_the_condition_reason() -> None:
    body = ready_cluster(bucket(1))
    absent = {"type": "HistogramAvailable", "status": "False", "reason": "NoSlices"}
    body = edited(
        body,
        {
            "status.gpuPools[0].observation.freeDevices": None,
            "status.gpuPools[0].observation.conditions": [absent],
        },
    )
    classes = {"h100-8x": parsed_class(inference_class())}
    (pool, *_) = cluster_from_manifest(parsed_cluster(body), classes, SchedulingConfig()).pools
    assert pool.observation is not None
    assert (pool.observation.buckets, pool.observation.unusable_reason) == (None, "NoSlices")


def test_gang_deployment() -> None:
    obj = parse_object(model_deployment("gang", "ml-team", engine("engine", *gang(8), copies=2)))
    assert isinstance(obj, ModelDeployment)
    hopper = DeviceRequest(name="gpu", count=8, selectors=(compile_selector(HOPPER),))
    assert deployment_from_manifest(obj) == Deployment(
        key=DeploymentKey("ml-team", "gang"),
        replicas=2,
        engines=(
            Engine(
                name="engine",
                members=(
                    Member(role=Role.LEADER, requests=(hopper,)),
                    Member(role=Role.WORKER, worker_nodes=1, requests=(hopper,)),
                ),
                copies=2,
            ),
        ),
        cluster_selector={"gpufleet.io/region": "us-central"},
        tolerations=(
            Toleration(
                key="maintenance",
                operator=TolerationOperator.EXISTS,
                effect=TaintEffect.NO_SCHEDULE,
            ),
        ),
        fill=True,
        revision=template_revision(obj),
    )


def test_replica() -> None:
    obj = parse_object(model_replica())
    assert isinstance(obj, ModelReplica)
    assert replica_from_manifest(obj) == Replica(
        name="llama-3f9a1",
        deployment=DeploymentKey("ml-team", "llama"),
        cluster=ClusterName("gke-us-central"),
        index=0,
        engines=(
            ReplicaEngine(
                name="engine",
                members=(
                    ReplicaMember(
                        role=Role.STANDALONE,
                        pool=PoolName("h100"),
                        requests=(
                            ResolvedRequest(
                                name="gpu",
                                device_class_name="gpu.nvidia.com",
                                count=1,
                                selectors=(MEMORY_24GI,),
                                driver=GPU,
                            ),
                        ),
                    ),
                ),
            ),
        ),
        generation=2,
        status=ReplicaStatus(
            pods_scheduled=True,
            observed_generation=2,
            pools=(
                ReplicaPoolStatus(
                    pool=PoolName("h100"),
                    last_allocation_time=datetime(2026, 8, 20, 10, 2, 11, tzinfo=UTC),
                    members=(MemberPods("engine", Role.STANDALONE, 1, 1),),
                ),
            ),
        ),
    )


def test_replica_index_from_label() -> None:
    indices = []
    valid = parse_object(model_replica(index="0"))
    assert isinstance(valid, ModelReplica)
    for label in ["3", "x", "-1", "٣", None]:  # "-1" and "٣" are not valid label values:
        labels = dict(valid.metadata.labels)  # set past validation, as a stored object might be
        if label is None:
            del labels["gpufleet.io/replica-index"]
        else:
            labels["gpufleet.io/replica-index"] = label
        metadata = valid.metadata.model_copy(update={"labels": labels})
        obj = valid.model_copy(update={"metadata": metadata})
        indices.append(replica_from_manifest(obj).index)
    assert indices == [3, 0, 0, 0, 0]


def test_snapshot_sorts_and_ignores_order() -> None:
    objects = [
        parse_object(model_deployment("b")),
        parse_object(inference_cluster("z")),
        parse_object(inference_class()),
        parse_object(model_deployment("a")),
        parse_object(inference_cluster("y")),
        parse_object(model_replica()),
    ]
    config = SchedulingConfig(stale_after_s=30.0)
    snapshot = snapshot_from_manifests(objects, config)
    assert snapshot == snapshot_from_manifests(reversed(objects), config)
    assert isinstance(snapshot, Snapshot)
    assert [d.key.name for d in snapshot.deployments] == ["a", "b"]
    assert [c.name for c in snapshot.clusters] == ["y", "z"]
    assert [r.name for r in snapshot.replicas] == ["llama-3f9a1"]
    assert snapshot.config is config


def test_host_room_and_pod_requests_reach_the_core() -> None:
    """Issue 26 §2: a bucket's `hostRoom` points become `Bucket.host` (absent: None, no
    limit), and a member's template requests (limits when absent, init containers and
    sidecars as Kubernetes counts them) become its CPU and memory."""
    classes = {"h100-8x": parsed_class(inference_class())}
    roomy = {
        **bucket(4, nodes=3),
        "hostRoom": [
            {"milliCpu": 6000, "memory": 2**34, "nodes": 2},
            {"milliCpu": 30000, "memory": 2**36, "nodes": 1},
        ],
    }
    body = ready_cluster(roomy, bucket(8))
    (pool, *_) = cluster_from_manifest(parsed_cluster(body), classes, SchedulingConfig()).pools
    assert pool.observation is not None and pool.observation.buckets is not None
    assert [b.host for b in pool.observation.buckets] == [
        (HostRoom(6000, 2**34, 2), HostRoom(30000, 2**36, 1)),
        None,
    ]
    template = {
        "spec": {
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "30", "memory": "1Gi"}}},
                {
                    "name": "proxy",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                },
            ],
            "containers": [
                {"name": "engine", "resources": {"requests": {"cpu": "24", "memory": "64Gi"}}},
                {"name": "log", "resources": {"limits": {"cpu": "0.1", "memory": "100Mi"}}},
                {"name": "bad", "resources": {"requests": {"cpu": "lots"}}},
            ],
        }
    }
    member = {**standalone(), "template": template}
    obj = parse_object(model_deployment("d", "ml-team", engine("engine", member)))
    assert isinstance(obj, ModelDeployment)
    (built,) = deployment_from_manifest(obj).engines[0].members
    # Containers 24.1 cores + the sidecar 0.5 = 24.6; the init container's 30 wins.
    assert (built.milli_cpu, built.memory) == (30000, 64 * 2**30 + 100 * 2**20 + 512 * 2**20)
    replica_body = edited(model_replica(), {"spec.engines[0].members[0].template": template})
    replica = parse_object(replica_body)
    assert isinstance(replica, ModelReplica)
    (placed,) = replica_from_manifest(replica).engines[0].members
    assert (placed.milli_cpu, placed.memory) == (built.milli_cpu, built.memory)
