"""Typed models of the `gpufleet.io/v1alpha1` API (docs/design/shapes.md is the contract).

Each kind is a pydantic model whose fields carry the schema: types (strict: `"3"` is not an
integer, `1` is not a boolean), required fields, bounds and enums; unknown fields are errors,
except inside pod `template`s, which are Kubernetes PodTemplateSpecs kept as free-form dicts.
`metadata` accepts every standard ObjectMeta field, including server-populated ones.

A rule on one field (a name format, CEL that compiles, a quantity or semver that parses) is a
validator of that field's type: it runs whenever the field has the right type. The rules that
span fields (unique keys, the shape of an engine's members, P/D pairs, `maxNodeCount` against
`minNodeCount`) are each model's `check(rules)`; rules.py runs them on every well-formed part of
an object whatever else is broken, so one validation reports every error of the object, each
once, and none as a consequence of another.

Pool names ratchet: `validate(new, old)` passes the pool names of `old` in the validation
context under `LEGACY_POOL_NAMES`, and a pool keeping such a name skips the DNS-label rule.

Dump with `ApiObject.to_manifest()`: aliases, only the fields that were set (defaults are not
written out) and no None fields, so a dump reloads to an equal object and dumps the same again.
"""

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    AwareDatetime,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
)

from gpufleet.api.names import (
    DNS_LABEL_RULE,
    DNS_SUBDOMAIN_RULE,
    LABEL_VALUE_RULE,
    QUALIFIED_NAME_RULE,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    is_qualified_name,
)
from gpufleet.api.rules import RULE_ERROR_TYPE, ApiModel, Loc, Rules, raise_rule, rule_error
from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.core.labels import RESERVED_LABEL_PREFIX
from gpufleet.core.model import (
    ClaimMode,
    Phase,
    Role,
    ServingMode,
    Steering,
    TaintEffect,
    TolerationOperator,
)
from gpufleet.core.quantity import parse_quantity
from gpufleet.core.semver import parse_semver

API_GROUP: Final = "gpufleet.io"
API_VERSION: Final = "gpufleet.io/v1alpha1"

#: Validation-context key: the pool names of the stored object, exempt from the name rule.
LEGACY_POOL_NAMES: Final = "legacyPoolNames"

POOL_NAME_MAX_CHARS: Final = 40
MAX_NODES: Final = 10_000
MAX_REPLICAS: Final = 1000
CEL_MAX_CHARS: Final = 10 * 1024
#: Kubernetes integers are int64.
INT64_MAX: Final = 2**63 - 1
#: A Lease's `leaseTransitions` is an int32: the highest lease epoch a report may claim.
LEASE_EPOCH_MAX: Final = 2**31 - 1
#: A Lease incarnation: a metadata.uid (a UUID) or `standalone`; at most 64 characters.
LEASE_UID_MAX_CHARS: Final = 64
LEASE_UID: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: An agent's version (`status.agent.version`): a package version, semver or PEP 440.
AGENT_VERSION_MAX_CHARS: Final = 64
AGENT_VERSION: Final = r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$"
#: The Lease incarnation an agent without leader election reports (`--no-leader-elect`).
STANDALONE_LEASE: Final = "standalone"
AGENT_IDENTITY_MAX_CHARS: Final = 253

__all__ = ["RULE_ERROR_TYPE"]


def _dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise_rule(DNS_LABEL_RULE)
    return value


def _dns_subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise_rule(DNS_SUBDOMAIN_RULE)
    return value


def _pool_name(value: str, info: ValidationInfo) -> str:
    legacy_names: frozenset[str] = (info.context or {}).get(LEGACY_POOL_NAMES, frozenset())
    if value not in legacy_names and not is_dns_label(value, POOL_NAME_MAX_CHARS):
        raise_rule(DNS_LABEL_RULE)
    return value


