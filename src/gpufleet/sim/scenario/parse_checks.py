"""Reading a scenario's checks: each entry becomes a `Check` with its expectations, checked
against the fleet's clusters and pools and the deployments the scenario applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from gpufleet.sim.scenario.fields import Problems, check_known, get_duration, get_int, get_mapping
from gpufleet.sim.scenario.model import (
    MIN_PERIOD_S,
    Check,
    CheckMode,
    ConditionExpectation,
    HubVsActual,
    PlacementExpectation,
    PodsExpectation,
    PodsScheduledExpectation,
    PoolExpectations,
    format_duration,
)
from gpufleet.sim.scenario.parse_timeline import FleetNames, resolve_deployment

_EXPECT_KEYS: Final = (
    "placements",
    "pending",
    "podsRunning",
    "freeGPUs",
    "observedFreeGPUs",
    "allocatedGPUs",
    "histogram",
    "nodes",
    "poolState",
    "conditions",
    "pods",
    "modelPodsScheduled",
    "readyReplicas",
    "hubFreeGPUs",
    "updatedReplicas",
    "minPodsRunning",
)


def _per_deployment_ints(
    value: object, path: str, problems: Problems, known: Sequence[str]
) -> dict[str, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return {"": value}
    out: dict[str, int] = {}
    for name, n in get_mapping(value, path, problems).items():
        key = resolve_deployment(str(name), known, f"{path}.{name}", problems)
        if isinstance(n, bool) or not isinstance(n, int):
            problems.add(f"{path}.{name}", "must be an integer")
            continue
        out[key] = n
    return out


def _per_pool_ints(
    value: object, path: str, problems: Problems, fleet: FleetNames
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for key, n in get_mapping(value, path, problems).items():
        pool = fleet.pool_key(key, f"{path}.{key}", problems)
        if isinstance(n, bool) or not isinstance(n, int):
            problems.add(f"{path}.{key}", "must be an integer")
            continue
        out[pool] = n
    return out


@dataclass(frozen=True, slots=True)
class _Expect:
    """A check's `expect` being read, with the names it may use."""

    path: str
    data: Mapping[str, Any]
    problems: Problems
    fleet: FleetNames
    known: Sequence[str]

    def items(self, key: str) -> list[tuple[object, object, str]]:
        """(name, value, path) of each entry of the mapping under `key`."""
        where = f"{self.path}.{key}"
        return [
            (name, value, f"{where}.{name}")
            for name, value in get_mapping(self.data.get(key), where, self.problems).items()
        ]

    def deployment_ints(self, key: str) -> dict[str, int] | None:
        return _per_deployment_ints(
            self.data.get(key), f"{self.path}.{key}", self.problems, self.known
        )

    def pool_ints(self, key: str) -> dict[tuple[str, str], int]:
        return _per_pool_ints(self.data.get(key), f"{self.path}.{key}", self.problems, self.fleet)


def read_check(
    raw: object,
    path: str,
    problems: Problems,
    fleet: FleetNames,
    known: Sequence[str],
    end_s: float,
) -> Check:
    data = get_mapping(raw, path, problems)
    check_known(data, ("at", "always", "within", "every", "expect", "description"), path, problems)
    mode, at_s, until_s, every_s = _window(data, path, problems, end_s)
    epath = f"{path}.expect"
    expect = get_mapping(data.get("expect"), epath, problems)
    if not expect:
        problems.add(epath, f"must expect something (one of {', '.join(_EXPECT_KEYS)})")
    check_known(expect, _EXPECT_KEYS, epath, problems)
    e = _Expect(epath, expect, problems, fleet, known)
    # Read in the order of `_EXPECT_KEYS`, so problems are reported in that order.
    placements = _placements(e)
    pending = e.deployment_ints("pending")
    pods_running = e.deployment_ints("podsRunning")
    pools = PoolExpectations(
        free_gpus=e.pool_ints("freeGPUs"),
        observed_free_gpus=e.pool_ints("observedFreeGPUs"),
        allocated_gpus=e.pool_ints("allocatedGPUs"),
        histogram=_histogram(e),
        nodes=e.pool_ints("nodes"),
        pool_state=_pool_state(e),
    )
    conditions = _conditions(e)
    pods = _pods(e)
    pods_scheduled = _pods_scheduled(e)
    ready_replicas = _ready_replicas(e)
    updated_replicas = _ready_replicas(e, "updatedReplicas")
    min_pods_running = _ready_replicas(e, "minPodsRunning")
    pools = replace(pools, hub_free_gpus=_hub_free_gpus(e))
    return Check(
        at_s=at_s,
        path=path,
        placements=placements,
        pending=pending,
        pods_running=pods_running,
        pools=pools,
        conditions=conditions,
        pods=pods,
        pods_scheduled=pods_scheduled,
        ready_replicas=ready_replicas,
        updated_replicas=updated_replicas,
        min_pods_running=min_pods_running,
        mode=mode,
        until_s=until_s,
        every_s=every_s,
    )


