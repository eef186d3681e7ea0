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

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal

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
from gpufleet.core.model import ClaimMode, Phase, Role, ServingMode, TaintEffect, TolerationOperator
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
    type: Name
    status: ConditionStatus
    reason: StrictStr | None = None
    message: StrictStr | None = None
    last_transition_time: AwareDatetime | None = None
    observed_generation: NonNegativeInt | None = None


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
    version: Annotated[StrictStr, AfterValidator(_semver)] | None = None
    bool_: StrictBool | None = Field(default=None, alias="bool")
    int_: Annotated[StrictInt, Field(ge=-INT64_MAX - 1, le=INT64_MAX)] | None = Field(
        default=None, alias="int"
    )

    def check(self, rules: Rules) -> None:
        with rules.reading():  # a broken value is still a value that was set
            values = (self.string, self.version, self.bool_, self.int_)
            if sum(value is not None for value in values) != 1:
                rules.add((), "must set exactly one of string, version, bool, int")


class CapacityValue(ApiModel):
    """A device capacity: a Kubernetes quantity (`81559Mi`), kept verbatim."""

    value: Annotated[StrictStr, AfterValidator(_quantity)]


class DeviceSpec(ApiModel):
    """One kind of device that every node of a pool offers `count` of."""

    name: DnsLabelName
    driver: Name
    claim: ClaimMode = ClaimMode.DRA
    device_class_name: StrictStr | None = None
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    attributes: Annotated[dict[StrictStr, AttributeValue], Field(max_length=32)] = Field(
        default_factory=dict
    )
    capacity: Annotated[dict[StrictStr, CapacityValue], Field(max_length=32)] = Field(
        default_factory=dict
    )

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.claim == ClaimMode.DRA and not self.device_class_name:
                rules.add(("deviceClassName",), "is required when claim is DRA")


Devices = Annotated[list[DeviceSpec], Field(min_length=1, max_length=16)]


class InferenceClassSpec(ApiModel):
    devices: Devices

    def check(self, rules: Rules) -> None:
        rules.unique("devices", self.devices, lambda d: d.name)


# --- InferenceCluster ---------------------------------------------------------------------


class TaintSpec(ApiModel):
    key: Name
    value: StrictStr = ""
    effect: TaintEffect


class NodePoolSpec(ApiModel):
    """A pool of identical nodes. `maxNodeCount` absent means fixed size (`nodeCount`)."""

    name: Annotated[
        StrictStr, Field(min_length=1, max_length=POOL_NAME_MAX_CHARS), AfterValidator(_pool_name)
    ]
    class_name: Name
    node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 1
    min_node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 0
    max_node_count: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] | None = None

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
    taints: list[TaintSpec] = Field(default_factory=list)
    node_pools: Annotated[list[NodePoolSpec], Field(min_length=1, max_length=8)]

    def check(self, rules: Rules) -> None:
        rules.unique("taints", self.taints, lambda t: f"{t.key}:{t.effect}", "key and effect")
        rules.unique("nodePools", self.node_pools, lambda p: p.name)


class Bucket(ApiModel):
    """`nodes` nodes each with exactly `free` devices free, per DRA driver."""

    free: dict[StrictStr, NonNegativeInt]
    nodes: Annotated[StrictInt, Field(ge=1)]


def _free_vector(bucket: Bucket) -> str:
    """A bucket's free devices as a canonical key: drivers sorted, zero counts dropped."""
    return ",".join(f"{d}={n}" for d, n in sorted(bucket.free.items()) if n) or "nothing free"


class ObservedPool(ApiModel):
    """What an agent saw of one pool. Over 256 buckets is valid: the converter falls back."""

    observed_at: AwareDatetime
    observed_nodes: NonNegativeInt
    free_devices: list[Bucket] | None = None
    last_allocation_time: AwareDatetime | None = None
    excluded_nodes: dict[StrictStr, NonNegativeInt] = Field(default_factory=dict)
    extended_resources: dict[StrictStr, NonNegativeInt] = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)

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
    state: ObservationState | None = None


class GpuPoolStatus(ApiModel):
    name: Name
    nodes: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)]
    devices: list[DeviceSpec] = Field(default_factory=list)
    observation: PublishedObservation | None = None


class Gateway(ApiModel):
    address: StrictStr