NonNegativeInt = Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]
Name = Annotated[StrictStr, Field(min_length=1)]
DnsLabelName = Annotated[StrictStr, Field(min_length=1, max_length=63), AfterValidator(_dns_label)]
StringMap = dict[StrictStr, StrictStr]


def _qualified_name(value: str) -> str:
    if not is_qualified_name(value):
        raise_rule(QUALIFIED_NAME_RULE)
    return value


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise_rule(LABEL_VALUE_RULE)
    return value


QualifiedName = Annotated[StrictStr, AfterValidator(_qualified_name)]
#: Labels as the API server validates them: qualified-name keys, short values.
Labels = dict[QualifiedName, Annotated[StrictStr, AfterValidator(_label_value)]]
Annotations = dict[QualifiedName, StrictStr]


# --- metadata and conditions --------------------------------------------------------------


class OwnerReference(ApiModel):
    api_version: Name
    kind: Name
    name: Name
    uid: Name
    controller: StrictBool | None = None
    block_owner_deletion: StrictBool | None = None


class ObjectMeta(ApiModel):
    """Kubernetes ObjectMeta: every standard field is accepted, a misspelt one is not."""

    name: Annotated[Name, AfterValidator(_dns_subdomain)]
    namespace: Annotated[StrictStr, AfterValidator(_dns_label)] | None = None
    generate_name: StrictStr | None = None
    labels: Labels = Field(default_factory=dict)
    annotations: Annotations = Field(default_factory=dict)
    uid: StrictStr | None = None
    resource_version: StrictStr | None = None
    generation: NonNegativeInt | None = None
    creation_timestamp: AwareDatetime | None = None
    deletion_timestamp: AwareDatetime | None = None
    deletion_grace_period_seconds: NonNegativeInt | None = None
    finalizers: list[StrictStr] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    managed_fields: list[dict[str, Any]] | None = None
    self_link: StrictStr | None = None


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A condition, as metav1.Condition."""

    type: Name
    """The condition's type, CamelCase (Ready, ReplicasScheduled, ModelPodsScheduled...); unique in the list."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: StrictStr | None = None
    """Machine-readable CamelCase reason for the last transition."""
    message: StrictStr | None = None
    """Human-readable details of the last transition."""
    last_transition_time: AwareDatetime | None = None
    """When the status last changed (RFC 3339)."""
    observed_generation: NonNegativeInt | None = None
    """The .metadata.generation the condition was set for."""


def _unique_conditions(rules: Rules, conditions: Sequence[Condition]) -> None:
    rules.unique("conditions", conditions, lambda c: c.type, describe="type")


def is_condition_true(conditions: Sequence[Condition], condition_type: str) -> bool:
    return any(c.type == condition_type and c.status is ConditionStatus.TRUE for c in conditions)


# --- InferenceClass -----------------------------------------------------------------------


def _semver(value: str) -> str:
    try:
        parse_semver(value)
    except ValueError as error:
        raise_rule(f"must be a semantic version: {error}")
    return value


def _quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except ValueError as error:
        raise_rule(f"must be a Kubernetes quantity: {error}")
    return value


class AttributeValue(ApiModel):
    """A typed device attribute: exactly one of `string`, `version` (strict semver), `bool`, `int`."""

    string: StrictStr | None = None
    """A string value."""
    version: Annotated[StrictStr, AfterValidator(_semver)] | None = None
    """A semantic version (2.0.0 style), compared with semver() in CEL."""
    bool_: StrictBool | None = Field(default=None, alias="bool")
    """A boolean value."""
    int_: Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)] | None = Field(
        default=None, alias="int"
    )
    """An integer value (int64)."""

    def check(self, rules: Rules) -> None:
        with rules.reading():  # a broken value is still a value that was set
            # (Summed by hand: every device of every published pool has its attributes
            # checked on each status read.)
            set_values = (
                (self.string is not None)
                + (self.version is not None)
                + (self.bool_ is not None)
                + (self.int_ is not None)
            )
            if set_values != 1:
                rules.add((), "must set exactly one of string, version, bool, int")


