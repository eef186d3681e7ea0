"""Reasons with numbers: one constructor per refusal, so every "no" reads the same way.

Model. Each function builds one `Reason` whose `details` carry the numbers a user (or
`gpufleet explain`) needs to act: what was requested, what was free, how many nodes were left
out and why. Messages restate the numbers in words; nothing here decides anything.

Invariant: a Reason's `details` values are ints or short names, never prose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from gpufleet.core.capacity import UNLIMITED, NodeChoicePolicy, PoolLedger, Vector
from gpufleet.core.decision import Reason, ReasonCode
from gpufleet.core.durations import format_duration
from gpufleet.core.fit import FitFailure, Unit, fit, nodes_that_fit
from gpufleet.core.model import Taint


def _excluded(ledger: PoolLedger) -> tuple[dict[str, int], str]:
    observation = ledger.observation
    if observation is None:
        return {}, ""
    excluded = {k: v for k, v in sorted(observation.excluded_nodes.items()) if v > 0}
    details = {f"excluded.{k}": v for k, v in excluded.items()}
    words = ", ".join(f"{v} {k}" for k, v in excluded.items())
    return details, (f"; nodes excluded: {words}" if words else "")


def _count(n: int, noun: str) -> str:
    """`1 pod`, `2 pods`: messages read as a person would write them."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def insufficient_devices(
    ledger: PoolLedger, units: Sequence[Unit], failure: FitFailure, policy: NodeChoicePolicy
) -> Reason:
    """InsufficientGPU, or GangNeedsDistinctNodes when the pods fit without the gang rule,
    or InsufficientCPU / InsufficientMemory when they fit the devices but not the host."""
    if ledger.host:
        binding = _host_binding(ledger, units, policy)
        if binding is not None:
            return _insufficient_host(ledger, failure.pod, binding)
    width = len(ledger.drivers)
    pods: list[Vector] = [pod for unit in units for pod in unit]
    largest = max((sum(p[:width]) for p in pods), default=0)
    requested = sum(sum(p[:width]) for p in pods)
    summary = ledger.summary()
    excluded, excluded_words = _excluded(ledger)
    pod = failure.pod
    if failure.unit_size > 1:
        singles = [(p,) for p in pods]
        if fit(ledger.free, singles, policy).is_fit:
            able = nodes_that_fit(ledger.free, pod)
            return Reason(
                ReasonCode.GANG_NEEDS_DISTINCT_NODES,
                f"a gang copy of {failure.unit_size} pods needs {failure.unit_size} distinct "
                f"nodes with {sum(pod[:width])} devices free each; {_count(able, 'node')} "
                f"{'has' if able == 1 else 'have'} that "
                f"(best node has {summary['best_node_free']} free){excluded_words}",
                {
                    "gang_pods": failure.unit_size,
                    "pod_devices": sum(pod[:width]),
                    "nodes_fitting_pod": able,
                    **summary,
                    **excluded,
                },
            )
    return Reason(
        ReasonCode.INSUFFICIENT_GPU,
        f"{_count(len(pods), 'pod')} {'requests' if len(pods) == 1 else 'request'} "
        f"{_count(requested, 'device')} (largest pod {largest}"
        f"{', on distinct nodes per gang copy' if any(len(u) > 1 for u in units) else ''}); "
        f"best node has {summary['best_node_free']} free, {summary['free_devices']} free on "
        f"{_count(summary['nodes'], 'node')}{excluded_words}",
        {
            "pods": len(pods),
            "requested_devices": requested,
            "largest_pod_devices": largest,
            "failed_pod_devices": sum(pod[:width]),
            "nodes_fitting_failed_pod": nodes_that_fit(ledger.free, pod),
            **summary,
            **excluded,
        },
    )


def _host_binding(
    ledger: PoolLedger, units: Sequence[Unit], policy: NodeChoicePolicy
) -> ReasonCode | None:
    """Which host resource keeps `units` off a pool whose vectors hold CPU and memory: None
    when they do not fit the devices alone; InsufficientCPU when they do not fit with their
    CPU requests alone; else InsufficientMemory."""
    width = len(ledger.drivers)

    def only(keep_cpu: bool) -> list[Unit]:
        return [tuple((*p[:width], p[width] if keep_cpu else 0, 0) for p in unit) for unit in units]

    if not fit(ledger.free, only(keep_cpu=False), policy).is_fit:
        return None
    if not fit(ledger.free, only(keep_cpu=True), policy).is_fit:
        return ReasonCode.INSUFFICIENT_CPU
    return ReasonCode.INSUFFICIENT_MEMORY