class AgentStatus(ApiModel):
    identity: Name
    lease_epoch: NonNegativeInt
    observed_at: AwareDatetime | None = None


class InferenceClusterStatus(ApiModel):
    conditions: list[Condition] = Field(default_factory=list)
    gateway: Gateway | None = None
    agent: AgentStatus | None = None
    gpu_pools: Annotated[list[GpuPoolStatus], Field(max_length=8)] = Field(default_factory=list)

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


Selectors = Annotated[list[CelSelectorSpec], Field(min_length=1, max_length=8)]


class DeviceRequestSpec(ApiModel):
    """`count` devices per pod, of a device whose every selector matches."""

    name: DnsLabelName
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    selectors: Selectors


class NodeSelectorSpec(ApiModel):
    devices: Annotated[list[DeviceRequestSpec], Field(min_length=1, max_length=16)]

    def check(self, rules: Rules) -> None:
        rules.unique("devices", self.devices, lambda d: d.name)


class WorkerSpec(ApiModel):
    """Gang size: pods per copy are 1 leader + `nodes` workers."""

    nodes: Annotated[StrictInt, Field(ge=1, le=63)]


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
    worker: WorkerSpec | None = None

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if self.role == Role.WORKER and self.worker is None:
                rules.add(("worker",), "is required for a Worker member")
        with rules.reading():
            if self.role != Role.WORKER and self.worker is not None:
                rules.add(("worker",), "is only allowed on a Worker member")


class MemberSpec(RoleMember):
    node_selector: NodeSelectorSpec | None = None
    template: PodTemplate


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
    name: DnsLabelName
    phase: Phase | None = None
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    members: Annotated[list[MemberSpec], Field(min_length=1, max_length=2)]

    def check(self, rules: Rules) -> None:
        _members_rule(rules, self.members)
        with rules.reading():
            if all(m.node_selector is None for m in self.members):
                rules.add(("members",), "at least one member must have a nodeSelector")


class ServingSpec(ApiModel):
    mode: ServingMode = ServingMode.UNIFIED


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
    match_labels: Labels = Field(default_factory=dict)


class TolerationSpec(ApiModel):
    """Kubernetes toleration; an absent `effect` tolerates every effect."""

    key: StrictStr = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: StrictStr = ""
    effect: TaintEffect | None = None

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if not self.key and self.operator != TolerationOperator.EXISTS:
                rules.add(("operator",), "must be Exists when key is empty")
        with rules.reading():
            if self.operator == TolerationOperator.EXISTS and self.value:
                rules.add(("value",), "must be empty when operator is Exists")


class TemplateMeta(ApiModel):
    labels: Labels = Field(default_factory=dict)
    annotations: Annotations = Field(default_factory=dict)

    def check(self, rules: Rules) -> None:
        with rules.reading():
            for key in self.labels:
                if key.startswith(RESERVED_LABEL_PREFIX):
                    rules.add(("labels", key), f"the {RESERVED_LABEL_PREFIX} prefix is reserved")


class DeploymentTemplateSpec(ApiModel):
    cluster_selector: ClusterSelectorSpec | None = None
    serving: ServingSpec = Field(default_factory=ServingSpec)
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    engines: Annotated[list[EngineSpec], Field(min_length=1, max_length=8)]

    def check(self, rules: Rules) -> None:
        rules.unique("engines", self.engines, lambda e: e.name)
        _serving_rule(rules, self.serving, self.engines)


class DeploymentTemplate(ApiModel):
    metadata: TemplateMeta = Field(default_factory=TemplateMeta)
    spec: DeploymentTemplateSpec


class ModelDeploymentSpec(ApiModel):
    replicas: Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)] = 1
    template: DeploymentTemplate


class ReplicaCounts(ApiModel):
    total: NonNegativeInt = 0
    ready: NonNegativeInt = 0


class ModelDeploymentStatus(ApiModel):
    observed_generation: NonNegativeInt | None = None
    replicas: ReplicaCounts | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def check(self, rules: Rules) -> None:
        _unique_conditions(rules, self.conditions)


# --- ModelReplica and the observations ----------------------------------------------------


class ResolvedDeviceRequestSpec(ApiModel):
    """A member's request resolved to a DRA device of its pool: what each pod claims."""

    name: DnsLabelName
    device_class_name: Name
    driver: StrictStr | None = None
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    selectors: Annotated[list[CelSelectorSpec], Field(max_length=8)] = Field(default_factory=list)