class CapacityValue(ApiModel):
    """A device capacity: a Kubernetes quantity (`81559Mi`), kept verbatim."""

    value: Annotated[StrictStr, AfterValidator(_quantity)]
    """A Kubernetes quantity, for example 81559Mi."""


class DeviceSpec(ApiModel):
    """One kind of device that every node of a pool offers `count` of."""

    name: DnsLabelName
    """The device's name in the class, a DNS label; unique in the class."""
    driver: Name
    """The DRA driver that publishes the device, for example gpu.nvidia.com."""
    claim: ClaimMode = ClaimMode.DRA
    """DRA: pods claim the device through a ResourceClaim; DevicePlugin: a device plugin hands it out as the extended resource resourceName, which pods request in their limits; Synthetic: the device is modelled only (no claim)."""
    device_class_name: StrictStr | None = None
    """The DRA DeviceClass to claim from; required when claim is DRA."""
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    """How many of these devices one node of the pool offers (1-64)."""
    attributes: Annotated[dict[StrictStr, AttributeValue], Field(max_length=32)] = Field(
        default_factory=dict
    )
    """Device attributes by name, as DRA publishes them; at most 32."""
    capacity: Annotated[dict[StrictStr, CapacityValue], Field(max_length=32)] = Field(
        default_factory=dict
    )
    """Device capacities by name (quantities), as DRA publishes them; at most 32."""
    resource_name: Annotated[StrictStr, Field(max_length=253)] | None = None
    """The extended resource a device plugin advertises on the nodes' allocatable, for example nvidia.com/gpu; required when claim is DevicePlugin, and only then."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.claim == ClaimMode.DRA and not self.device_class_name:
                rules.add(("deviceClassName",), "is required when claim is DRA")
        with rules.reading():
            if self.claim == ClaimMode.DEVICE_PLUGIN:
                _check_resource_name(self.resource_name, rules)
            elif self.resource_name is not None:
                rules.add(("resourceName",), "is allowed only when claim is DevicePlugin")


def _check_resource_name(name: str | None, rules: Rules) -> None:
    """An extended resource name: `domain/name`, outside `kubernetes.io` (Kubernetes'
    `IsExtendedResourceName`)."""
    if not name:
        rules.add(("resourceName",), "is required when claim is DevicePlugin")
        return
    domain, _, rest = name.partition("/")
    if (
        not rest
        or "/" in rest
        or not _EXTENDED_DOMAIN.fullmatch(domain)
        or not _EXTENDED_NAME.fullmatch(rest)
        or domain == "kubernetes.io"
        or domain.endswith(".kubernetes.io")
        or name.startswith("requests.")
    ):
        rules.add(
            ("resourceName",),
            f"{name!r} is not an extended resource name (domain/name outside kubernetes.io, "
            "for example nvidia.com/gpu)",
        )


_EXTENDED_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_EXTENDED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")


Devices = Annotated[list[DeviceSpec], Field(min_length=1, max_length=16)]


class InferenceClassSpec(ApiModel):
    """The devices of one node."""

    devices: Devices
    """The kinds of device one node offers, 1-16, unique by name."""

    def check(self, rules: Rules) -> None:
        rules.unique("devices", self.devices, lambda d: d.name)


# --- InferenceCluster ---------------------------------------------------------------------


class TaintSpec(ApiModel):
    """A cluster taint."""

    key: Name
    """The taint key."""
    value: StrictStr = ""
    """The taint value."""
    effect: TaintEffect
    """NoSchedule (no new replicas unless tolerated) or NoExecute (also evicts untolerated replicas)."""


class NodePoolSpec(ApiModel):
    """A pool of identical nodes. `maxNodeCount` absent means fixed size (`nodeCount`)."""

    name: Annotated[
        StrictStr, Field(min_length=1, max_length=POOL_NAME_MAX_CHARS), AfterValidator(_pool_name)
    ]
    """The pool's name, a DNS label of at most 40 characters; nodes carry it in the gpufleet.io/pool label. Unique in the cluster."""
    class_name: Name
    """The InferenceClass that describes one node of this pool."""
    node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 1
    """Nodes in the pool now (0-10000); at most maxNodeCount."""
    min_node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 0
    """The fewest nodes an autoscaled pool shrinks to."""
    max_node_count: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] | None = None
    """The most nodes an autoscaled pool grows to; absent for a fixed-size pool. At least minNodeCount."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.max_node_count is not None and self.max_node_count < self.min_node_count:
                rules.add(
                    ("maxNodeCount",), f"must be at least minNodeCount ({self.min_node_count})"
                )
        with rules.reading():
            if self.max_node_count is not None and self.node_count > self.max_node_count:
                rules.add(("nodeCount",), f"must be at most maxNodeCount ({self.max_node_count})")


class InferenceClusterSpec(ApiModel):
    """A workload cluster."""

    taints: list[TaintSpec] = Field(default_factory=list)
    """Cluster taints; deployments must tolerate them. Unique by key and effect."""
    node_pools: Annotated[list[NodePoolSpec], Field(min_length=1, max_length=8)]
    """The cluster's pools of identical GPU nodes, 1-8, unique by name."""
    steering: Steering = Steering.PREFERRED
    """Agent steers pods to its best-fit nodes: Preferred (default), Required, Gated, or Off."""

    def check(self, rules: Rules) -> None:
        rules.unique("taints", self.taints, lambda t: f"{t.key}:{t.effect}", "key and effect")
        rules.unique("nodePools", self.node_pools, lambda p: p.name)


