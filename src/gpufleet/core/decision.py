"""What `schedule` returns: placements, drops, and a diagnosis with numbers for every "no".

Model. A `Decision` holds one `DeploymentDecision` per deployment of the snapshot (sorted by
key) and the fleet ledger's final state per (cluster, pool) for display. A deployment's decision
lists the replicas it keeps (`retained`, re-stamped with the current shape), the replicas to
create (`created`), the replicas to delete (`dropped`, each with the `Reason`), the `shortfall`
(desired minus kept minus created) and, whenever the shortfall is positive, a `Diagnosis`: one
`ClusterVerdict` per cluster of the fleet, each with its `PoolVerdict`s.

Invariants.
- Every value is a frozen, slotted dataclass; every tuple is sorted (clusters and placements
  by name, pools in published order), so two equal snapshots give equal decisions.
- `shortfall > 0` implies a non-empty `diagnosis` (it has cluster verdicts or
  deployment-wide reasons).
- `ReasonCode` values are CamelCase, fit for a Kubernetes condition's `reason`; `Reason.details`
  carries numbers (and names), never prose. Each code documents what it means for a retry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.core.model import (
    ClusterName,
    DeploymentKey,
    DriverName,
    Phase,
    PoolName,
    ResolvedRequest,
    Role,
)

#: A replica object name is a DNS subdomain of at most this many characters.
REPLICA_NAME_MAX_CHARS = 63
_HASH_CHARS = 5


class ReasonCode(StrEnum):
    """Why a cluster, a pool or a replica was refused (or, for a few, a note on how it was used).

    "Retry" says what has to change before the same deployment can be placed there.
    """

    #: No cluster of the fleet is selected by the deployment's `clusterSelector`.
    #: Retry: when a cluster is added or relabelled, or the selector is edited.
    NO_CLUSTERS = "NoClusters"
    #: The cluster's labels do not satisfy the selector. Retry: relabel or edit the selector.
    CLUSTER_NOT_SELECTED = "ClusterNotSelected"
    #: A replica's pinned cluster is no longer in the fleet: the replica is re-placed.
    CLUSTER_MISSING = "ClusterMissing"
    #: The cluster is not Ready. Retry: when it reports Ready (existing replicas stay).
    CLUSTER_NOT_READY = "ClusterNotReady"
    #: A NoSchedule/NoExecute taint the deployment does not tolerate (NoExecute also drains).
    #: Retry: when the taint is removed or a toleration added.
    TAINTED = "Tainted"
    #: No pool of the cluster matches every member of an engine (devices, selectors, counts),
    #: or the pinned pool no longer matches. Retry: only after a class, pool or selector edit.
    NO_MATCHING_POOL = "NoMatchingPool"
    #: A replica's member is pinned to a pool the cluster no longer publishes (or to none).
    POOL_MISSING = "PoolMissing"
    #: No member of an engine resolves a DRA device on any pool of the cluster: nothing would
    #: hold its GPUs. Retry: only after a class or selector edit.
    ENGINE_CANNOT_CLAIM = "EngineCannotClaim"
    #: Observed pool: the pods do not fit the free devices (after charging). Retry: when
    #: devices free up, the pool grows, or a fresher observation arrives.
    INSUFFICIENT_GPU = "InsufficientGPU"
    #: Observed pool whose agent reports CPU and memory: a pod's devices fit a node, but no
    #: such node has its CPU (millicores) or memory requests free. Retry: as InsufficientGPU.
    INSUFFICIENT_CPU = "InsufficientCPU"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    #: Whole-node pool: not enough free nodes. Retry: when replicas leave or the pool grows.
    INSUFFICIENT_NODES = "InsufficientNodes"
    #: Observed pool: the pods would fit, but not with each pod of a gang copy on its own node.
    #: Retry: as InsufficientGPU.
    GANG_NEEDS_DISTINCT_NODES = "GangNeedsDistinctNodes"
    #: The cluster's agent has been silent longer than `expire_after_s`: no new replicas
    #: (fail closed); existing ones stay. Retry: when the agent reports again.
    OBSERVATION_EXPIRED = "ObservationExpired"
    #: Informational: the observation is older than `stale_after_s`; still used (errs full).
    OBSERVATION_STALE = "ObservationStale"
    #: Informational: the pool has an observation but no usable histogram (absent, or more
    #: buckets than the cap): the pool uses whole-node accounting.
    HISTOGRAM_UNAVAILABLE = "HistogramUnavailable"
    #: Informational: two DRA device kinds of the pool's class share a driver, so a histogram
    #: keyed by driver cannot tell them apart: the pool uses whole-node accounting.
    AMBIGUOUS_DRIVER = "AmbiguousDriver"
    #: The deployment may only retain (a dependency such as its model cache is unresolved).
    #: Retry: when the dependency resolves.
    FILL_DISABLED = "FillDisabled"
    #: A retained replica's engines or members no longer have the deployment's shape: it is
    #: re-placed (delete + create).
    SHAPE_CHANGED = "ShapeChanged"
    #: Another replica of the deployment with a smaller name holds the same (cluster, index).
    DUPLICATE_IDENTITY = "DuplicateIdentity"
    #: More replicas than desired: this one goes (most loaded cluster first).
    SCALED_DOWN = "ScaledDown"
    #: Some claiming pods of the replica stayed Unschedulable past `stuckAfter` (and no node
    #: is coming for them): it is deleted and re-placed elsewhere (`Snapshot.avoid`).
    PODS_UNSCHEDULABLE = "PodsUnschedulable"
    #: The cluster's agent refused the replica by policy: it is deleted and re-placed
    #: elsewhere at once (`Snapshot.avoid`).
    POLICY_DENIED = "PolicyDenied"
    #: A replica of the deployment could not run on this pool lately: new replicas avoid it
    #: for a backoff. Retry: when the backoff ends (the message says when).
    BACKING_OFF = "BackingOff"
    #: A replica of an older revision, removed in a rollout: a replacement of the current
    #: revision stands in for it (or `maxUnavailable` lets it go first).
    SUPERSEDED = "Superseded"


#: Codes that describe how a cluster or pool was used, not why it was refused. They never make
#: a verdict fail and are left out of the summary's roll-up.
INFORMATIONAL_CODES = frozenset(
    {
        ReasonCode.OBSERVATION_STALE,
        ReasonCode.HISTOGRAM_UNAVAILABLE,
        ReasonCode.AMBIGUOUS_DRIVER,
    }
)


#: Tie-break for a condition's reason, root causes first: an expired agent explains the
#: NotReady the controller then sets; taints and readiness explain more than capacity does.
ROOT_CAUSE_ORDER: tuple[ReasonCode, ...] = (
    ReasonCode.OBSERVATION_EXPIRED,
    ReasonCode.TAINTED,
    ReasonCode.CLUSTER_NOT_READY,
    ReasonCode.NO_MATCHING_POOL,
    ReasonCode.ENGINE_CANNOT_CLAIM,
    ReasonCode.BACKING_OFF,
    ReasonCode.GANG_NEEDS_DISTINCT_NODES,
    ReasonCode.INSUFFICIENT_GPU,
    ReasonCode.INSUFFICIENT_CPU,
    ReasonCode.INSUFFICIENT_MEMORY,
    ReasonCode.INSUFFICIENT_NODES,
)


def _root_cause_rank(code: ReasonCode) -> tuple[int, str]:
    order = ROOT_CAUSE_ORDER.index(code) if code in ROOT_CAUSE_ORDER else len(ROOT_CAUSE_ORDER)
    return (order, code.value)


class Accounting(StrEnum):
    """How a pool's capacity is counted."""

    #: From the agent's histogram of nodes by free devices, pod by pod.
    FREE_GPU = "FreeGPU"
    #: Whole nodes: every claiming pod costs one node.
    WHOLE_NODE = "WholeNode"


