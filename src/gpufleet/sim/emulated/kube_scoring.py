"""kube-scheduler's default-profile scoring, as pure functions on Kubernetes-shaped objects.

Model (kubernetes/kubernetes `pkg/scheduler/framework/plugins`, weights from
`pkg/scheduler/apis/config/v1/default_plugins.go`): every node that passed the filters gets,
per score plugin, a score in 0..100 (`MAX_NODE_SCORE`); the node's total is the sum of
`weight * score`; the highest total wins. The plugins that tell the simulator's nodes apart:

| plugin | weight | raw score per node | normalized |
|---|---|---|---|
| TaintToleration | 3 | PreferNoSchedule taints the pod does not tolerate | reversed: `100 - 100*s//max` (all 100 when max is 0) |
| NodeAffinity | 2 | sum of the weights of the pod's preferred terms the node matches | `100*s//max` (unchanged when max is 0) |
| PodTopologySpread | 2 | per default constraint with the node's label: `count*log(n+2) + maxSkew-1`, rounded | `100*(max+min-s)//max` (all 100 when max is 0) |
| NodeResourcesFit | 1 | LeastAllocated: mean over CPU and memory of `(alloc-req)*100//alloc` | none |
| NodeResourcesBalancedAllocation | 1 | `int((1 - abs(fcpu - fmem)/2) * 100)` | none |

Approximations, each said where it is made:

- PodTopologySpread uses the system default constraints only (`kubernetes.io/hostname` maxSkew 3,
  `topology.kubernetes.io/zone` maxSkew 5, ScheduleAnyway). The real plugin counts the pods its
  `DefaultSelector` selects (the selectors of the Services, ReplicaSets and StatefulSets that
  select the pod); the emulated cluster has no Services and its controllers own pods directly,
  so `spread_key` stands in for "the pod's ReplicaSet / StatefulSet": same controller and same
  `pod-template-hash` for a Deployment's pods, the LWS leaders of one LeaderWorkerSet, or the pods
  of one LWS group. A pod with its own `topologySpreadConstraints` is not spread-scored at all
  (the real plugin would use those instead of the defaults).
- Pod requests are the containers' sum and the init containers' maximum plus `overhead`;
  restartable (sidecar) init containers and pod-level `resources` are not modelled.
- InterPodAffinity (weight 2) scores 0 everywhere (our pods carry only required pod
  anti-affinity, a filter: `anti_affinity_selectors`; the symmetric check of existing pods'
  anti-affinity against the new pod is not modelled, as our gang pods carry matching terms), and
  ImageLocality (weight 1) is not modelled: the emulated nodes hold no images, where a real node
  that already pulled the engine image would get up to 100 more.
- DRA devices are not scored (kube-scheduler has none; KEP-4970 is open): allocation stays
  first fit on the chosen node.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from gpufleet.core.quantity import NANOS_PER_UNIT, QuantityError, parse_quantity
from gpufleet.sim.emulated.objects import (
    LWS_GROUP_INDEX,
    LWS_NAME,
    LWS_WORKER_INDEX,
    POD_TEMPLATE_HASH,
    is_alive,
    tolerates,
)
from gpufleet.store.port import Obj

MAX_NODE_SCORE: Final = 100
#: `schedutil.DefaultMilliCPURequest` / `DefaultMemoryRequest`: what a container without a
#: request counts for in LeastAllocated.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
HOSTNAME_KEY: Final = "kubernetes.io/hostname"
ZONE_KEY: Final = "topology.kubernetes.io/zone"
#: The system default constraints: (topology key, maxSkew), all ScheduleAnyway.
DEFAULT_CONSTRAINTS: Final = ((HOSTNAME_KEY, 3), (ZONE_KEY, 5))
TAINT_TOLERATION_WEIGHT: Final = 3
NODE_AFFINITY_WEIGHT: Final = 2
TOPOLOGY_SPREAD_WEIGHT: Final = 2
FIT_WEIGHT: Final = 1
BALANCED_WEIGHT: Final = 1

#: (milli-CPU, memory bytes)
Resources = tuple[int, int]


# --- requests -----------------------------------------------------------------------------


def _amount(requests: Mapping[str, Any], resource: str, scale: int) -> int | None:
    """`requests[resource]` in units of 1/`scale` (rounded up, as `MilliValue`/`Value`), or
    None when absent or not a quantity (the API server would have refused it)."""
    text = requests.get(resource)
    if text is None:
        return None
    nanos = _nanos(str(text))
    return None if nanos is None else -(-nanos * scale // NANOS_PER_UNIT)


@lru_cache(maxsize=1024)
def _nanos(text: str) -> int | None:
    """A quantity string's value in nano-units (remembered: every node and pod repeats the
    same few strings on every pass)."""
    try:
        return parse_quantity(text).nanos
    except QuantityError:
        return None


def _container_requests(container: Mapping[str, Any], is_non_zero: bool) -> Resources:
    requests = (container.get("resources") or {}).get("requests") or {}
    cpu = _amount(requests, "cpu", 1000)
    memory = _amount(requests, "memory", 1)
    if is_non_zero:
        # `GetNonzeroRequestForResource`: only an absent request counts as the default.
        cpu = DEFAULT_MILLI_CPU_REQUEST if cpu is None else cpu
        memory = DEFAULT_MEMORY_REQUEST if memory is None else memory
    return (cpu or 0, memory or 0)


def pod_requests(pod_spec: Mapping[str, Any], is_non_zero: bool) -> Resources:
    """The pod's CPU and memory requests: containers summed, the largest init container if
    larger, plus the pod's overhead. `is_non_zero`: a container without a request counts as
    100m CPU / 200Mi (LeastAllocated), else as 0 (BalancedAllocation)."""
    containers = pod_spec.get("containers") or []
    if not any("resources" in c for c in containers) and not (
        pod_spec.get("initContainers") or pod_spec.get("overhead")
    ):  # the usual pod here: nothing requested
        n = len(containers) if is_non_zero else 0
        return (n * DEFAULT_MILLI_CPU_REQUEST, n * DEFAULT_MEMORY_REQUEST)
    cpu = memory = 0
    for c in containers:
        c_cpu, c_memory = _container_requests(c, is_non_zero)
        cpu, memory = cpu + c_cpu, memory + c_memory
    for c in pod_spec.get("initContainers") or []:
        c_cpu, c_memory = _container_requests(c, is_non_zero)
        cpu, memory = max(cpu, c_cpu), max(memory, c_memory)
    overhead = pod_spec.get("overhead") or {}
    cpu += _amount(overhead, "cpu", 1000) or 0
    memory += _amount(overhead, "memory", 1) or 0
    return (cpu, memory)


def node_allocatable(node: Obj) -> Resources:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return _allocatable(allocatable.get("cpu"), allocatable.get("memory"))


@lru_cache(maxsize=256)
def _allocatable(cpu: str | None, memory: str | None) -> Resources:
    """(remembered: every node of a pool has the same strings)"""
    quantities = {"cpu": cpu, "memory": memory}
    return (_amount(quantities, "cpu", 1000) or 0, _amount(quantities, "memory", 1) or 0)


# --- NodeResourcesFit (LeastAllocated) and NodeResourcesBalancedAllocation ------------------


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def least_allocated_score(requested: Resources, allocatable: Resources) -> int:
    """NodeResourcesFit's default strategy: CPU and memory, weight 1 each. `requested` is the
    node's non-zero requests plus the pod's."""
    cpu = least_requested_score(requested[0], allocatable[0])
    return (cpu + least_requested_score(requested[1], allocatable[1])) // 2


def balanced_allocation_score(requested: Resources, allocatable: Resources) -> int:
    """1 minus the standard deviation of the CPU and memory fractions (each capped at 1), times
    100, truncated; a resource the node has none of is left out. `requested` is the node's
    requests plus the pod's, without the non-zero defaults."""
    fractions = [min(r / a, 1.0) for r, a in zip(requested, allocatable, strict=True) if a]
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)