def format_cores(milli_cpu: int) -> str:
    """Millicores as cores: `24`, `1.5`, `0.25`."""
    whole, part = divmod(max(0, milli_cpu), 1000)
    return f"{whole}" if not part else f"{whole}.{part:03d}".rstrip("0")


def format_bytes(memory: int) -> str:
    """Bytes in the largest binary unit that divides them: `64Gi`, `512Mi`, `1000`."""
    if memory >= UNLIMITED:
        return "unlimited"
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if memory and memory % size == 0:
            return f"{memory // size}{unit}"
    return str(max(0, memory))


def _insufficient_host(ledger: PoolLedger, pod: Vector, code: ReasonCode) -> Reason:
    """InsufficientCPU / InsufficientMemory for the pod that failed, with the best node
    (most of the resource free) among those whose devices fit it."""
    width = len(ledger.drivers)
    index = width if code is ReasonCode.INSUFFICIENT_CPU else width + 1
    devices = pod[:width]
    able = [
        v
        for v, n in ledger.free.items()
        if n > 0 and all(f >= d for f, d in zip(v[:width], devices, strict=True))
    ]
    best = max(able, key=lambda v: (v[index], v), default=None)
    best_devices = sum(best[:width]) if best is not None else 0
    best_free = best[index] if best is not None else 0
    fitting = sum(
        n
        for v, n in ledger.free.items()
        if all(f >= d for f, d in zip(v[:width], devices, strict=True)) and v[index] >= pod[index]
    )
    if code is ReasonCode.INSUFFICIENT_CPU:
        needs = f"{format_cores(pod[index])} cores"
        has = f"{format_cores(best_free)} free"
        keys = ("pod_milli_cpu", "best_node_milli_cpu")
    else:
        needs = f"{format_bytes(pod[index])} of memory"
        has = f"{format_bytes(best_free)} free"
        keys = ("pod_memory", "best_node_memory")
    return Reason(
        code,
        f"a pod with {_count(sum(devices), 'device')} needs {needs}, best node with "
        f"{best_devices} free devices has {has}; "
        f"{_count(fitting, 'node')} with the devices {'has' if fitting == 1 else 'have'} it",
        {
            "pod_devices": sum(devices),
            keys[0]: pod[index],
            "best_node_devices": best_devices,
            keys[1]: min(best_free, UNLIMITED),
            "nodes_fitting_devices": len(able) and sum(ledger.free[v] for v in able),
            "nodes_fitting_pod": fitting,
        },
    )


def insufficient_nodes(ledger: PoolLedger, requested_nodes: int) -> Reason:
    nodes = max(0, ledger.pool.nodes)
    return Reason(
        ReasonCode.INSUFFICIENT_NODES,
        f"needs {requested_nodes} whole nodes; {max(0, ledger.free_nodes)} of {nodes} free",
        {"requested_nodes": requested_nodes, "free_nodes": ledger.free_nodes, "nodes": nodes},
    )


def member_unmatched(pool: str, role: str, request: str, is_selector_miss: bool) -> Reason:
    """`is_selector_miss`: no device of the pool matches the request's selectors (else one
    does, with too few devices left for the request's count)."""
    why = (
        "no device of the pool matches its selectors"
        if is_selector_miss
        else "the devices its selectors match have too few left for its count"
    )
    return Reason(
        ReasonCode.NO_MATCHING_POOL,
        f"pool {pool}: {role} request {request}: {why}",
        {
            "pool": pool,
            "role": role,
            "request": request,
            "cause": "selectors" if is_selector_miss else "count",
        },
    )


def member_stranded(pool: str, role: str) -> Reason:
    return Reason(
        ReasonCode.NO_MATCHING_POOL,
        f"pool {pool}: {role} resolves only synthetic devices here but claims elsewhere",
        {"pool": pool, "role": role},
    )


def no_matching_pool(engine: str, pools: int) -> Reason:
    return Reason(
        ReasonCode.NO_MATCHING_POOL,
        f"engine {engine}: none of {pools} pools matches every member",
        {"engine": engine, "pools": pools},
    )


def engine_cannot_claim(engine: str, pools: int) -> Reason:
    return Reason(
        ReasonCode.ENGINE_CANNOT_CLAIM,
        f"engine {engine}: no member resolves a DRA device on any of {pools} pools",
        {"engine": engine, "pools": pools},
    )