class ObservationState(StrEnum):
    FRESH = "Fresh"
    STALE = "Stale"
    EXPIRED = "Expired"
    #: The cluster has no agent report at all (whole-node accounting, never expires).
    NONE = "None"


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    details: Mapping[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PoolVerdict:
    """Whether one engine of the deployment could go on one pool, and why not.

    `free` summarises the pool's capacity at the time of the verdict: for FreeGPU pools
    `nodes`, `free_devices`, `best_node_free`; for WholeNode pools `nodes` and `free_nodes`.
    """

    pool: PoolName
    engine: str
    accounting: Accounting
    fits: bool
    reasons: tuple[Reason, ...] = ()
    free: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterVerdict:
    cluster: ClusterName
    fits: bool
    reasons: tuple[Reason, ...] = ()
    pools: tuple[PoolVerdict, ...] = ()


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a deployment got fewer replicas than it asked for, cluster by cluster.

    `reasons` holds deployment-wide reasons (NoClusters, FillDisabled).
    """

    clusters: tuple[ClusterVerdict, ...] = ()
    reasons: tuple[Reason, ...] = ()

    def is_empty(self) -> bool:
        return not self.clusters and not self.reasons

    def blocking_counts(self) -> list[tuple[ReasonCode, int]]:
        """Per blocking code, how many non-fitting clusters it is the reason of; most frequent
        first. Each cluster counts once, so the counts add up to the clusters that do not fit:
        one with several blocking codes (a silent agent and a taint) counts under the one
        nearest the root cause (`ROOT_CAUSE_ORDER`), as kube-scheduler counts a node once."""
        counts: dict[ReasonCode, int] = {}
        informational = INFORMATIONAL_CODES
        for verdict in self.clusters:
            if verdict.fits:
                continue
            reasons = verdict.reasons
            if len(reasons) == 1:  # most verdicts
                code = reasons[0].code
                if code not in informational:
                    counts[code] = counts.get(code, 0) + 1
                continue
            blocking = [r.code for r in reasons if r.code not in informational]
            if blocking:
                code = min(blocking, key=_root_cause_rank)
                counts[code] = counts.get(code, 0) + 1
        return sorted(counts.items(), key=lambda item: (-item[1], item[0].value))

    def summary(self, counts: list[tuple[ReasonCode, int]] | None = None) -> str:
        """The kube-style roll-up, e.g. "0/3 clusters fit: 2 InsufficientGPU, 1 Tainted".
        `counts`: `blocking_counts()`, when the caller has it already."""
        fitting = sum(1 for v in self.clusters if v.fits)
        text = f"{fitting}/{len(self.clusters)} clusters fit"
        if counts is None:
            counts = self.blocking_counts()
        if counts:
            text += ": " + ", ".join(f"{n} {code.value}" for code, n in counts)
        if self.reasons:
            text = "; ".join([*(f"{r.code.value}: {r.message}" for r in self.reasons), text])
        return text

    def dominant_code(
        self, counts: list[tuple[ReasonCode, int]] | None = None
    ) -> ReasonCode | None:
        """The code a condition's `reason` should carry: deployment-wide first, then the most
        frequent cluster code other than ClusterNotSelected; ties go to the code nearer the
        root cause (`ROOT_CAUSE_ORDER`: a silent agent before the NotReady it leads to).
        `counts`: `blocking_counts()`, when the caller has it already."""
        if self.reasons:
            return self.reasons[0].code
        if counts is None:
            counts = self.blocking_counts()
        candidates = [(c, n) for c, n in counts if c is not ReasonCode.CLUSTER_NOT_SELECTED]
        if not candidates:
            return counts[0][0] if counts else None
        top = max(n for _, n in candidates)
        return min((c for c, n in candidates if n == top), key=_root_cause_rank)

    def top_reason(self) -> tuple[Reason, str] | None:
        """The reason to show first, with where it was found (`cluster solo, pool l4`): a
        deployment-wide reason first; else the first non-fitting cluster (by name) carrying
        the dominant code, naming the pool whose verdict carries the same reason."""
        if self.reasons:
            return self.reasons[0], ""
        code = self.dominant_code()
        for verdict in self.clusters:
            if verdict.fits:
                continue
            for reason in verdict.reasons:
                if reason.code is not code:
                    continue
                pools = [p.pool for p in verdict.pools if reason in p.reasons]
                where = f"cluster {verdict.cluster}" + (f", pool {pools[0]}" if pools else "")
                return reason, where
        return None


@dataclass(frozen=True, slots=True)
class PlacedMember:
    role: Role
    pool: PoolName
    worker_nodes: int = 1
    requests: tuple[ResolvedRequest, ...] = ()
    #: Each pod's (millicores, memory bytes) as sized in proportion on its pool (the
    #: replica's `hostRequests`); None when the member does not ask for it.
    host_requests: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class PlacedEngine:
    name: str
    copies: int
    phase: Phase | None
    members: tuple[PlacedMember, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """A replica to keep or create: pinned to `cluster`, identified by (cluster, index)."""

    name: str
    deployment: DeploymentKey
    cluster: ClusterName
    index: int
    engines: tuple[PlacedEngine, ...]
    #: The cluster's gateway address, "" when it has none (a gateway is optional).
    gateway_address: str = ""


@dataclass(frozen=True, slots=True)
class DroppedReplica:
    name: str
    cluster: ClusterName
    index: int
    reason: Reason


@dataclass(frozen=True, slots=True)
class Condition:
    """The deployment's `ReplicasScheduled` condition, as Modelplane HEAD (2.13) shapes it."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """One step of a deployment's rollout (core/rollout.py), after this decision: replicas
    of its `revision` (kept and created), old ones left, old ones removed in this step, and
    the `Progressing` condition. `diagnosis` says why a new replica could not be placed (the
    surge: verdicts with numbers), when one was wanted and none was placed."""

    revision: str
    desired: int
    updated: int
    old: int
    superseded: int
    condition: Condition
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True, slots=True)
class DeploymentDecision:
    key: DeploymentKey
    desired: int
    retained: tuple[Placement, ...]
    created: tuple[Placement, ...]
    dropped: tuple[DroppedReplica, ...]
    shortfall: int
    diagnosis: Diagnosis | None
    condition: Condition
    #: While a template change rolls (some kept replica runs an older revision): how far.
    rollout: RolloutProgress | None = None

    @property
    def placements(self) -> tuple[Placement, ...]:
        """Retained and created, sorted by (cluster, index)."""
        return tuple(sorted((*self.retained, *self.created), key=lambda p: (p.cluster, p.index)))


@dataclass(frozen=True, slots=True)
class FreeBucket:
    """`nodes` nodes each with `free` devices free, per DRA driver."""

    free: Mapping[DriverName, int]
    nodes: int


@dataclass(frozen=True, slots=True)
class PoolState:
    """The ledger's final state of one pool, after charging and this decision's placements."""

    cluster: ClusterName
    pool: PoolName
    accounting: Accounting
    observation: ObservationState
    #: Nodes the pool may reach (`maxNodeCount` or `nodeCount`).
    nodes: int
    #: FreeGPU only: the free-device histogram (growth included), largest free first.
    histogram: tuple[FreeBucket, ...] = ()
    #: WholeNode only: nodes left after charging (negative when overcommitted).
    free_nodes: int | None = None
    #: Why the pool uses whole-node accounting despite an observation.
    reasons: tuple[Reason, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    deployments: tuple[DeploymentDecision, ...]
    pools: tuple[PoolState, ...] = ()

    def for_deployment(self, key: DeploymentKey) -> DeploymentDecision:
        for decision in self.deployments:
            if decision.key == key:
                return decision
        raise KeyError(str(key))


def replica_name(deployment: str, cluster: str, index: int) -> str:
    """The replica object name: deployment name (truncated) + "-" + 5 hex chars of SHA-256.

    The hash covers "<deployment>-<cluster>-<index>", as Modelplane does. The result is a DNS
    subdomain of at most 63 characters (truncation never leaves a trailing '-' or '.').
    """
    digest = hashlib.sha256(f"{deployment}-{cluster}-{index}".encode()).hexdigest()[:_HASH_CHARS]
    prefix = deployment[: REPLICA_NAME_MAX_CHARS - _HASH_CHARS - 1].rstrip("-.")
    return f"{prefix}-{digest}" if prefix else digest