#: Host-room points per bucket, and the largest free CPU one may claim (millicores: a
#: million cores) and the largest free memory (bytes: 1 PiB).
MAX_HOST_POINTS: Final = 8
MAX_MILLI_CPU: Final = 10**9
MAX_MEMORY_BYTES: Final = 2**50


class HostPoint(ApiModel):
    """`nodes` nodes of a bucket, each with at least this CPU and memory free."""

    milli_cpu: Annotated[StrictInt, Field(ge=0, le=MAX_MILLI_CPU)]
    """Free CPU on each of these nodes, in millicores (allocatable less bound pods' requests)."""
    memory: Annotated[StrictInt, Field(ge=0, le=MAX_MEMORY_BYTES)]
    """Free memory on each of these nodes, in bytes."""
    nodes: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)]
    """How many of the bucket's nodes this point stands for."""


class Bucket(ApiModel):
    """`nodes` nodes each with exactly `free` devices free, per DRA driver."""

    free: dict[StrictStr, NonNegativeInt]
    """Free devices on each of these nodes, per DRA driver."""
    nodes: Annotated[StrictInt, Field(ge=1)]
    """How many nodes have exactly these free devices."""
    host_room: Annotated[list[HostPoint], Field(max_length=MAX_HOST_POINTS)] | None = None
    """The CPU and memory these nodes have free, as at most 8 points whose nodes add up to
    `nodes` (each node has at least its point's room); absent from older agents: the hub then
    assumes no CPU or memory limit."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.host_room is not None:
                counted = sum(p.nodes for p in self.host_room)
                if counted != self.nodes:
                    rules.add(
                        ("hostRoom",),
                        f"points count {counted} nodes, the bucket has {self.nodes}",
                    )


def _free_vector(bucket: Bucket) -> str:
    """A bucket's free devices as a canonical key: drivers sorted, zero counts dropped."""
    return ",".join(f"{d}={n}" for d, n in sorted(bucket.free.items()) if n) or "nothing free"


class ShareableRoom(ApiModel):
    """A node's CPU and memory that pods may share: its allocatable less its DaemonSets'
    requests."""

    milli_cpu: Annotated[StrictInt, Field(ge=0, le=MAX_MILLI_CPU)]
    """Millicores."""
    memory: Annotated[StrictInt, Field(ge=0, le=MAX_MEMORY_BYTES)]
    """Bytes."""