def _window(
    data: Mapping[str, Any], path: str, problems: Problems, end_s: float
) -> tuple[CheckMode, float, float, float]:
    """(mode, start, end, every) of a check: `at`, `always: {from, to}`, or `at` + `within`."""
    every_s = get_duration(data, "every", path, problems, 1.0)
    if every_s < MIN_PERIOD_S:
        problems.add(f"{path}.every", "must be at least 1ms (it is a period)")
        every_s = 1.0
    always, within = data.get("always"), data.get("within")
    if always is not None:
        if "at" in data or within is not None:
            problems.add(path, "give always, or at (alone or with within), not both")
        where = f"{path}.always"
        window = get_mapping(always, where, problems)
        check_known(window, ("from", "to"), where, problems)
        start = get_duration(window, "from", where, problems, 0.0)
        stop = get_duration(window, "to", where, problems, end_s)
        if stop < start:
            problems.add(f"{where}.to", "must not be before from")
        if stop > end_s:
            problems.add(f"{where}.to", f"is after the end ({format_duration(end_s)})")
        return CheckMode.ALWAYS, start, stop, every_s
    at_s = get_duration(data, "at", path, problems)
    if at_s > end_s:
        problems.add(f"{path}.at", f"is after the end ({format_duration(end_s)})")
    if within is None:
        if "every" in data:
            problems.add(f"{path}.every", "needs always or within")
        return CheckMode.AT, at_s, at_s, every_s
    within_s = get_duration(data, "within", path, problems)
    if within_s <= 0:
        problems.add(f"{path}.within", "must be more than 0")
    if at_s + within_s > end_s:
        problems.add(f"{path}.within", f"ends after the end ({format_duration(end_s)})")
    return CheckMode.WITHIN, at_s, at_s + within_s, every_s


def _pods(e: _Expect) -> dict[str, PodsExpectation]:
    out: dict[str, PodsExpectation] = {}
    for name, value, where in e.items("pods"):
        key = resolve_deployment(str(name), e.known, where, e.problems)
        v = get_mapping(value, where, e.problems)
        check_known(v, ("running", "pending", "unschedulable"), where, e.problems)
        if not v:
            e.problems.add(where, "must expect running, pending or unschedulable")
        counts = {k: get_int(v, k, where, e.problems) if k in v else None for k in _POD_STATES}
        out[key] = PodsExpectation(**counts)
    return out


_POD_STATES: Final = ("running", "pending", "unschedulable")


def _pods_scheduled(e: _Expect) -> dict[str, PodsScheduledExpectation]:
    out: dict[str, PodsScheduledExpectation] = {}
    for name, value, where in e.items("modelPodsScheduled"):
        key = resolve_deployment(str(name), e.known, where, e.problems)
        v = get_mapping(value, where, e.problems)
        check_known(v, ("status", "reason", "count"), where, e.problems)
        status = v.get("status")
        if status is not None and str(status) not in ("True", "False", "Unknown"):
            e.problems.add(f"{where}.status", "must be True, False or Unknown (quoted in YAML)")
        out[key] = PodsScheduledExpectation(
            status=None if status is None else str(status),
            reason=None if v.get("reason") is None else str(v["reason"]),
            count=get_int(v, "count", where, e.problems) if "count" in v else None,
        )
    return out