def not_selected(selector: Mapping[str, str]) -> Reason:
    wanted = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return Reason(
        ReasonCode.CLUSTER_NOT_SELECTED,
        f"labels do not match clusterSelector {wanted}",
        {"selector": wanted},
    )


def tainted(taints: Sequence[Taint]) -> Reason:
    words = ", ".join(f"{t.key}{'=' + t.value if t.value else ''}:{t.effect.value}" for t in taints)
    first = taints[0]
    return Reason(
        ReasonCode.TAINTED,
        f"untolerated taints: {words}",
        {"taints": len(taints), "key": first.key, "effect": first.effect.value},
    )


def not_ready() -> Reason:
    return Reason(ReasonCode.CLUSTER_NOT_READY, "cluster is not Ready", {})


def expired(age_s: float | None, expire_after_s: float) -> Reason:
    age = int(age_s) if age_s is not None else -1
    return Reason(
        ReasonCode.OBSERVATION_EXPIRED,
        f"agent silent for {format_duration(age)} (expires after {format_duration(expire_after_s)}): "
        "no new replicas",
        {"age_s": age, "expire_after_s": int(expire_after_s)},
    )


def stale(age_s: float | None, stale_after_s: float) -> Reason:
    age = int(age_s) if age_s is not None else -1
    return Reason(
        ReasonCode.OBSERVATION_STALE,
        f"observation is {format_duration(age)} old (stale after {format_duration(stale_after_s)})"
        if age_s is not None
        else "observation has no time: treated as stale",
        {"age_s": age, "stale_after_s": int(stale_after_s)},
    )


def no_clusters(fleet_clusters: int) -> Reason:
    return Reason(
        ReasonCode.NO_CLUSTERS,
        f"no cluster of {fleet_clusters} in the fleet is selected",
        {"clusters": fleet_clusters},
    )


def fill_disabled() -> Reason:
    return Reason(
        ReasonCode.FILL_DISABLED,
        "retain only: a dependency (model cache) is unresolved; no new replicas",
        {},
    )


def cluster_missing(cluster: str) -> Reason:
    return Reason(
        ReasonCode.CLUSTER_MISSING, f"cluster {cluster} is not in the fleet", {"cluster": cluster}
    )


def pool_missing(engine: str, role: str, pool: str) -> Reason:
    what = f"pool {pool} is not published" if pool else "no pool pinned"
    return Reason(
        ReasonCode.POOL_MISSING,
        f"engine {engine} {role}: {what}",
        {"engine": engine, "role": role, "pool": pool},
    )


def shape_changed(what: str) -> Reason:
    return Reason(ReasonCode.SHAPE_CHANGED, what, {})


def duplicate(cluster: str, index: int, kept: str) -> Reason:
    return Reason(
        ReasonCode.DUPLICATE_IDENTITY,
        f"({cluster}, {index}) is already held by {kept}",
        {"cluster": cluster, "index": index, "kept": kept},
    )


def scaled_down(desired: int, kept: int) -> Reason:
    return Reason(
        ReasonCode.SCALED_DOWN,
        f"{kept} replicas kept for {desired} desired",
        {"desired": desired, "kept": kept},
    )


def superseded(revision: str, is_serving: bool) -> Reason:
    """An old replica removed by a rollout to revision `revision` (core/rollout.py)."""
    what = "serving" if is_serving else "serving nothing"
    return Reason(
        ReasonCode.SUPERSEDED,
        f"runs an older revision ({what}); replaced by revision {revision}",
        {"revision": revision},
    )


def drained(is_serving: bool) -> Reason:
    """A replica with pods on a cordoned node, removed once its replacement runs elsewhere."""
    what = "serving" if is_serving else "serving nothing"
    return Reason(
        ReasonCode.SUPERSEDED,
        f"pods on a cordoned node ({what}); replaced by a replica placed where it fits",
        {"cordoned": 1},
    )


def stuck(code: ReasonCode, message: str, replica: str) -> Reason:
    """A replica dropped to be re-placed (`PodsUnschedulable`, `PolicyDenied`)."""
    return Reason(code, message, {"replica": replica})


def backing_off(cause: str, message: str, until: datetime) -> Reason:
    """A pool a deployment's new replicas avoid until `until` (named as a time, not as
    seconds left, so the reason reads the same from step to step)."""
    stamp = until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Reason(
        ReasonCode.BACKING_OFF,
        f"avoided until {stamp}: {message}",
        {"until": stamp, "cause": cause},
    )
