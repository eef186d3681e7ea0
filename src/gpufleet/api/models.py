"""Typed models of the `gpufleet.io/v1alpha1` API (docs/design/shapes.md is the contract).

Each kind is a pydantic model whose fields carry the schema: types (strict: `"3"` is not an
integer, `1` is not a boolean), required fields, bounds and enums; unknown fields are errors,
except inside pod `template`s, which are Kubernetes PodTemplateSpecs kept as free-form dicts.
`metadata` accepts every standard ObjectMeta field, including server-populated ones.

The rules that span fields (unique keys, the shape of an engine's members, P/D pairs, name
formats, CEL that compiles, quantities and semvers that parse) are `model_validator`s on the
model that holds the fields. Each collects all of its violations and raises them as one
pydantic `ValidationError` located relative to itself; pydantic merges them, prefixed with the
model's location, with the schema errors of the rest of the object, so one validation reports
every error of the object. A model whose own fields fail the schema skips its rules (they would
read missing values); its siblings' rules still run.

Pool names ratchet: `validate(new, old)` passes the pool names of `old` in the validation
context under `LEGACY_POOL_NAMES`, and a pool keeping such a name skips the DNS-label rule.

Dump with `ApiObject.to_manifest()`: aliases, only the fields that were set (defaults are not
written out) and no None fields, so a dump reloads to an equal object and dumps the same again.
"""

from collections.abc import Hashable, Iterable, Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from gpufleet.api.names import (
    DNS_LABEL_RULE,
    DNS_SUBDOMAIN_RULE,
    is_dns_label,
    is_dns_subdomain,
)
from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.core.labels import RESERVED_LABEL_PREFIX
from gpufleet.core.model import ClaimMode, Phase, Role, ServingMode, TaintEffect, TolerationOperator
from gpufleet.core.quantity import parse_quantity
from gpufleet.core.semver import parse_semver

API_GROUP: Final = "gpufleet.io"
API_VERSION: Final = "gpufleet.io/v1alpha1"

#: Validation-context key: the pool names of the stored object, exempt from the name rule.
LEGACY_POOL_NAMES: Final = "legacyPoolNames"
#: The pydantic error type of a broken rule; its context holds the message verbatim.
RULE_ERROR_TYPE: Final = "gpufleet_rule"

POOL_NAME_MAX_CHARS: Final = 40
MAX_NODES: Final = 10_000
MAX_REPLICAS: Final = 1000
CEL_MAX_CHARS: Final = 10 * 1024

Loc = tuple[str | int, ...]


class _Rules:
    """The rule violations of one model, raised together as one located ValidationError."""

    def __init__(self, title: str) -> None:
        self._title = title
        self._errors: list[InitErrorDetails] = []

    def add(self, loc: Loc, message: str) -> None:
        error = PydanticCustomError(RULE_ERROR_TYPE, "{message}", {"message": message})
        self._errors.append(InitErrorDetails(type=error, loc=loc, input=None))

    def unique(self, field: str, keys: Iterable[Hashable], describe: str = "name") -> None:
        """Each key of the list `field` appears once (a Kubernetes list-map)."""
        first_index: dict[Hashable, int] = {}
        for index, key in enumerate(keys):
            if key in first_index:
                message = f'duplicate {describe} "{key}" (also at index {first_index[key]})'
                self.add((field, index), message)
            else:
                first_index[key] = index

    def raise_if_any(self) -> None:
        if self._errors:
            raise ValidationError.from_exception_data(self._title, self._errors)


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


NonNegativeInt = Annotated[StrictInt, Field(ge=0)]
Name = Annotated[StrictStr, Field(min_length=1)]
DnsLabelName = Annotated[StrictStr, Field(min_length=1, max_length=63)]
StringMap = dict[StrictStr, StrictStr]


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

    name: Name
    namespace: StrictStr | None = None
    generate_name: StrictStr | None = None
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)
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

    @model_validator(mode="after")
    def _names(self) -> Self:
        rules = _Rules("ObjectMeta")
        if not is_dns_subdomain(self.name):
            rules.add(("name",), DNS_SUBDOMAIN_RULE)
        if self.namespace is not None and not is_dns_label(self.namespace):
            rules.add(("namespace",), DNS_LABEL_RULE)
        rules.raise_if_any()
        return self


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