class ReplicaMemberSpec(RoleMember):
    node_pool_name: Name
    #: Absent (never empty) when the member claims nothing.
    device_requests: Annotated[list[ResolvedDeviceRequestSpec], Field(min_length=1)] | None = None
    template: PodTemplate

    def check(self, rules: Rules) -> None:
        super().check(rules)
        with rules.reading():
            rules.unique("deviceRequests", self.device_requests or (), lambda r: r.name)


class ReplicaEngineSpec(ApiModel):
    name: DnsLabelName
    phase: Phase | None = None
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    members: Annotated[list[ReplicaMemberSpec], Field(min_length=1, max_length=2)]

    def check(self, rules: Rules) -> None:
        _members_rule(rules, self.members)


class ModelReplicaSpec(ApiModel):
    deployment_name: Name
    cluster_name: Name
    serving: ServingSpec = Field(default_factory=ServingSpec)
    engines: Annotated[list[ReplicaEngineSpec], Field(min_length=1, max_length=8)]

    def check(self, rules: Rules) -> None:
        rules.unique("engines", self.engines, lambda e: e.name)
        _serving_rule(rules, self.serving, self.engines)


class MemberPodsStatus(ApiModel):
    engine: Name
    role: Role
    live_pods: NonNegativeInt
    allocated_pods: NonNegativeInt


class ReplicaPoolPodsStatus(ApiModel):
    name: Name
    last_allocation_time: AwareDatetime | None = None
    members: list[MemberPodsStatus] = Field(default_factory=list)


class ModelReplicaStatus(ApiModel):
    observed_generation: NonNegativeInt | None = None
    conditions: list[Condition] = Field(default_factory=list)
    pools: list[ReplicaPoolPodsStatus] = Field(default_factory=list)

    def check(self, rules: Rules) -> None:
        _unique_conditions(rules, self.conditions)
        rules.unique("pools", self.pools, lambda p: p.name)


class PoolObservationSpec(ApiModel):
    cluster_name: Name
    pool_name: Name


class PoolObservationStatus(ObservedPool):
    agent: AgentStatus


class ReplicaObservationSpec(ApiModel):
    cluster_name: Name
    replica_name: Name
    replica_namespace: Name


class ReplicaObservationStatus(ApiModel):
    agent: AgentStatus
    observed_at: AwareDatetime
    observed_generation: NonNegativeInt | None = None
    pods_scheduled: StrictBool = False
    pools: list[ReplicaPoolPodsStatus] = Field(default_factory=list)

    def check(self, rules: Rules) -> None:
        rules.unique("pools", self.pools, lambda p: p.name)


# --- the kinds ----------------------------------------------------------------------------


class _Object(ApiModel):
    """A top-level object: apiVersion, kind, metadata."""

    #: Cluster-scoped kinds reject `metadata.namespace`.
    is_namespaced: ClassVar[bool] = True

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta

    def check(self, rules: Rules) -> None:
        with rules.reading():
            if not type(self).is_namespaced and self.metadata.namespace is not None:
                rules.add(("metadata", "namespace"), "must not be set on a cluster-scoped object")

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
    is_namespaced = False

    kind: Literal["InferenceClass"] = "InferenceClass"
    spec: InferenceClassSpec


class InferenceCluster(_Object):
    is_namespaced = False

    kind: Literal["InferenceCluster"] = "InferenceCluster"
    spec: InferenceClusterSpec
    status: InferenceClusterStatus | None = None


class ModelDeployment(_Object):
    kind: Literal["ModelDeployment"] = "ModelDeployment"
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus | None = None


class ModelReplica(_Object):
    kind: Literal["ModelReplica"] = "ModelReplica"
    spec: ModelReplicaSpec
    status: ModelReplicaStatus | None = None


class PoolObservation(_Object):
    kind: Literal["PoolObservation"] = "PoolObservation"
    spec: PoolObservationSpec
    status: PoolObservationStatus | None = None


class ReplicaObservation(_Object):
    kind: Literal["ReplicaObservation"] = "ReplicaObservation"
    spec: ReplicaObservationSpec
    status: ReplicaObservationStatus | None = None


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