# --- TaintToleration and NodeAffinity -----------------------------------------------------


def intolerable_prefer_no_schedule(node: Obj, pod_spec: Mapping[str, Any]) -> int:
    """TaintToleration's raw score: the node's PreferNoSchedule taints the pod does not
    tolerate (`tolerates` skips tolerations of another effect, as the plugin's filter to
    PreferNoSchedule-or-empty does)."""
    tolerations = pod_spec.get("tolerations") or []
    return sum(
        1
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") == "PreferNoSchedule" and not tolerates(tolerations, t)
    )


def _requirement_matches(op: object, values: Sequence[str], value: str | None) -> bool:
    """One NodeSelectorRequirement (its operator and values) against a label (or field)
    value; None: absent."""
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


#: A NodeSelectorRequirement as read once: (key, operator, values as strings).
_Requirement = tuple[Any, Any, tuple[str, ...]]


def _requirements(reqs: Sequence[Mapping[str, Any]]) -> tuple[_Requirement, ...]:
    return tuple(
        (r.get("key", ""), r.get("operator"), tuple(str(v) for v in r.get("values") or []))
        for r in reqs
    )


@dataclass(frozen=True, slots=True)
class _Term:
    """A NodeSelectorTerm read once, to be matched against many nodes."""

    expressions: tuple[_Requirement, ...]
    fields: tuple[_Requirement, ...]

    @classmethod
    def of(cls, term: Mapping[str, Any]) -> _Term:
        return cls(
            _requirements(term.get("matchExpressions") or []),
            _requirements(term.get("matchFields") or []),
        )

    def matches(self, node: Obj) -> bool:
        """Every expression and field requirement holds; an empty term matches nothing."""
        if not self.expressions and not self.fields:
            return False
        labels = node["metadata"].get("labels") or {}
        name = node["metadata"]["name"]
        return all(
            _requirement_matches(op, values, labels.get(key))
            for key, op, values in self.expressions
        ) and all(
            key == "metadata.name" and _requirement_matches(op, values, name)
            for key, op, values in self.fields
        )


