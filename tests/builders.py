"""Fluent builders for the scheduling core's inputs, and compact views of its outputs.

    cluster("a").pool("h100", nodes=4, gpus=8).taint("maintenance")
    deployment("ml/x").replicas(2).engine(gpus=1)
    observed({4: 1, 0: 3})      # one node with 4 GPUs free, three with none

Builders are immutable (every call returns a new builder), so a base can be shared by cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from gpufleet.cel import compile_selector
from gpufleet.core.decision import Decision, DeploymentDecision, Placement, replica_name
from gpufleet.core.matching import match_member
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
    Member,
    MemberPods,
    NodeChoice,
    Phase,
    Pool,
    PoolName,
    PoolObservation,
    Replica,
    ReplicaEngine,
    ReplicaMember,
    ReplicaPoolStatus,
    ReplicaStatus,
    Role,
    SchedulingConfig,
    ServingMode,
    Snapshot,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

NOW = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
GPU = DriverName("gpu.nvidia.com")
NIC = DriverName("nic.nvidia.com")


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


# --- devices and requests ---------------------------------------------------------------


def gpu(
    count: int = 8,
    *,
    name: str = "gpu",
    driver: str = GPU,
    arch: str = "Hopper",
    memory: str = "81559Mi",
) -> Device:
    return Device(
        name=name,
        driver=DriverName(driver),
        claim=ClaimMode.DRA,
        device_class_name=driver,
        count=count,
        attributes={"architecture": Attribute(AttributeKind.STRING, arch)},
        capacity={"memory": memory},
    )


def nic(count: int = 8, *, name: str = "nic") -> Device:
    return Device(
        name=name,
        driver=NIC,
        claim=ClaimMode.SYNTHETIC,
        count=count,
        attributes={"linkType": Attribute(AttributeKind.STRING, "infiniband")},
    )


def req(count: int = 1, *cel: str, name: str = "gpu") -> DeviceRequest:
    return DeviceRequest(name=name, count=count, selectors=tuple(compile_selector(e) for e in cel))


IS_GPU = 'device.driver == "gpu.nvidia.com"'
IS_NIC = 'device.driver == "nic.nvidia.com"'


def gpus(count: int = 1, *cel: str) -> tuple[DeviceRequest, ...]:
    """A request for `count` GPUs (selects on the GPU driver, plus any extra CEL)."""
    return (req(count, IS_GPU, *cel),)


def arch(name: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].architecture == "{name}"'


# --- observations -----------------------------------------------------------------------


def observed(
    buckets: Mapping[int, int] | Sequence[tuple[Mapping[str, int], int]] | None,
    *,
    observed_nodes: int | None = None,
    at: datetime | None = NOW,
    last_allocation: datetime | None = NOW,
    excluded: Mapping[str, int] | None = None,
    unusable: str = "",
) -> PoolObservation:
    """A pool observation; `buckets` maps free GPUs -> nodes, or lists (free vector, nodes)."""
    built: tuple[Bucket, ...] | None
    if buckets is None:
        built = None
    elif isinstance(buckets, Mapping):
        built = tuple(Bucket({GPU: free}, nodes) for free, nodes in buckets.items())
    else:
        built = tuple(
            Bucket({DriverName(k): v for k, v in free.items()}, nodes) for free, nodes in buckets
        )
    if observed_nodes is None:
        observed_nodes = sum(b.nodes for b in built) if built else 0
    return PoolObservation(
        observed_nodes=observed_nodes,
        buckets=built,
        observed_at=at,
        last_allocation_time=last_allocation,
        excluded_nodes=dict(excluded or {}),
        unusable_reason=unusable,
    )


# --- clusters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterBuilder:
    name: str
    labels_: Mapping[str, str] = field(default_factory=dict)
    taints_: tuple[Taint, ...] = ()
    pools_: tuple[Pool, ...] = ()
    is_ready: bool = True
    gateway: str = "10.0.0.1"
    agent_at: datetime | None = None

    def label(self, key: str, value: str) -> ClusterBuilder:
        return replace(self, labels_={**self.labels_, key: value})

    def pool(
        self,
        name: str = "default",
        *,
        nodes: int = 4,
        gpus: int = 8,
        devices: Sequence[Device] | None = None,
        max_nodes: int | None = None,
        observation: PoolObservation | None = None,
        arch: str = "Hopper",
    ) -> ClusterBuilder:
        devs = tuple(devices) if devices is not None else (gpu(gpus, arch=arch),)
        built = Pool(
            name=PoolName(name),
            class_name=f"class-{name}",
            devices=devs,
            node_count=nodes,
            max_node_count=max_nodes,
            observation=observation,
        )
        return replace(self, pools_=(*self.pools_, built))

    def taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> ClusterBuilder:
        return replace(self, taints_=(*self.taints_, Taint(key, TaintEffect(effect), value)))

    def not_ready(self) -> ClusterBuilder:
        return replace(self, is_ready=False)

    def no_gateway(self) -> ClusterBuilder:
        return replace(self, gateway="")

    def reported(self, at: datetime) -> ClusterBuilder:
        return replace(self, agent_at=at)

    def build(self) -> Cluster:
        return Cluster(
            name=ClusterName(self.name),
            labels=dict(self.labels_),
            taints=self.taints_,
            is_ready=self.is_ready,
            gateway_address=self.gateway,
            pools=self.pools_,
            agent_observed_at=self.agent_at,
        )


def cluster(name: str) -> ClusterBuilder:
    return ClusterBuilder(name)


# --- deployments ------------------------------------------------------------------------


def key(name: str) -> DeploymentKey:
    namespace, _, short = name.rpartition("/")
    return DeploymentKey(namespace or "ml", short)


def standalone(requests: Sequence[DeviceRequest] = ()) -> Member:
    return Member(Role.STANDALONE, 1, tuple(requests))


def leader(requests: Sequence[DeviceRequest] = ()) -> Member:
    return Member(Role.LEADER, 1, tuple(requests))


def worker(requests: Sequence[DeviceRequest] = (), nodes: int = 1) -> Member:
    return Member(Role.WORKER, nodes, tuple(requests))


@dataclass(frozen=True)
class DeploymentBuilder:
    name: str
    replicas_: int = 1
    engines_: tuple[Engine, ...] = ()
    selector: Mapping[str, str] = field(default_factory=dict)
    tolerations_: tuple[Toleration, ...] = ()
    fill: bool = True

    def replicas(self, n: int) -> DeploymentBuilder:
        return replace(self, replicas_=n)

    def select(self, **labels: str) -> DeploymentBuilder:
        return replace(self, selector={**self.selector, **labels})

    def tolerate(
        self, key: str = "", effect: str | None = None, *, operator: str = "Exists", value: str = ""
    ) -> DeploymentBuilder:
        tol = Toleration(
            key, TolerationOperator(operator), value, TaintEffect(effect) if effect else None
        )
        return replace(self, tolerations_=(*self.tolerations_, tol))

    def no_fill(self) -> DeploymentBuilder:
        return replace(self, fill=False)

    def engine(
        self,
        name: str = "main",
        *,
        gpus: int = 1,
        copies: int = 1,
        cel: Sequence[str] = (),
        phase: str | None = None,
        members: Sequence[Member] | None = None,
    ) -> DeploymentBuilder:
        if members is None:
            members = (standalone((req(gpus, IS_GPU, *cel),)),)
        built = Engine(name, tuple(members), copies, Phase(phase) if phase else None)
        return replace(self, engines_=(*self.engines_, built))

    def gang(
        self,
        name: str = "main",
        *,
        leader_gpus: int = 8,
        worker_gpus: int = 8,
        workers: int = 1,
        copies: int = 1,
    ) -> DeploymentBuilder:
        lead = leader(gpus(leader_gpus)) if leader_gpus else leader()
        return self.engine(
            name, copies=copies, members=(lead, worker(gpus(worker_gpus), nodes=workers))
        )

    def pd(self, prefill_gpus: int = 4, decode_gpus: int = 4) -> DeploymentBuilder:
        return self.engine("prefill", gpus=prefill_gpus, phase="Prefill").engine(
            "decode", gpus=decode_gpus, phase="Decode"
        )

    @property
    def key(self) -> DeploymentKey:
        return key(self.name)

    def build(self) -> Deployment:
        engines = self.engines_ or (Engine("main", (standalone(gpus(1)),)),)
        is_pd = any(e.phase is not None for e in engines)
        return Deployment(
            key=self.key,
            replicas=self.replicas_,
            engines=engines,
            cluster_selector=dict(self.selector),
            tolerations=self.tolerations_,
            serving_mode=ServingMode.PREFILL_DECODE if is_pd else ServingMode.UNIFIED,
            fill=self.fill,
        )


def deployment(name: str) -> DeploymentBuilder:
    return DeploymentBuilder(name)


# --- replicas ---------------------------------------------------------------------------


def stamp(
    dep: DeploymentBuilder | Deployment,
    cluster_b: ClusterBuilder | Cluster,
    index: int,
    pool: str | Sequence[str] = "default",
    *,
    name: str | None = None,
    status: ReplicaStatus | None = None,
    generation: int = 1,
) -> Replica:
    """A replica of `dep` pinned to `pool` (one per engine), resolved as the scheduler would."""
    d = dep.build() if isinstance(dep, DeploymentBuilder) else dep
    c = cluster_b.build() if isinstance(cluster_b, ClusterBuilder) else cluster_b
    pools = [pool] * len(d.engines) if isinstance(pool, str) else list(pool)
    by_name = {p.name: p for p in c.pools}
    engines = []
    for engine, pool_name in zip(d.engines, pools, strict=True):
        members = []
        for m in engine.members:
            p = by_name.get(PoolName(pool_name))
            resolved = match_member(m, p.devices).resolved if p is not None else ()
            members.append(ReplicaMember(m.role, PoolName(pool_name), m.worker_nodes, resolved))
        engines.append(ReplicaEngine(engine.name, tuple(members), engine.copies, engine.phase))
    return Replica(
        name=name or replica_name(d.key.name, c.name, index),
        deployment=d.key,
        cluster=ClusterName(c.name),
        index=index,
        engines=tuple(engines),
        generation=generation,
        status=status or ReplicaStatus(),
    )


def settled(replica: Replica, at: datetime = NOW, *, allocated: int | None = None) -> Replica:
    """The replica with a status saying every pod (or `allocated` per member) is allocated."""
    pools: dict[str, list[MemberPods]] = {}
    for engine in replica.engines:
        for m in engine.members:
            if not m.is_claiming:
                continue
            expected = m.pods_per_copy * engine.copies
            got = expected if allocated is None else allocated
            pools.setdefault(m.pool, []).append(MemberPods(engine.name, m.role, got, got))
    status = ReplicaStatus(
        pods_scheduled=allocated is None,
        observed_generation=replica.generation,
        pools=tuple(
            ReplicaPoolStatus(PoolName(p), at, tuple(members)) for p, members in pools.items()
        ),
    )
    return replace(replica, status=status)


def replica_from(placement: Placement, at: datetime = NOW) -> Replica:
    """Turn a placement into an existing replica whose pods are all allocated at `at`."""
    engines = tuple(
        ReplicaEngine(
            e.name,
            tuple(ReplicaMember(m.role, m.pool, m.worker_nodes, m.requests) for m in e.members),
            e.copies,
            e.phase,
        )
        for e in placement.engines
    )
    base = Replica(
        placement.name, placement.deployment, placement.cluster, placement.index, engines
    )
    return settled(base, at)


def snapshot(
    clusters: Sequence[ClusterBuilder | Cluster] = (),
    deployments: Sequence[DeploymentBuilder | Deployment] = (),
    replicas: Sequence[Replica] = (),
    *,
    pack: Sequence[str] = (),
    max_buckets: int | None = None,
) -> Snapshot:
    config = SchedulingConfig(
        node_choice={ClusterName(c): NodeChoice.PACK for c in pack},
        **({"max_histogram_buckets": max_buckets} if max_buckets is not None else {}),
    )
    return Snapshot(
        deployments=tuple(
            d.build() if isinstance(d, DeploymentBuilder) else d for d in deployments
        ),
        clusters=tuple(c.build() if isinstance(c, ClusterBuilder) else c for c in clusters),
        replicas=tuple(replicas),
        config=config,
    )


# --- views of the outcome ---------------------------------------------------------------


def where(p: Placement) -> str:
    """`cluster/index:pool` (pools per engine joined by '+')."""
    return f"{p.cluster}/{p.index}:{'+'.join(e.members[0].pool for e in p.engines)}"


@dataclass(frozen=True)
class Outcome:
    retained: tuple[str, ...] = ()
    created: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    condition: tuple[str, str] = ("True", "ReplicasCreated")


def outcome(decision: Decision | DeploymentDecision, name: str = "ml/x") -> Outcome:
    d = decision if isinstance(decision, DeploymentDecision) else decision.for_deployment(key(name))
    return Outcome(
        retained=tuple(where(p) for p in d.retained),
        created=tuple(where(p) for p in d.created),
        dropped=tuple(f"{r.cluster}/{r.index}:{r.reason.code}" for r in d.dropped),
        condition=(d.condition.status, d.condition.reason),
    )