class ObservedPool(ApiModel):
    """What an agent saw of one pool. Over 256 buckets is valid: the converter falls back."""

    observed_at: AwareDatetime
    """When the agent observed the pool (RFC 3339)."""
    observed_nodes: NonNegativeInt
    """Nodes of the pool the agent saw."""
    free_devices: list[Bucket] | None = None
    """Histogram of nodes by free devices; absent when not available (whole-node accounting)."""
    last_allocation_time: AwareDatetime | None = None
    """The newest allocation the histogram accounts for."""
    excluded_nodes: dict[StrictStr, NonNegativeInt] = Field(default_factory=dict)
    """Nodes counted without free devices, by reason (Cordoned, NotReady, Tainted...)."""
    extended_resources: dict[StrictStr, NonNegativeInt] = Field(default_factory=dict)
    """Free extended resources of the pool, by name."""
    conditions: list[Condition] = Field(default_factory=list)
    """Conditions of the observation (HistogramAvailable, ScaleUpBlocked...)."""
    shareable_room: ShareableRoom | None = None
    """The least shareable room of the pool's nodes (allocatable less DaemonSet requests),
    what proportional requests divide; absent from older agents (then none is sized)."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            rules.unique("freeDevices", self.free_devices or (), _free_vector, "free vector")
        _unique_conditions(rules, self.conditions)


class ObservationState(StrEnum):
    FRESH = "Fresh"
    STALE = "Stale"
    EXPIRED = "Expired"


class PublishedObservation(ObservedPool):
    """A pool's observation as the controller publishes it in the cluster's status."""

    age_seconds: NonNegativeInt | None = None
    """The observation's age when the controller published it."""
    state: ObservationState | None = None
    """Fresh, Stale or Expired, as judged by the controller."""


class GpuPoolStatus(ApiModel):
    """A pool's devices and latest observation."""

    name: Name
    """The pool's name."""
    nodes: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)]
    """Nodes of the pool."""
    devices: list[DeviceSpec] = Field(default_factory=list)
    """The devices one node of the pool offers, from its class."""
    observation: PublishedObservation | None = None
    """The pool's latest observation, as the controller publishes it."""


class Gateway(ApiModel):
    """The cluster's inference gateway."""

    address: StrictStr
    """The address of the cluster's inference gateway."""


class AgentStatus(ApiModel):
    """The agent that reported."""

    identity: Annotated[Name, Field(max_length=AGENT_IDENTITY_MAX_CHARS)]
    """The identity of the agent that reported."""
    lease_epoch: Annotated[StrictInt, Field(ge=0, le=LEASE_EPOCH_MAX)]
    """The agent's Lease transitions when it reported (fences stale leaders). A Lease's
    `leaseTransitions` is an int32: at most 2147483647."""
    lease_uid: (
        Annotated[StrictStr, Field(min_length=1, max_length=LEASE_UID_MAX_CHARS, pattern=LEASE_UID)]
        | None
    ) = Field(default=None, alias="leaseUID")
    """The uid of the agent's Lease (its incarnation; `standalone` without leader election).
    Reports are fenced per incarnation: a recreated Lease is a new one."""
    observed_at: AwareDatetime | None = None
    """When the agent last reported."""
    version: (
        Annotated[
            StrictStr,
            Field(min_length=1, max_length=AGENT_VERSION_MAX_CHARS, pattern=AGENT_VERSION),
        ]
        | None
    ) = None
    """The gpufleet version of the agent that reported (its package version, e.g. `0.2.0`),
    checked by the hub against its version-skew policy; agents older than this field omit it."""


