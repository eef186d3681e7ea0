"""The core's data model: what the scheduler and the agent's observer read and return.

Everything here is a frozen, slotted dataclass built from the standard library only. The API
layer (`gpufleet.api`) converts validated Kubernetes-shaped manifests into these types; the core
never sees YAML, pydantic or a client.

Vocabulary (see docs/architecture.md):

- A *class* describes what one node of a pool offers: a tuple of `Device` kinds, each with a
  per-node `count`.
- A *pool* is a named group of identical nodes in a cluster, sized `node_count` and allowed to
  grow to `max_node_count`. It may carry a `PoolObservation` from the cluster's agent: a
  histogram of its nodes by free devices, keyed by DRA driver.
- A *deployment* asks for `replicas` copies of a serving *replica*: engines of members, each
  member a pod template with device requests selected by CEL.
- A *replica* is one placed instance, pinned to one cluster, each member pinned to one pool.

Device selection is abstracted as the `Selector` protocol: the CEL layer (`gpufleet.cel`)
compiles expressions into objects with a `matches(device)` method, so the core stays
stdlib-only while evaluating real Kubernetes CEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import NewType, Protocol

ClusterName = NewType("ClusterName", str)
PoolName = NewType("PoolName", str)
DriverName = NewType("DriverName", str)

#: The largest histogram the scheduler uses; a pool reporting more buckets falls back to
#: whole-node accounting (DESIGN.md, "What counts as free"; review point 10).
MAX_HISTOGRAM_BUCKETS = 256


class ClaimMode(StrEnum):
    """How a device kind is obtained: claimed through DRA, or matched for placement only."""

    DRA = "DRA"
    SYNTHETIC = "Synthetic"
    #: Handed out by a device plugin as the extended resource `Device.resource_name`
    #: (`nvidia.com/gpu`): counted under that name, requested in the pod's limits.
    DEVICE_PLUGIN = "DevicePlugin"


class AttributeKind(StrEnum):
    STRING = "string"
    VERSION = "version"
    BOOL = "bool"
    INT = "int"


@dataclass(frozen=True, slots=True)
class Attribute:
    """One typed device attribute, as in a DRA ResourceSlice (`{string|version|bool|int}`)."""

    kind: AttributeKind
    value: str | bool | int


@dataclass(frozen=True, slots=True)
class Device:
    """One kind of device that every node of a pool offers `count` of.

    `attributes` and `capacity` keys are bare (`memory`, under the driver's domain) or
    qualified (`domain/id`). Capacity values are Kubernetes quantity strings, kept verbatim.
    """

    name: str
    driver: DriverName
    claim: ClaimMode = ClaimMode.DRA
    device_class_name: str = ""
    count: int = 1
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    #: The extended resource of a `DevicePlugin` device ("" otherwise).
    resource_name: str = ""

    @property
    def is_counted(self) -> bool:
        """Whether the device counts in its pool's free-device vectors (DRA or device plugin)."""
        return self.claim is ClaimMode.DRA or self.claim is ClaimMode.DEVICE_PLUGIN

    @property
    def key(self) -> DriverName:
        """What the device counts under in a pool's vectors and histogram: its DRA driver, or
        a device plugin's extended resource (a name with a `/`, never a driver's)."""
        if self.claim is ClaimMode.DEVICE_PLUGIN:
            return DriverName(self.resource_name)
        return self.driver


class Selector(Protocol):
    """A compiled device selector. Evaluation errors are non-matches, never exceptions."""

    @property
    def expression(self) -> str: ...

    def matches(self, device: Device) -> bool: ...


# --- clusters and pools -----------------------------------------------------------------


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration semantics; an empty `effect` matches every effect."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None


@dataclass(frozen=True, slots=True)
class HostRoom:
    """`nodes` nodes of a bucket each have at least `milli_cpu` millicores and `memory` bytes
    free (allocatable less the requests of the pods bound there)."""

    milli_cpu: int
    memory: int
    nodes: int


@dataclass(frozen=True, slots=True)
class Bucket:
    """`nodes` nodes of a pool each have exactly `free` devices free, per DRA driver.

    `host`: the CPU and memory those nodes have free, as at most a few points that together
    count `nodes` nodes (a node of a point has at least that much free); None when the agent
    did not say (an older agent): then the fit assumes no CPU or memory limit there."""

    free: Mapping[DriverName, int]
    nodes: int
    host: tuple[HostRoom, ...] | None = None


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """What a cluster's agent saw of one pool, at `observed_at` on the agent's clock.

    `buckets` is None when the agent could not build a histogram (over the bucket cap, or an
    unusable pool); the scheduler then falls back to whole-node accounting for that pool.
    `last_allocation_time` is the latest first-seen allocation time over the pool's claims:
    every claim first seen allocated at or before it is already inside `buckets`.
    """

    observed_nodes: int
    buckets: tuple[Bucket, ...] | None
    observed_at: datetime | None = None
    last_allocation_time: datetime | None = None
    excluded_nodes: Mapping[str, int] = field(default_factory=dict)
    extended_resources: Mapping[str, int] = field(default_factory=dict)
    unusable_reason: str = ""
    #: A node's shareable room, (millicores, memory bytes): its allocatable less its
    #: DaemonSets' requests, the least over the pool's nodes (what proportional requests
    #: divide, `pod_requests.proportional_requests`); None: the agent did not say.
    shareable: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Pool:
    name: PoolName
    class_name: str
    devices: tuple[Device, ...]
    node_count: int = 1
    max_node_count: int | None = None
    min_node_count: int = 0
    observation: PoolObservation | None = None
    #: As `Deployment.signature` (e.g. its cluster object's uid and resourceVersion, the
    #: classes it was converted with and its name).
    signature: tuple[object, ...] = field(default=(), compare=False, repr=False)

    @property
    def nodes(self) -> int:
        """The ceiling the pool may reach: `max_node_count` if set, else `node_count`."""
        return self.max_node_count if self.max_node_count is not None else self.node_count


class Steering(StrEnum):
    """Whether a cluster's agent steers kube-scheduler to the nodes it chose by best fit
    (node affinity on `kubernetes.io/hostname`): preferred (weight 100), required (the set of
    a member's nodes), gated (each pod created behind a scheduling gate, then given its own
    node by a required term, and the gate lifted), or not at all. A steered cluster is
    predicted `Pack`; one that is not, by its `node_choice`."""

    PREFERRED = "Preferred"
    REQUIRED = "Required"
    GATED = "Gated"
    OFF = "Off"


@dataclass(frozen=True, slots=True)
class Cluster:
    name: ClusterName
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    is_ready: bool = True
    gateway_address: str = ""
    pools: tuple[Pool, ...] = ()
    #: When the cluster's agent last reported (any pool); None when no agent has reported.
    agent_observed_at: datetime | None = None
    #: Whether its agent steers pods to the nodes it chose (then the fleet predicts `Pack`).
    #: The API's default is Preferred (`InferenceClusterSpec.steering`); a cluster built
    #: without one here is predicted by `SchedulingConfig.node_choice`.
    steering: Steering = Steering.OFF


# --- deployments ------------------------------------------------------------------------


class Role(StrEnum):
    STANDALONE = "Standalone"
    LEADER = "Leader"
    WORKER = "Worker"


class Phase(StrEnum):
    PREFILL = "Prefill"
    DECODE = "Decode"


class ServingMode(StrEnum):
    UNIFIED = "Unified"
    PREFILL_DECODE = "PrefillDecode"


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """`count` devices per pod of one device kind whose every selector matches."""

    name: str
    count: int
    selectors: tuple[Selector, ...] = ()


@dataclass(frozen=True, slots=True)
class Member:
    """One pod template of an engine. `requests` empty means no nodeSelector: claimless.
    `milli_cpu` and `memory` (bytes): what each pod requests of its node's CPU and memory
    (its template's `resources.requests`), checked by the fit with its devices."""

    role: Role = Role.STANDALONE
    worker_nodes: int = 1
    requests: tuple[DeviceRequest, ...] = ()
    milli_cpu: int = 0
    memory: int = 0
    #: Size each pod's unrequested CPU and memory in proportion to its devices on the pool it
    #: lands on (`pod_requests.proportional_requests`); explicit requests win.
    proportional: bool = False

    @property
    def pods_per_copy(self) -> int:
        return self.worker_nodes if self.role is Role.WORKER else 1


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    members: tuple[Member, ...]
    copies: int = 1
    phase: Phase | None = None

    @property
    def is_gang(self) -> bool:
        return any(m.role is not Role.STANDALONE for m in self.members)


@dataclass(frozen=True, slots=True)
class DeploymentKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class RolloutStrategy:
    """`spec.strategy.rollingUpdate`, in replicas: how many may exist above `replicas` while
    a template change rolls, and how many may be unavailable below it (core/rollout.py). Both
    0 reads as a surge of 1 (the API refuses it)."""

    max_surge: int = 1
    max_unavailable: int = 0


@dataclass(frozen=True, slots=True)
class Deployment:
    key: DeploymentKey
    replicas: int
    engines: tuple[Engine, ...]
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    serving_mode: ServingMode = ServingMode.UNIFIED
    #: False when a dependency (the model cache) is unresolved: retain only, never place.
    fill: bool = True
    #: What its replicas run (a hash of the template); "" when not declared: then no rollout,
    #: every replica is re-stamped in place (core/rollout.py).
    revision: str = ""
    strategy: RolloutStrategy = field(default_factory=RolloutStrategy)
    #: What the caller declares identifies this content across `schedule` calls (e.g. the
    #: object's uid and generation); () when it declares none, and then nothing derived from
    #: it is reused in a later call. It must cover every field above (the controller's does:
    #: they are all in the spec, which moves `generation`). Not part of the value (equality
    #: ignores it).
    signature: tuple[object, ...] = field(default=(), compare=False, repr=False)


# --- replicas ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResolvedRequest:
    """A member's request resolved to a DRA device kind of its pool: what the pod claims."""

    name: str
    device_class_name: str
    count: int
    selectors: tuple[str, ...] = ()
    #: The DRA driver of the device it resolved to (the histogram's key).
    driver: DriverName = DriverName("")


@dataclass(frozen=True, slots=True)
class ReplicaMember:
    role: Role
    pool: PoolName
    worker_nodes: int = 1
    requests: tuple[ResolvedRequest, ...] = ()
    #: Each pod's CPU (millicores) and memory (bytes) requests, as `Member`'s (a proportional
    #: member's as sized on its pool).
    milli_cpu: int = 0
    memory: int = 0
    #: Whether `milli_cpu` and `memory` were sized in proportion (the replica's `hostRequests`).
    proportional: bool = False

    @property
    def pods_per_copy(self) -> int:
        return self.worker_nodes if self.role is Role.WORKER else 1

    @property
    def is_claiming(self) -> bool:
        return bool(self.requests)


@dataclass(frozen=True, slots=True)
class ReplicaEngine:
    name: str
    members: tuple[ReplicaMember, ...]
    copies: int = 1
    phase: Phase | None = None


@dataclass(frozen=True, slots=True)
class MemberPods:
    """The agent's count of one member's pods on one pool."""

    engine: str
    role: Role
    live_pods: int
    allocated_pods: int


@dataclass(frozen=True, slots=True)
class ReplicaPoolStatus:
    """What the replica's observation says about its pods on one pool."""

    pool: PoolName
    last_allocation_time: datetime | None
    members: tuple[MemberPods, ...] = ()
    #: Live claiming pods (of any generation, not allocated) that kube-scheduler marked
    #: `PodScheduled=False, reason Unschedulable`, and the earliest time one was so marked
    #: (its condition's `lastTransitionTime`; None when no such pod gives one).
    unschedulable_pods: int = 0
    unschedulable_since: datetime | None = None
    #: The cluster autoscaler's latest verdict over those pods (`ScaleUp`), and when it was
    #: given (the event's time); None when it said nothing.
    scale_up: ScaleUp | None = None
    scale_up_at: datetime | None = None
    #: Live pods of the replica on the pool, of any generation, Running with `Ready=True`.
    ready_pods: int = 0
    #: Live pods of the replica on the pool, of any generation, on a cordoned node (a drain):
    #: the replica is replaced as a rollout step (core/rollout.py).
    draining_pods: int = 0


class ScaleUp(StrEnum):
    """What a cluster's autoscaler said of a replica's unschedulable pods (their Events)."""

    #: `TriggeredScaleUp`: a node is being added for them.
    TRIGGERED = "Triggered"
    #: `NotTriggerScaleUp`: no node will be added (maximum reached, stockout, does not fit).
    NOT_TRIGGERED = "NotTriggered"


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """The replica's observed state, as the controller publishes it from ReplicaObservations.

    `observed_generation` is the replica generation the agent counted pods for; when it differs
    from the replica's `generation` nothing is accounted for (review point 11).
    """

    pods_scheduled: bool = False
    observed_generation: int | None = None
    pools: tuple[ReplicaPoolStatus, ...] = ()

    @property
    def is_serving(self) -> bool:
        """Whether some pod of the replica (of any generation) is Running and Ready: then it is
        never deleted as stuck (DESIGN.md decision 11)."""
        return any(p.ready_pods for p in self.pools)

    @property
    def is_draining(self) -> bool:
        """Whether some pod of the replica is on a cordoned node: it must move."""
        return any(p.draining_pods for p in self.pools)


@dataclass(frozen=True, slots=True)
class Replica:
    """An existing ModelReplica: one placed serving instance, identified by (cluster, index)."""

    name: str
    deployment: DeploymentKey
    cluster: ClusterName
    index: int
    engines: tuple[ReplicaEngine, ...]
    generation: int = 1
    status: ReplicaStatus = field(default_factory=ReplicaStatus)
    #: The deployment revision it was made for ("" unknown: it counts as current).
    revision: str = ""
    #: As `Deployment.signature` (e.g. the object's uid and resourceVersion), covering its
    #: status and revision too.
    signature: tuple[object, ...] = field(default=(), compare=False, repr=False)


# --- the snapshot -----------------------------------------------------------------------


class NodeChoice(StrEnum):
    """How a cluster's own scheduler picks a node for a DRA pod, as the fleet predicts it."""

    SPREAD = "Spread"
    PACK = "Pack"


@dataclass(frozen=True, slots=True)
class SchedulingConfig:
    #: An observation older than this is stale: still used, and flagged in diagnoses.
    stale_after_s: float = 60.0
    #: A cluster whose agent is silent longer than this takes no new replicas.
    expire_after_s: float = 300.0
    #: Per cluster name, how its scheduler chooses nodes when its agent does not steer
    #: (`Cluster.steering` Off; a steered cluster is predicted Pack); default Spread.
    node_choice: Mapping[str, NodeChoice] = field(default_factory=dict)
    max_histogram_buckets: int = MAX_HISTOGRAM_BUCKETS


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything `schedule` reads. Order of every tuple is irrelevant to the result."""

    deployments: tuple[Deployment, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    replicas: tuple[Replica, ...] = ()
    config: SchedulingConfig = field(default_factory=SchedulingConfig)
    #: Where each deployment's new replicas must not go, and until when (re-placement
    #: backoff: the hub controller's memory, docs/controller.md). An entry whose `until` is
    #: not after `now` is ignored.
    avoid: tuple[Avoid, ...] = ()


@dataclass(frozen=True, slots=True)
class Avoid:
    """The (cluster, pool) a deployment's new replicas avoid until `until` (`pool` None: every
    pool of the cluster; `cluster` "": every cluster), because a replica of it could not run there: `cause` is the reason
    code (`PodsUnschedulable`, `PolicyDenied`) and `message` says why, with numbers.

    `replica` names the replica found stuck there: while the entry stands it is dropped (and
    re-placed elsewhere) unless its pods are all scheduled: a running replica is never moved.
    """

    deployment: DeploymentKey
    cluster: ClusterName
    pool: PoolName | None
    until: datetime
    cause: str
    message: str
    replica: str = ""