def _ready_replicas(e: _Expect, key: str = "readyReplicas") -> dict[str, int]:
    """{deployment: count} under `key` (readyReplicas, updatedReplicas, minPodsRunning)."""
    out: dict[str, int] = {}
    for name, value, where in e.items(key):
        key = resolve_deployment(str(name), e.known, where, e.problems)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            e.problems.add(where, "must be an integer, at least 0")
            continue
        out[key] = value
    return out


def _hub_free_gpus(e: _Expect) -> dict[tuple[str, str], int | HubVsActual]:
    out: dict[tuple[str, str], int | HubVsActual] = {}
    choices = [c.value for c in HubVsActual]
    for key, value, where in e.items("hubFreeGPUs"):
        pool = e.fleet.pool_key(key, where, e.problems)
        if isinstance(value, int) and not isinstance(value, bool):
            out[pool] = value
        elif value in choices:
            out[pool] = HubVsActual(value)
        else:
            e.problems.add(where, f"must be an integer, or one of {', '.join(choices)}")
    return out


def _placements(e: _Expect) -> dict[str, PlacementExpectation]:
    placements: dict[str, PlacementExpectation] = {}
    for name, value, where in e.items("placements"):
        key = resolve_deployment(str(name), e.known, where, e.problems)
        if isinstance(value, int) and not isinstance(value, bool):
            placements[key] = PlacementExpectation(count=value)
            continue
        v = get_mapping(value, where, e.problems)
        check_known(v, ("count", "clusters"), where, e.problems)
        count = get_int(v, "count", where, e.problems, -1)
        clusters = _clusters(v.get("clusters"), f"{where}.clusters", e)
        placements[key] = PlacementExpectation(None if count < 0 else count, clusters)
    return placements


def _clusters(raw: object, where: str, e: _Expect) -> dict[str, int] | None:
    clusters: dict[str, int] | None = None
    if isinstance(raw, list):
        clusters = {}
        for c in raw:
            clusters[str(c)] = clusters.get(str(c), 0) + 1
    elif isinstance(raw, Mapping):
        clusters = {}
        for c, n in raw.items():
            if isinstance(n, bool) or not isinstance(n, int):
                e.problems.add(f"{where}.{c}", "must be an integer")
                continue
            clusters[str(c)] = n
    elif raw is not None:
        e.problems.add(where, "must be a list of clusters or {cluster: count}")
    for c in clusters or {}:
        if c not in e.fleet.pools:
            e.problems.add(where, f"unknown cluster {c!r}")
    return clusters


def _histogram(e: _Expect) -> dict[tuple[str, str], dict[int, int]]:
    histogram: dict[tuple[str, str], dict[int, int]] = {}
    for key, value, where in e.items("histogram"):
        pool = e.fleet.pool_key(key, where, e.problems)
        buckets: dict[int, int] = {}
        for free, nodes in get_mapping(value, where, e.problems).items():
            try:
                buckets[int(free)] = int(nodes)
            except (TypeError, ValueError):
                e.problems.add(f"{where}.{free}", "must map free GPUs to a node count")
        histogram[pool] = buckets
    return histogram


def _pool_state(e: _Expect) -> dict[tuple[str, str], str]:
    pool_state: dict[tuple[str, str], str] = {}
    for key, value, where in e.items("poolState"):
        pool = e.fleet.pool_key(key, where, e.problems)
        if value not in ("Fresh", "Stale", "Expired", "None"):
            e.problems.add(where, "must be Fresh, Stale, Expired or None")
        pool_state[pool] = str(value)
    return pool_state


def _conditions(e: _Expect) -> dict[str, ConditionExpectation]:
    conditions: dict[str, ConditionExpectation] = {}
    for name, value, where in e.items("conditions"):
        key = resolve_deployment(str(name), e.known, where, e.problems)
        v = get_mapping(value, where, e.problems)
        check_known(v, ("type", "status", "reason", "message"), where, e.problems)
        status = v.get("status")
        if status is not None and str(status) not in ("True", "False", "Unknown"):
            e.problems.add(f"{where}.status", "must be True, False or Unknown (quoted in YAML)")
        conditions[key] = ConditionExpectation(
            type=str(v.get("type") or "ReplicasScheduled"),
            status=None if status is None else str(status),
            reason=None if v.get("reason") is None else str(v["reason"]),
            message=None if v.get("message") is None else str(v["message"]),
        )
    return conditions