class InferenceClusterStatus(ApiModel):
    """The cluster's state, published by the controller."""

    conditions: list[Condition] = Field(default_factory=list)
    """The cluster's conditions (Ready...)."""
    gateway: Gateway | None = None
    """The cluster's inference gateway."""
    agent: AgentStatus | None = None
    """The agent that last reported for the cluster."""
    gpu_pools: Annotated[list[GpuPoolStatus], Field(max_length=8)] = Field(default_factory=list)
    """Free GPUs per pool, published by the controller from the observations."""

    def check(self, rules: Rules) -> None:
        _unique_conditions(rules, self.conditions)
        rules.unique("gpuPools", self.gpu_pools, lambda p: p.name)


# --- ModelDeployment ----------------------------------------------------------------------


def _compiles(expression: str) -> str:
    try:
        compile_selector(expression)
    except CelCompileError as error:
        raise_rule(f"does not compile: {error.message}")
    return expression


class CelSelectorSpec(ApiModel):
    """A DRA device selector in CEL; it must compile."""

    cel: Annotated[
        StrictStr, Field(min_length=1, max_length=CEL_MAX_CHARS), AfterValidator(_compiles)
    ]
    """A DRA CEL expression over `device` (at most 10 KiB); it must compile."""


Selectors = Annotated[list[CelSelectorSpec], Field(min_length=1, max_length=8)]


class DeviceRequestSpec(ApiModel):
    """`count` devices per pod, of a device whose every selector matches."""

    name: DnsLabelName
    """The request's name, a DNS label; unique in the member."""
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    """Devices per pod (1-64)."""
    selectors: Selectors
    """CEL selectors a device must all match, 1-8."""


class NodeSelectorSpec(ApiModel):
    """The devices each pod of a member claims."""

    devices: Annotated[list[DeviceRequestSpec], Field(min_length=1, max_length=16)]
    """What each pod of the member claims, 1-16 requests, unique by name."""

    def check(self, rules: Rules) -> None:
        rules.unique("devices", self.devices, lambda d: d.name)


class WorkerSpec(ApiModel):
    """Gang size: pods per copy are 1 leader + `nodes` workers."""

    nodes: Annotated[StrictInt, Field(ge=1, le=63)]
    """Worker pods per copy (1-63); each copy is one leader and this many workers."""


def _int64_only(template: dict[str, Any]) -> dict[str, Any]:
    """Every integer in a free-form template fits in int64, as the API server requires."""
    errors = []
    stack: list[tuple[Loc, object]] = [((), template)]
    while stack:  # iterative: the loader bounds depth, this need not trust it
        loc, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*loc, str(k)), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*loc, i), v) for i, v in enumerate(value))
        elif isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            errors.append(rule_error(loc, "must be an integer within int64"))
    if errors:
        raise ValidationError.from_exception_data("template", sorted(errors, key=_by_loc))
    return template


def _by_loc(error: Any) -> str:
    return repr(error["loc"])


#: A Kubernetes PodTemplateSpec, free-form.
PodTemplate = Annotated[dict[str, Any], AfterValidator(_int64_only)]


class RoleMember(ApiModel):
    """The role of a member; `worker` belongs on a Worker, and only there."""

    role: Role = Role.STANDALONE
    """Standalone (default), Leader or Worker."""
    worker: WorkerSpec | None = None
    """The gang size; required on a Worker member, and only there."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.role == Role.WORKER and self.worker is None:
                rules.add(("worker",), "is required for a Worker member")
        with rules.reading():
            if self.role != Role.WORKER and self.worker is not None:
                rules.add(("worker",), "is only allowed on a Worker member")


class HostRequests(StrEnum):
    """How a member's pods request CPU and memory."""

    TEMPLATE = "Template"
    PROPORTIONAL = "Proportional"