def required_affinity_matches(node: Obj, pod_spec: Mapping[str, Any]) -> bool:
    """NodeAffinity's filter: the node matches one of the pod's required terms (they are
    ORed); true when the pod has none."""
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_Term.of(t).matches(node) for t in required.get("nodeSelectorTerms") or [])


def anti_affinity_selectors(pod: Obj) -> list[tuple[str, dict[str, str]]]:
    """The pod's required pod anti-affinity terms as (topology key, labels a pod must carry
    to count): `matchLabels` plus, per `matchLabelKeys` key the pod carries, its own value
    (a key it lacks is ignored, as the API server does). `matchExpressions` and `namespaces`
    are not modelled (the pod's namespace is used)."""
    spec = pod["spec"]
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    own = pod["metadata"].get("labels") or {}
    out: list[tuple[str, dict[str, str]]] = []
    for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        selected = dict((term.get("labelSelector") or {}).get("matchLabels") or {})
        for key in term.get("matchLabelKeys") or []:
            if key in own:
                selected[key] = own[key]
        out.append((str(term.get("topologyKey") or HOSTNAME_KEY), selected))
    return out


def preferred_affinity_weights(nodes: Sequence[Obj], pod_spec: Mapping[str, Any]) -> list[int]:
    """NodeAffinity's raw score of each node: the summed weights of the pod's preferred
    terms the node matches (a term of weight 0 is skipped). The terms are read once for
    all the nodes."""
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    terms = [
        (int(t["weight"]), _Term.of(t.get("preference") or {}))
        for t in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if t.get("weight")
    ]
    if not terms:
        return [0 for _ in nodes]
    return [sum(weight for weight, term in terms if term.matches(node)) for node in nodes]


def preferred_affinity_weight(node: Obj, pod_spec: Mapping[str, Any]) -> int:
    """`preferred_affinity_weights` of one node."""
    return preferred_affinity_weights([node], pod_spec)[0]