def _unique_conditions(rules: _Rules, conditions: Sequence[Condition]) -> None:
    rules.unique("conditions", (c.type for c in conditions), describe="type")


def is_condition_true(conditions: Sequence[Condition], condition_type: str) -> bool:
    return any(c.type == condition_type and c.status is ConditionStatus.TRUE for c in conditions)


# --- InferenceClass -----------------------------------------------------------------------


class AttributeValue(ApiModel):
    """A typed device attribute: exactly one of `string`, `version` (strict semver), `bool`, `int`."""

    string: StrictStr | None = None
    version: StrictStr | None = None
    bool_: StrictBool | None = Field(default=None, alias="bool")
    int_: StrictInt | None = Field(default=None, alias="int")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        rules = _Rules("AttributeValue")
        values = (self.string, self.version, self.bool_, self.int_)
        if sum(value is not None for value in values) != 1:
            rules.add((), "must set exactly one of string, version, bool, int")
        if self.version is not None:
            try:
                parse_semver(self.version)
            except ValueError as error:
                rules.add(("version",), f"must be a semantic version: {error}")
        rules.raise_if_any()
        return self


class CapacityValue(ApiModel):
    """A device capacity: a Kubernetes quantity (`81559Mi`), kept verbatim."""

    value: StrictStr

    @model_validator(mode="after")
    def _quantity(self) -> Self:
        rules = _Rules("CapacityValue")
        try:
            parse_quantity(self.value)
        except ValueError as error:
            rules.add(("value",), f"must be a Kubernetes quantity: {error}")
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("DeviceSpec")
        if not is_dns_label(self.name):
            rules.add(("name",), DNS_LABEL_RULE)
        if self.claim is ClaimMode.DRA and not self.device_class_name:
            rules.add(("deviceClassName",), "is required when claim is DRA")
        rules.raise_if_any()
        return self


Devices = Annotated[list[DeviceSpec], Field(min_length=1, max_length=16)]


class InferenceClassSpec(ApiModel):
    devices: Devices

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("InferenceClassSpec")
        rules.unique("devices", (d.name for d in self.devices))
        rules.raise_if_any()
        return self


# --- InferenceCluster ---------------------------------------------------------------------


class TaintSpec(ApiModel):
    key: Name
    value: StrictStr = ""
    effect: TaintEffect