class MemberSpec(RoleMember):
    """A member of an engine: its role, devices and pod template."""

    node_selector: NodeSelectorSpec | None = None
    """The devices each pod claims; a member without one claims nothing and rides on its engine's pool."""
    template: PodTemplate
    """The pod template (a Kubernetes PodTemplateSpec), copied to the workload cluster."""
    host_requests: HostRequests = HostRequests.TEMPLATE
    """Template (default): the template's CPU and memory requests as written. Proportional:
    the fleet sizes each pod's CPU and memory requests the template leaves out in proportion
    to its devices on the node shape it lands on, less the node's DaemonSets' requests."""

    def check(self, rules: Rules) -> None:
        super().check(rules)
        with rules.reading():
            if self.host_requests == HostRequests.PROPORTIONAL and self.node_selector is None:
                rules.add(
                    ("hostRequests",),
                    "Proportional needs a nodeSelector: requests are in proportion to devices",
                )


_MEMBER_SHAPES: Final = (
    (Role.STANDALONE,),
    (Role.LEADER, Role.WORKER),
)


def _members_rule(rules: Rules, members: Sequence[RoleMember]) -> None:
    with rules.reading():
        roles = [Role(m.role) for m in members]
        shape = tuple(sorted(roles, key=list(Role).index))
        if shape not in _MEMBER_SHAPES:
            got = ", ".join(shape)
            rules.add(
                ("members",),
                f"must be exactly one Standalone member, or one Leader and one Worker (got {got})",
            )


class EngineSpec(ApiModel):
    """An engine: copies of a Standalone member or of a Leader + Worker gang."""

    name: DnsLabelName
    """The engine's name, a DNS label; unique in the deployment."""
    phase: Phase | None = None
    """Prefill or Decode, only when serving.mode is PrefillDecode."""
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    """Copies of the engine per replica (1-64)."""
    members: Annotated[list[MemberSpec], Field(min_length=1, max_length=2)]
    """One Standalone member, or one Leader and one Worker; at least one has a nodeSelector."""

    def check(self, rules: Rules) -> None:
        _members_rule(rules, self.members)
        with rules.reading():
            if all(m.node_selector is None for m in self.members):
                rules.add(("members",), "at least one member must have a nodeSelector")


class ServingSpec(ApiModel):
    """How the engines of a replica serve."""

    mode: ServingMode = ServingMode.UNIFIED
    """Unified (default) or PrefillDecode (one Prefill and one Decode engine)."""


def _serving_rule(rules: Rules, serving: ServingSpec, engines: Sequence[Any]) -> None:
    """`phase` only in PrefillDecode mode, and then one Prefill and one Decode engine."""
    with rules.reading():
        if serving.mode == ServingMode.UNIFIED:
            for index, engine in enumerate(engines):
                with rules.reading():
                    if engine.phase is not None:
                        rules.add(
                            ("engines", index, "phase"),
                            "is only allowed when serving.mode is PrefillDecode",
                        )
            return
        phases = sorted(Phase(e.phase) if e.phase is not None else "" for e in engines)
        if phases != sorted((Phase.DECODE, Phase.PREFILL)):
            rules.add(
                ("engines",), "PrefillDecode needs exactly two engines, one Prefill and one Decode"
            )


class ClusterSelectorSpec(ApiModel):
    """Which clusters a deployment's replicas may go to."""

    match_labels: Labels = Field(default_factory=dict)
    """Labels an InferenceCluster must have for replicas to go there."""


class TolerationSpec(ApiModel):
    """Kubernetes toleration; an absent `effect` tolerates every effect."""

    key: StrictStr = ""
    """The taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: TolerationOperator = TolerationOperator.EQUAL
    """Equal (default) or Exists."""
    value: StrictStr = ""
    """The taint value to match; empty when operator is Exists."""
    effect: TaintEffect | None = None
    """The effect to tolerate; absent tolerates every effect."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if not self.key and self.operator != TolerationOperator.EXISTS:
                rules.add(("operator",), "must be Exists when key is empty")
        with rules.reading():
            if self.operator == TolerationOperator.EXISTS and self.value:
                rules.add(("value",), "must be empty when operator is Exists")


