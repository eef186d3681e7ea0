"""Converters from validated API objects into the core's dataclasses.

What is carried over, and the choices where the API and the core differ:

- A cluster's pool takes its devices from `status.gpuPools[].devices` when the controller has
  published them, else from its InferenceClass. A pool with neither (its class is missing or
  has no devices) is left out, as Modelplane leaves it out of `gpuPools`: nothing can be
  placed on it.
- A pool's observation comes from `status.gpuPools[].observation`. A histogram over
  `SchedulingConfig.max_histogram_buckets` buckets is dropped (`buckets=None`,
  `unusable_reason="TooManyBuckets"`), so the scheduler falls back to whole-node accounting
  for that pool alone; an absent histogram takes the reason of the observation's
  `HistogramAvailable=False` condition.
- A cluster is ready when its condition `Ready` is `True`; its agent's last report is
  `status.agent.observedAt`.
- A deployment's selectors are compiled here (`gpufleet.cel`); its `fill` is True (gpufleet has
  no model-cache dependency that could leave it unresolved). A namespaced object without a
  namespace is in `default`, as kubectl would create it.
- A replica's index is its `gpufleet.io/replica-index` label; a missing or malformed label
  reads as 0 (Modelplane: the index only breaks name collisions). Its deployment and cluster are
  `spec.deploymentName` and `spec.clusterName`. It has observed pods scheduled when its
  condition `ModelPodsScheduled` is `True`.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping

from gpufleet.api.kinds import (
    ApiObject,
    InferenceClass,
    InferenceCluster,
    ModelDeployment,
    ModelReplica,
)
from gpufleet.api.loader import Manifest
from gpufleet.api.models import (
    AttributeValue,
    Condition,
    ConditionStatus,
    DeviceSpec,
    GpuPoolStatus,
    HostRequests,
    MemberSpec,
    PublishedObservation,
    is_condition_true,
)
from gpufleet.api.names import replica_origin
from gpufleet.api.replica_models import ModelReplicaStatus, ReplicaPoolPodsStatus
from gpufleet.cel import compile_selector
from gpufleet.core.labels import DEPLOYMENT_NAMESPACE, REPLICA_INDEX, REVISION
from gpufleet.core.model import (
    Attribute,
    AttributeKind,
    Bucket,
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
    RolloutStrategy,
    ScaleUp,
    SchedulingConfig,
    Snapshot,
    Taint,
    Toleration,
)
from gpufleet.core.pod_requests import template_requests

DEFAULT_NAMESPACE = "default"
TOO_MANY_BUCKETS = "TooManyBuckets"
HISTOGRAM_AVAILABLE = "HistogramAvailable"
READY = "Ready"
MODEL_PODS_SCHEDULED = "ModelPodsScheduled"


def _attribute(value: AttributeValue) -> Attribute:
    if value.string is not None:
        return Attribute(AttributeKind.STRING, value.string)
    if value.version is not None:
        return Attribute(AttributeKind.VERSION, value.version)
    if value.bool_ is not None:
        return Attribute(AttributeKind.BOOL, value.bool_)
    if value.int_ is not None:
        return Attribute(AttributeKind.INT, value.int_)
    raise ValueError("attribute value with no value: validation lets none through")


def device_from_spec(spec: DeviceSpec) -> Device:
    return Device(
        name=spec.name,
        driver=DriverName(spec.driver),
        claim=spec.claim,
        device_class_name=spec.device_class_name or "",
        count=spec.count,
        attributes={name: _attribute(value) for name, value in spec.attributes.items()},
        capacity={name: capacity.value for name, capacity in spec.capacity.items()},
        resource_name=spec.resource_name or "",
    )


def devices_from_class(inference_class: InferenceClass) -> tuple[Device, ...]:
    return tuple(device_from_spec(d) for d in inference_class.spec.devices)


def _histogram_reason(conditions: Iterable[Condition]) -> str:
    for condition in conditions:
        if condition.type == HISTOGRAM_AVAILABLE and condition.status is ConditionStatus.FALSE:
            return condition.reason or ""
    return ""


def observation_from_status(
    observation: PublishedObservation, config: SchedulingConfig
) -> PoolObservation:
    buckets: tuple[Bucket, ...] | None = None
    unusable_reason = ""
    if observation.free_devices is None:
        unusable_reason = _histogram_reason(observation.conditions)
    elif len(observation.free_devices) > config.max_histogram_buckets:
        unusable_reason = TOO_MANY_BUCKETS
    else:
        buckets = tuple(
            Bucket(
                free={DriverName(d): n for d, n in b.free.items()},
                nodes=b.nodes,
                host=None
                if b.host_room is None
                else tuple(HostRoom(p.milli_cpu, p.memory, p.nodes) for p in b.host_room),
            )
            for b in observation.free_devices
        )
    return PoolObservation(
        observed_nodes=observation.observed_nodes,
        buckets=buckets,
        observed_at=observation.observed_at,
        last_allocation_time=observation.last_allocation_time,
        excluded_nodes=dict(observation.excluded_nodes),
        extended_resources=dict(observation.extended_resources),
        unusable_reason=unusable_reason,
        shareable=None
        if observation.shareable_room is None
        else (observation.shareable_room.milli_cpu, observation.shareable_room.memory),
    )


def cluster_from_manifest(
    cluster: InferenceCluster,
    classes: Mapping[str, InferenceClass],
    config: SchedulingConfig,
    signature: tuple[object, ...] = (),
) -> Cluster:
    """The cluster as the core reads it; each pool signed with `signature` (what it was
    converted from, for the core's reuse across calls) and its name, when one is given."""
    status = cluster.status
    published: dict[str, GpuPoolStatus] = {p.name: p for p in status.gpu_pools} if status else {}
    pools: list[Pool] = []
    for spec in cluster.spec.node_pools:
        gpu_pool = published.get(spec.name)
        if gpu_pool is not None and gpu_pool.devices:
            devices = tuple(device_from_spec(d) for d in gpu_pool.devices)
        elif spec.class_name in classes:
            devices = devices_from_class(classes[spec.class_name])
        else:
            continue
        observation = None
        if gpu_pool is not None and gpu_pool.observation is not None:
            observation = observation_from_status(gpu_pool.observation, config)
        pools.append(
            Pool(
                name=PoolName(spec.name),
                class_name=spec.class_name,
                devices=devices,
                node_count=spec.node_count,
                max_node_count=spec.max_node_count,
                min_node_count=spec.min_node_count,
                observation=observation,
                signature=(*signature, spec.name) if signature else (),
            )
        )
    return Cluster(
        name=ClusterName(cluster.metadata.name),
        labels=dict(cluster.metadata.labels),
        taints=tuple(Taint(key=t.key, effect=t.effect, value=t.value) for t in cluster.spec.taints),
        is_ready=status is not None and is_condition_true(status.conditions, READY),
        gateway_address=status.gateway.address if status and status.gateway else "",
        pools=tuple(pools),
        agent_observed_at=status.agent.observed_at if status and status.agent else None,
        steering=cluster.spec.steering,
    )


def _member(spec: MemberSpec) -> Member:
    requests: tuple[DeviceRequest, ...] = ()
    if spec.node_selector is not None:
        requests = tuple(
            DeviceRequest(
                name=d.name,
                count=d.count,
                selectors=tuple(compile_selector(s.cel) for s in d.selectors),
            )
            for d in spec.node_selector.devices
        )
    milli_cpu, memory = template_requests(spec.template)
    return Member(
        role=spec.role,
        worker_nodes=spec.worker.nodes if spec.worker else 1,
        requests=requests,
        milli_cpu=milli_cpu,
        memory=memory,
        proportional=spec.host_requests == HostRequests.PROPORTIONAL,
    )


def deployment_from_manifest(deployment: ModelDeployment) -> Deployment:
    """The deployment with its selectors compiled; raises CelCompileError only if unvalidated."""
    template = deployment.spec.template.spec
    return Deployment(
        key=DeploymentKey(
            deployment.metadata.namespace or DEFAULT_NAMESPACE, deployment.metadata.name
        ),
        replicas=deployment.spec.replicas,
        engines=tuple(
            Engine(
                name=e.name,
                members=tuple(_member(m) for m in e.members),
                copies=e.copies,
                phase=e.phase,
            )
            for e in template.engines
        ),
        cluster_selector=dict(template.cluster_selector.match_labels)
        if template.cluster_selector
        else {},
        tolerations=tuple(
            Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
            for t in template.tolerations
        ),
        serving_mode=template.serving.mode,
        fill=True,
        revision=template_revision(deployment),
        strategy=RolloutStrategy(
            deployment.spec.strategy.rolling_update.max_surge,
            deployment.spec.strategy.rolling_update.max_unavailable,
        ),
    )


#: Hex digits of a template revision.
REVISION_CHARS = 10


def template_revision(deployment: ModelDeployment) -> str:
    """What a replica of `deployment` runs, as a short hash: the template's metadata, serving
    and engines, with defaults filled in (so spelling a default out changes nothing; a member's
    `hostRequests` at its default is left out, as before the field existed). The
    cluster selector and tolerations say where replicas may go, not what they run: changing
    them is no rollout (a replica no longer selected or tolerated is dropped as ever)."""
    template = deployment.spec.template
    body = template.model_dump(
        mode="json", by_alias=True, exclude={"spec": {"cluster_selector", "tolerations"}}
    )
    # A field added since, at its default, is left out: upgrading the hub rolls nothing.
    for engine in body["spec"]["engines"]:
        for member in engine["members"]:
            if member.get("hostRequests") == HostRequests.TEMPLATE.value:
                del member["hostRequests"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:REVISION_CHARS]


def replica_index(labels: Mapping[str, str]) -> int:
    """The identity index from the replica's label; missing or malformed reads as 0."""
    value = labels.get(REPLICA_INDEX, "")
    return int(value) if value.isascii() and value.isdecimal() else 0


def _pool_status(pool: ReplicaPoolPodsStatus) -> ReplicaPoolStatus:
    return ReplicaPoolStatus(
        pool=PoolName(pool.name),
        last_allocation_time=pool.last_allocation_time,
        members=tuple(
            MemberPods(
                engine=m.engine,
                role=m.role,
                live_pods=m.live_pods,
                allocated_pods=m.allocated_pods,
            )
            for m in pool.members
        ),
        unschedulable_pods=pool.unschedulable_pods,
        unschedulable_since=pool.unschedulable_since,
        scale_up=ScaleUp(pool.scale_up) if pool.scale_up is not None else None,
        scale_up_at=pool.scale_up_time,
        ready_pods=pool.ready_pods,
        draining_pods=pool.draining_pods,
    )


def replica_from_manifest(replica: ModelReplica) -> Replica:
    meta = replica.metadata
    # It lives in its cluster's hub namespace; scheduling knows it by its deployment's.
    namespace, name = replica_origin(
        meta.namespace or DEFAULT_NAMESPACE, meta.name, meta.labels.get(DEPLOYMENT_NAMESPACE)
    )
    return Replica(
        name=name,
        deployment=DeploymentKey(namespace, replica.spec.deployment_name),
        cluster=ClusterName(replica.spec.cluster_name),
        index=replica_index(replica.metadata.labels),
        engines=tuple(
            ReplicaEngine(
                name=e.name,
                members=tuple(
                    ReplicaMember(
                        role=m.role,
                        pool=PoolName(m.node_pool_name),
                        worker_nodes=m.worker.nodes if m.worker else 1,
                        requests=tuple(
                            ResolvedRequest(
                                name=r.name,
                                device_class_name=r.device_class_name,
                                count=r.count,
                                selectors=tuple(s.cel for s in r.selectors),
                                driver=DriverName(r.driver or ""),
                            )
                            for r in m.device_requests or ()
                        ),
                        milli_cpu=m.host_requests.milli_cpu
                        if m.host_requests is not None
                        else template_requests(m.template)[0],
                        memory=m.host_requests.memory
                        if m.host_requests is not None
                        else template_requests(m.template)[1],
                        proportional=m.host_requests is not None,
                    )
                    for m in e.members
                ),
                copies=e.copies,
                phase=e.phase,
            )
            for e in replica.spec.engines
        ),
        generation=replica.metadata.generation or 1,
        status=replica_status_from_status(replica.status),
        revision=replica.metadata.labels.get(REVISION, ""),
    )


def replica_status_from_manifest(replica: ModelReplica) -> ReplicaStatus:
    """The `status` of `replica_from_manifest(replica)` (what a status write changes of it)."""
    return replica_status_from_status(replica.status)


def replica_status_from_status(status: ModelReplicaStatus | None) -> ReplicaStatus:
    """`replica_status_from_manifest` of a replica whose status is `status` (validated alone)."""
    if not status:
        return ReplicaStatus()
    return ReplicaStatus(
        pods_scheduled=is_condition_true(status.conditions, MODEL_PODS_SCHEDULED),
        observed_generation=status.observed_generation,
        pools=tuple(_pool_status(p) for p in status.pools),
    )


def snapshot_from_manifests(
    manifests: Iterable[Manifest | ApiObject], config: SchedulingConfig | None = None
) -> Snapshot:
    """The core's view of a fleet's manifests; observations are read from cluster status only.

    Deployments, clusters and replicas are sorted by name, so the snapshot does not depend on
    file order.
    """
    config = config or SchedulingConfig()
    objects = [m.obj if isinstance(m, Manifest) else m for m in manifests]
    classes = {o.metadata.name: o for o in objects if isinstance(o, InferenceClass)}
    clusters = [
        cluster_from_manifest(o, classes, config)
        for o in objects
        if isinstance(o, InferenceCluster)
    ]
    deployments = [deployment_from_manifest(o) for o in objects if isinstance(o, ModelDeployment)]
    replicas = [replica_from_manifest(o) for o in objects if isinstance(o, ModelReplica)]
    return Snapshot(
        deployments=tuple(sorted(deployments, key=lambda d: (d.key.namespace, d.key.name))),
        clusters=tuple(sorted(clusters, key=lambda c: c.name)),
        replicas=tuple(sorted(replicas, key=lambda r: (r.deployment.namespace, r.name))),
        config=config,
    )