class NodePoolSpec(ApiModel):
    """A pool of identical nodes. `maxNodeCount` absent means fixed size (`nodeCount`)."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=POOL_NAME_MAX_CHARS)]
    class_name: Name
    node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 1
    min_node_count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)] = 0
    max_node_count: Annotated[StrictInt, Field(ge=1, le=MAX_NODES)] | None = None

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        rules = _Rules("NodePoolSpec")
        legacy_names: frozenset[str] = (info.context or {}).get(LEGACY_POOL_NAMES, frozenset())
        if self.name not in legacy_names and not is_dns_label(self.name, POOL_NAME_MAX_CHARS):
            rules.add(("name",), DNS_LABEL_RULE)
        if self.max_node_count is not None:
            if self.max_node_count < self.min_node_count:
                rules.add(
                    ("maxNodeCount",), f"must be at least minNodeCount ({self.min_node_count})"
                )
            if self.node_count > self.max_node_count:
                rules.add(("nodeCount",), f"must be at most maxNodeCount ({self.max_node_count})")
        rules.raise_if_any()
        return self


class InferenceClusterSpec(ApiModel):
    taints: list[TaintSpec] = Field(default_factory=list)
    node_pools: Annotated[list[NodePoolSpec], Field(min_length=1, max_length=8)]

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("InferenceClusterSpec")
        rules.unique(
            "taints", (f"{t.key}:{t.effect}" for t in self.taints), describe="key and effect"
        )
        rules.unique("nodePools", (p.name for p in self.node_pools))
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _histogram(self) -> Self:
        rules = _Rules(type(self).__name__)
        rules.unique(
            "freeDevices", (_free_vector(b) for b in self.free_devices or ()), "free vector"
        )
        _unique_conditions(rules, self.conditions)
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("InferenceClusterStatus")
        _unique_conditions(rules, self.conditions)
        rules.unique("gpuPools", (p.name for p in self.gpu_pools))
        rules.raise_if_any()
        return self


# --- ModelDeployment ----------------------------------------------------------------------


class CelSelectorSpec(ApiModel):
    """A DRA device selector in CEL; it must compile."""

    cel: Annotated[StrictStr, Field(min_length=1, max_length=CEL_MAX_CHARS)]

    @model_validator(mode="after")
    def _compiles(self) -> Self:
        rules = _Rules("CelSelectorSpec")
        try:
            compile_selector(self.cel)
        except CelCompileError as error:
            rules.add(("cel",), f"does not compile: {error.message}")
        rules.raise_if_any()
        return self


Selectors = Annotated[list[CelSelectorSpec], Field(min_length=1, max_length=8)]


class DeviceRequestSpec(ApiModel):
    """`count` devices per pod, of a device whose every selector matches."""

    name: DnsLabelName
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    selectors: Selectors

    @model_validator(mode="after")
    def _name(self) -> Self:
        rules = _Rules("DeviceRequestSpec")
        if not is_dns_label(self.name):
            rules.add(("name",), DNS_LABEL_RULE)
        rules.raise_if_any()
        return self


class NodeSelectorSpec(ApiModel):
    devices: Annotated[list[DeviceRequestSpec], Field(min_length=1, max_length=16)]

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("NodeSelectorSpec")
        rules.unique("devices", (d.name for d in self.devices))
        rules.raise_if_any()
        return self


class WorkerSpec(ApiModel):
    """Gang size: pods per copy are 1 leader + `nodes` workers."""

    nodes: Annotated[StrictInt, Field(ge=1, le=63)]


PodTemplate = dict[str, Any]


class MemberRole(ApiModel):
    """A member's role alone (what an engine's shape is made of)."""

    role: Role = Role.STANDALONE


class RoleMember(MemberRole):
    """The role of a member; `worker` belongs on a Worker, and only there."""

    worker: WorkerSpec | None = None

    @model_validator(mode="after")
    def _worker(self) -> Self:
        rules = _Rules(type(self).__name__)
        if self.role is Role.WORKER and self.worker is None:
            rules.add(("worker",), "is required for a Worker member")
        if self.role is not Role.WORKER and self.worker is not None:
            rules.add(("worker",), "is only allowed on a Worker member")
        rules.raise_if_any()
        return self


class MemberSpec(RoleMember):
    node_selector: NodeSelectorSpec | None = None
    template: PodTemplate


_MEMBER_SHAPES: Final = (
    (Role.STANDALONE,),
    (Role.LEADER, Role.WORKER),
)


def _members_rule(rules: _Rules, members: Sequence[MemberRole]) -> None:
    roles = tuple(sorted((m.role for m in members), key=list(Role).index))
    if roles not in _MEMBER_SHAPES:
        got = ", ".join(roles)
        rules.add(
            ("members",),
            f"must be exactly one Standalone member, or one Leader and one Worker (got {got})",
        )


class MembersShape(ApiModel):
    """Only the roles of an engine's members: validation checks an engine's shape with it
    when other fields of its members are invalid, so the rule is reported in the same pass
    instead of after the first fix (it is the engines' rule, `_members_rule`)."""

    members: Annotated[list[MemberRole], Field(min_length=1, max_length=2)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("MembersShape")
        _members_rule(rules, self.members)
        rules.raise_if_any()
        return self


class EngineSpec(ApiModel):
    name: DnsLabelName
    phase: Phase | None = None
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    members: Annotated[list[MemberSpec], Field(min_length=1, max_length=2)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("EngineSpec")
        if not is_dns_label(self.name):
            rules.add(("name",), DNS_LABEL_RULE)
        _members_rule(rules, self.members)
        if all(m.node_selector is None for m in self.members):
            rules.add(("members",), "at least one member must have a nodeSelector")
        rules.raise_if_any()
        return self


class ServingSpec(ApiModel):
    mode: ServingMode = ServingMode.UNIFIED


def _serving_rule(rules: _Rules, mode: ServingMode, phases: Sequence[Phase | None]) -> None:
    if mode is ServingMode.UNIFIED:
        for index, phase in enumerate(phases):
            if phase is not None:
                rules.add(
                    ("engines", index, "phase"),
                    "is only allowed when serving.mode is PrefillDecode",
                )
        return
    if sorted(p or "" for p in phases) != sorted((Phase.DECODE, Phase.PREFILL)):
        rules.add(
            ("engines",), "PrefillDecode needs exactly two engines, one Prefill and one Decode"
        )


class ClusterSelectorSpec(ApiModel):
    match_labels: StringMap = Field(default_factory=dict)


class TolerationSpec(ApiModel):
    """Kubernetes toleration; an absent `effect` tolerates every effect."""

    key: StrictStr = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: StrictStr = ""
    effect: TaintEffect | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("TolerationSpec")
        if not self.key and self.operator is not TolerationOperator.EXISTS:
            rules.add(("operator",), "must be Exists when key is empty")
        if self.operator is TolerationOperator.EXISTS and self.value:
            rules.add(("value",), "must be empty when operator is Exists")
        rules.raise_if_any()
        return self


class TemplateMeta(ApiModel):
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)

    @model_validator(mode="after")
    def _reserved(self) -> Self:
        rules = _Rules("TemplateMeta")
        for key in self.labels:
            if key.startswith(RESERVED_LABEL_PREFIX):
                rules.add(("labels", key), f"the {RESERVED_LABEL_PREFIX} prefix is reserved")
        rules.raise_if_any()
        return self


class DeploymentTemplateSpec(ApiModel):
    cluster_selector: ClusterSelectorSpec | None = None
    serving: ServingSpec = Field(default_factory=ServingSpec)
    tolerations: list[TolerationSpec] = Field(default_factory=list)
    engines: Annotated[list[EngineSpec], Field(min_length=1, max_length=8)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("DeploymentTemplateSpec")
        rules.unique("engines", (e.name for e in self.engines))
        _serving_rule(rules, self.serving.mode, [e.phase for e in self.engines])
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("ModelDeploymentStatus")
        _unique_conditions(rules, self.conditions)
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("ReplicaMemberSpec")
        rules.unique("deviceRequests", (r.name for r in self.device_requests or ()))
        rules.raise_if_any()
        return self


class ReplicaEngineSpec(ApiModel):
    name: DnsLabelName
    phase: Phase | None = None
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    members: Annotated[list[ReplicaMemberSpec], Field(min_length=1, max_length=2)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("ReplicaEngineSpec")
        _members_rule(rules, self.members)
        rules.raise_if_any()
        return self


class ModelReplicaSpec(ApiModel):
    deployment_name: Name
    cluster_name: Name
    serving: ServingSpec = Field(default_factory=ServingSpec)
    engines: Annotated[list[ReplicaEngineSpec], Field(min_length=1, max_length=8)]

    @model_validator(mode="after")
    def _rules(self) -> Self:
        rules = _Rules("ModelReplicaSpec")
        rules.unique("engines", (e.name for e in self.engines))
        _serving_rule(rules, self.serving.mode, [e.phase for e in self.engines])
        rules.raise_if_any()
        return self


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

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("ModelReplicaStatus")
        _unique_conditions(rules, self.conditions)
        rules.unique("pools", (p.name for p in self.pools))
        rules.raise_if_any()
        return self


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
    #: What the agent could not take at face value (MalformedReplica) and its policy's
    #: refusal (PolicyAllowed=False, reason PolicyDenied); absent when there is none.
    conditions: list[Condition] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        rules = _Rules("ReplicaObservationStatus")
        rules.unique("pools", (p.name for p in self.pools))
        _unique_conditions(rules, self.conditions)
        rules.raise_if_any()
        return self


# --- the kinds ----------------------------------------------------------------------------


class _Object(ApiModel):
    """A top-level object: apiVersion, kind, metadata."""

    #: Cluster-scoped kinds reject `metadata.namespace`.
    is_namespaced: ClassVar[bool] = True

    api_version: Literal["gpufleet.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta

    @model_validator(mode="after")
    def _scope(self) -> Self:
        rules = _Rules(type(self).__name__)
        if not type(self).is_namespaced and self.metadata.namespace is not None:
            rules.add(("metadata", "namespace"), "must not be set on a cluster-scoped object")
        rules.raise_if_any()
        return self

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