def default_normalize(scores: Sequence[int], is_reversed: bool) -> list[int]:
    """`helper.DefaultNormalizeScore`: scale to 0..100 by the largest; reversed, 100 minus
    that. All zero: unchanged, or all 100 when reversed."""
    highest = max(scores, default=0)
    if highest == 0:
        return [MAX_NODE_SCORE if is_reversed else s for s in scores]
    scaled = [MAX_NODE_SCORE * s // highest for s in scores]
    return [MAX_NODE_SCORE - s for s in scaled] if is_reversed else scaled


# --- PodTopologySpread ------------------------------------------------------------------


def spread_key(pod: Obj) -> tuple[str, ...] | None:
    """Which pods count as "the same" for the default spreading (see the module docstring),
    or None when the pod has no controller (no default selector: not spread-scored)."""
    meta = pod["metadata"]
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if not refs:
        return None
    labels = meta.get("labels") or {}
    uid = str(refs[0].get("uid", ""))
    if LWS_NAME in labels:
        if labels.get(LWS_WORKER_INDEX, "0") == "0":
            return (meta.get("namespace", ""), uid, "leaders")
        return (meta.get("namespace", ""), uid, "group", labels.get(LWS_GROUP_INDEX, ""))
    return (meta.get("namespace", ""), uid, labels.get(POD_TEMPLATE_HASH, ""))


def counts_for_spread(pod: Obj) -> bool:
    """A pod on a node that `countPodsMatchSelector` counts: not terminating, not finished."""
    return is_alive(pod) and pod["status"].get("phase") not in ("Succeeded", "Failed")


def topology_weight(domains: int) -> float:
    """`topologyNormalizingWeight`: log(size + 2)."""
    return math.log(domains + 2)


def go_round(value: float) -> int:
    """Go's `math.Round` for a non-negative value: half away from zero."""
    return math.floor(value + 0.5)


def spread_raw_score(
    counts: Sequence[int | None], max_skews: Sequence[int], weights: Sequence[float]
) -> int:
    """One node's raw PodTopologySpread score: per constraint whose topology label the node
    has (`counts[i]` not None), `count * weight + maxSkew - 1`; summed, rounded."""
    total = 0.0
    for count, skew, weight in zip(counts, max_skews, weights, strict=True):
        if count is not None:
            total += count * weight + (skew - 1)
    return go_round(total)


def spread_normalize(scores: Sequence[int]) -> list[int]:
    """PodTopologySpread's NormalizeScore: fewer matching pods is better,
    `100 * (max + min - s) // max`; all 100 when the largest is 0."""
    if not scores:
        return []
    highest, lowest = max(scores), min(scores)
    if highest == 0:
        return [MAX_NODE_SCORE for _ in scores]
    return [MAX_NODE_SCORE * (highest + lowest - s) // highest for s in scores]


# --- the whole profile ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What the resource and spread plugins need of the pods bound to one node."""

    non_zero_requested: Resources
    requested: Resources
    #: Pods counted by the default spread selector of the pod being scheduled.
    matching_pods: int


def node_load(pods: Sequence[Obj], key: tuple[str, ...] | None) -> NodeLoad:
    """Sum what the pods on a node request, and count those `spread_key` groups with `key`.
    Finished pods are gone from the scheduler's cache (its informer drops them)."""
    nz_cpu = nz_memory = cpu = memory = matching = 0
    for p in pods:
        if p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        a, b = pod_requests(p["spec"], is_non_zero=True)
        c, d = pod_requests(p["spec"], is_non_zero=False)
        nz_cpu, nz_memory, cpu, memory = nz_cpu + a, nz_memory + b, cpu + c, memory + d
        if key is not None and is_alive(p) and spread_key(p) == key:
            matching += 1
    return NodeLoad((nz_cpu, nz_memory), (cpu, memory), matching)


def _plus(a: Resources, b: Resources) -> Resources:
    return (a[0] + b[0], a[1] + b[1])


def spread_scores(
    pod: Obj,
    nodes: Sequence[Obj],
    loads: Sequence[NodeLoad],
    zone_counts: Mapping[str, int],
) -> list[int]:
    """PodTopologySpread's normalized scores for the feasible `nodes` (with their `loads`);
    `zone_counts`: matching pods per zone over every node the pod's nodeSelector admits."""
    if spread_key(pod) is None or pod["spec"].get("topologySpreadConstraints"):
        return [0 for _ in nodes]  # the plugin skips the pod: no constraints
    zones = {(n["metadata"].get("labels") or {}).get(ZONE_KEY, "") for n in nodes}
    weights = (topology_weight(len(nodes)), topology_weight(len(zones)))
    skews = tuple(skew for _, skew in DEFAULT_CONSTRAINTS)
    raw = []
    for node, load in zip(nodes, loads, strict=True):
        labels = node["metadata"].get("labels") or {}
        zone = labels.get(ZONE_KEY)
        counts = (
            load.matching_pods if HOSTNAME_KEY in labels else None,
            zone_counts.get(zone, 0) if zone is not None else None,
        )
        raw.append(spread_raw_score(counts, skews, weights))
    return spread_normalize(raw)


def total_scores(
    pod: Obj,
    nodes: Sequence[Obj],
    loads: Sequence[NodeLoad],
    zone_counts: Mapping[str, int],
) -> list[int]:
    """Each feasible node's weighted sum over the default profile's score plugins."""
    spec = pod["spec"]
    taints = default_normalize([intolerable_prefer_no_schedule(n, spec) for n in nodes], True)
    affinity = default_normalize(preferred_affinity_weights(nodes, spec), False)
    spread = spread_scores(pod, nodes, loads, zone_counts)
    non_zero = pod_requests(spec, is_non_zero=True)
    actual = pod_requests(spec, is_non_zero=False)
    is_best_effort = actual == (0, 0)  # BalancedAllocation skips it (kubernetes#129138)
    totals = []
    for i, (node, load) in enumerate(zip(nodes, loads, strict=True)):
        allocatable = node_allocatable(node)
        fit = least_allocated_score(_plus(load.non_zero_requested, non_zero), allocatable)
        balanced = (
            0
            if is_best_effort
            else balanced_allocation_score(_plus(load.requested, actual), allocatable)
        )
        totals.append(
            TAINT_TOLERATION_WEIGHT * taints[i]
            + NODE_AFFINITY_WEIGHT * affinity[i]
            + TOPOLOGY_SPREAD_WEIGHT * spread[i]
            + FIT_WEIGHT * fit
            + BALANCED_WEIGHT * balanced
        )
    return totals


def pick_best(pod_name: str, names: Sequence[str], totals: Sequence[int]) -> str:
    """The name with the highest total. The real scheduler picks among equal totals at random
    (reservoir sampling); here the pick is a hash of the pod's and the tied nodes' names, so
    a run is reproducible and equal nodes still share the pods."""
    best = max(totals)
    tied = sorted(n for n, t in zip(names, totals, strict=True) if t == best)
    if len(tied) == 1:
        return tied[0]
    digest = hashlib.sha256("\n".join([pod_name, *tied]).encode()).digest()
    return tied[int.from_bytes(digest[:8], "big") % len(tied)]