class TemplateMeta(ApiModel):
    """Labels and annotations of every replica."""

    labels: Labels = Field(default_factory=dict)
    """Labels of every replica; the gpufleet.io/ prefix is reserved."""
    annotations: Annotations = Field(default_factory=dict)
    """Annotations of every replica."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            for key in self.labels:
                if key.startswith(RESERVED_LABEL_PREFIX):
                    rules.add(("labels", key), f"the {RESERVED_LABEL_PREFIX} prefix is reserved")


class DeploymentTemplateSpec(ApiModel):
    """The shape of one replica."""

    cluster_selector: ClusterSelectorSpec | None = None
    """Which clusters the replicas may go to; absent: any cluster."""
    serving: ServingSpec = Field(default_factory=ServingSpec)
    """How the engines serve: Unified or PrefillDecode."""
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    """Cluster taints the replicas tolerate."""
    engines: Annotated[list[EngineSpec], Field(min_length=1, max_length=8)]
    """The engines of one replica, 1-8, unique by name."""

    def check(self, rules: Rules) -> None:
        rules.unique("engines", self.engines, lambda e: e.name)
        _serving_rule(rules, self.serving, self.engines)


class DeploymentTemplate(ApiModel):
    """The template of one replica."""

    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    """Labels and annotations of every replica."""
    spec: DeploymentTemplateSpec
    """The shape of one replica."""


class RollingUpdateSpec(ApiModel):
    """How a template change rolls across the fleet, replica by replica, in replicas."""

    max_surge: Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)] = 1
    """Replicas that may exist above `replicas` while it rolls (default 1): each new replica
    is placed wherever it fits before an old one goes."""
    max_unavailable: Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)] = 0
    """Replicas that may be unavailable below `replicas` while it rolls (default 0): with 1,
    an old replica may go before its replacement runs (in place, one step at a time)."""

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.max_surge == 0 and self.max_unavailable == 0:
                rules.add(("maxUnavailable",), "must be at least 1 when maxSurge is 0")


class DeploymentStrategySpec(ApiModel):
    """How replicas are replaced when the template changes."""

    rolling_update: RollingUpdateSpec = Field(default_factory=RollingUpdateSpec)
    """maxSurge and maxUnavailable, in replicas (defaults 1 and 0: make-before-break)."""


class ModelDeploymentSpec(ApiModel):
    """A model to serve."""

    replicas: Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)] = 1
    """How many replicas to place (0-1000)."""
    strategy: DeploymentStrategySpec = Field(default_factory=DeploymentStrategySpec)
    """How a template change rolls: replica by replica, new before old by default."""
    progress_deadline_seconds: Annotated[StrictInt, Field(ge=1, le=INT64_MAX)] = 600
    """Seconds a rollout may make no progress before Progressing reads
    False/ProgressDeadlineExceeded (default 600, as a Deployment)."""
    template: DeploymentTemplate
    """The template of one replica."""


class ReplicaCounts(ApiModel):
    """Replica counts."""

    total: NonNegativeInt = 0
    """Replicas placed."""
    ready: NonNegativeInt = 0
    """Replicas whose pods are all scheduled."""
    pending: NonNegativeInt = 0
    """Replicas placed whose pods are not all scheduled yet (total minus ready)."""


class ModelDeploymentStatus(ApiModel):
    """The deployment's state, written by the controller."""

    observed_generation: NonNegativeInt | None = None
    """The generation the status was computed for."""
    replicas: ReplicaCounts | None = None
    """Replicas placed and ready."""
    updated_replicas: NonNegativeInt | None = None
    """Replicas placed for the current template (its revision)."""
    revision: StrictStr | None = None
    """The current template's revision, the hash its replicas carry in gpufleet.io/revision."""
    conditions: list[Condition] = Field(default_factory=list)
    """The deployment's conditions (ReplicasScheduled, ReplicasRunning, Progressing...)."""

    def check(self, rules: Rules) -> None:
        _unique_conditions(rules, self.conditions)
