"""The API's ModelReplica and the agents' observations (PoolObservation, ReplicaObservation):
what the hub assigns a cluster and what its agent reports back. The rest of the API's models,
and the shared field types and rules these use, are in models.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, StrictBool, StrictInt, StrictStr

from gpufleet.api.models import (
    AgentStatus,
    CelSelectorSpec,
    Condition,
    DnsLabelName,
    Name,
    NonNegativeInt,
    ObservedPool,
    PodTemplate,
    RoleMember,
    ServingSpec,
    ShareableRoom,
    _members_rule,
    _serving_rule,
    _unique_conditions,
)
from gpufleet.api.rules import ApiModel, Rules
from gpufleet.core.model import Phase, Role


class ResolvedDeviceRequestSpec(ApiModel):
    """A member's request resolved to a DRA device of its pool: what each pod claims."""

    name: DnsLabelName
    """The request's name."""
    device_class_name: Name
    """The DRA DeviceClass to claim from."""
    driver: StrictStr | None = None
    """The DRA driver of the pool's device."""
    count: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    """Devices per pod (1-64)."""
    selectors: Annotated[list[CelSelectorSpec], Field(max_length=8)] = Field(default_factory=list)
    """The request's CEL selectors, at most 8."""


class ReplicaMemberSpec(RoleMember):
    """A member of a placed engine."""

    node_pool_name: Name
    """The pool the member's pods are pinned to."""
    #: Absent (never empty) when the member claims nothing.
    device_requests: Annotated[list[ResolvedDeviceRequestSpec], Field(min_length=1)] | None = None
    """What each pod claims; absent (never empty) when the member claims nothing."""
    template: PodTemplate
    """The pod template (a Kubernetes PodTemplateSpec)."""
    host_requests: ShareableRoom | None = None
    """Each pod's CPU and memory requests as the hub sized them in proportion (the member's
    `hostRequests: Proportional`), which the agent writes where the template requests none;
    absent otherwise."""

    def check(self, rules: Rules) -> None:
        super().check(rules)
        with rules.reading():
            rules.unique("deviceRequests", self.device_requests or (), lambda r: r.name)


class ReplicaEngineSpec(ApiModel):
    """An engine of a placed replica."""

    name: DnsLabelName
    """The engine's name."""
    phase: Phase | None = None
    """Prefill or Decode in PrefillDecode serving."""
    copies: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    """Copies of the engine (1-64)."""
    members: Annotated[list[ReplicaMemberSpec], Field(min_length=1, max_length=2)]
    """One Standalone member, or one Leader and one Worker."""

    def check(self, rules: Rules) -> None:
        _members_rule(rules, self.members)


class ModelReplicaSpec(ApiModel):
    """A placed replica."""

    deployment_name: Name
    """The ModelDeployment this replica belongs to."""
    cluster_name: Name
    """The InferenceCluster the replica is pinned to."""
    serving: ServingSpec = Field(default_factory=ServingSpec)
    """How the engines serve."""
    engines: Annotated[list[ReplicaEngineSpec], Field(min_length=1, max_length=8)]
    """The replica's engines, unique by name."""

    def check(self, rules: Rules) -> None:
        rules.unique("engines", self.engines, lambda e: e.name)
        _serving_rule(rules, self.serving, self.engines)


class MemberPodsStatus(ApiModel):
    """Pod counts of one member."""

    engine: Name
    """The engine's name."""
    role: Role
    """The member's role."""
    live_pods: NonNegativeInt
    """Pods of the member that exist and have not finished."""
    allocated_pods: NonNegativeInt
    """Live pods whose claims are allocated."""


class ReplicaPoolPodsStatus(ApiModel):
    """A replica's pods on one pool."""

    name: Name
    """The pool's name."""
    last_allocation_time: AwareDatetime | None = None
    """The latest allocation of the replica's claims on the pool."""
    members: list[MemberPodsStatus] = Field(default_factory=list)
    """Pod counts per engine and member."""
    ready_pods: NonNegativeInt = 0
    """Live pods of the replica on the pool, of any generation, Running with Ready=True: a
    replica with one serves and is never re-placed as stuck."""
    draining_pods: NonNegativeInt = 0
    """Live pods of the replica on the pool, of any generation, on a cordoned node: the hub
    places its replacement first, then removes it (a drain is a rollout step)."""
    unschedulable_pods: NonNegativeInt = 0
    """Live claiming pods, of any generation and not allocated, that kube-scheduler marked
    Unschedulable."""
    unschedulable_since: AwareDatetime | None = None
    """The earliest time one of those pods was marked Unschedulable."""
    scale_up: Literal["Triggered", "NotTriggered"] | None = None
    """The cluster autoscaler's latest verdict on those pods (TriggeredScaleUp or
    NotTriggerScaleUp events)."""
    scale_up_time: AwareDatetime | None = None
    """When the autoscaler gave that verdict."""


class ModelReplicaStatus(ApiModel):
    """The replica's state."""

    observed_generation: NonNegativeInt | None = None
    """The generation the status was computed for."""
    conditions: list[Condition] = Field(default_factory=list)
    """The replica's conditions (ModelPodsScheduled...)."""
    pools: list[ReplicaPoolPodsStatus] = Field(default_factory=list)
    """The replica's pods per pool, unique by name."""

    def check(self, rules: Rules) -> None:
        _unique_conditions(rules, self.conditions)
        rules.unique("pools", self.pools, lambda p: p.name)


class PoolObservationSpec(ApiModel):
    """What is observed."""

    cluster_name: Name
    """The InferenceCluster observed."""
    pool_name: Name
    """The pool observed."""


class PoolObservationStatus(ObservedPool):
    """One pool's nodes by free devices, reported by the cluster's agent."""

    agent: AgentStatus
    """The agent that reported."""


class ReplicaObservationSpec(ApiModel):
    """What is observed."""

    cluster_name: Name
    """The InferenceCluster the replica runs on."""
    replica_name: Name
    """The ModelReplica observed."""
    replica_namespace: Name
    """The ModelReplica's namespace."""


class ReplicaObservationStatus(ApiModel):
    """One replica's pods, reported by the cluster's agent."""

    agent: AgentStatus
    """The agent that reported."""
    observed_at: AwareDatetime
    """When the agent observed the replica."""
    observed_generation: NonNegativeInt | None = None
    """The replica generation the pods were made for."""
    pods_scheduled: StrictBool = False
    """Whether every pod of the replica is scheduled."""
    pools: list[ReplicaPoolPodsStatus] = Field(default_factory=list)
    """The replica's pods per pool, unique by name."""
    conditions: list[Condition] = Field(default_factory=list)
    """What the agent found wrong (MalformedReplica) and its policy's refusal (PolicyAllowed)."""

    def check(self, rules: Rules) -> None:
        rules.unique("pools", self.pools, lambda p: p.name)
        _unique_conditions(rules, self.conditions)
