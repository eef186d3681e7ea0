"""Reading a scenario's checks: each entry becomes a `Check` with its expectations, checked
against the fleet's clusters and pools and the deployments the scenario applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.sim.fields import Problems, check_known, get_duration, get_int, get_mapping
from gpufleet.sim.parse_timeline import FleetNames, resolve_deployment
from gpufleet.sim.scenario_model import (
    Check,
    ConditionExpectation,
    PlacementExpectation,
    format_duration,
)

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
    check_known(data, ("at", "expect", "description"), path, problems)
    at_s = get_duration(data, "at", path, problems)
    if at_s > end_s:
        problems.add(f"{path}.at", f"is after the end ({format_duration(end_s)})")
    epath = f"{path}.expect"
    expect = get_mapping(data.get("expect"), epath, problems)
    if not expect:
        problems.add(epath, f"must expect something (one of {', '.join(_EXPECT_KEYS)})")
    check_known(expect, _EXPECT_KEYS, epath, problems)
    e = _Expect(epath, expect, problems, fleet, known)
    return Check(
        at_s=at_s,
        path=path,
        placements=_placements(e),
        pending=e.deployment_ints("pending"),
        pods_running=e.deployment_ints("podsRunning"),
        free_gpus=e.pool_ints("freeGPUs"),
        observed_free_gpus=e.pool_ints("observedFreeGPUs"),
        allocated_gpus=e.pool_ints("allocatedGPUs"),
        histogram=_histogram(e),
        nodes=e.pool_ints("nodes"),
        pool_state=_pool_state(e),
        conditions=_conditions(e),
    )


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
        clusters = {str(c): int(n) for c, n in raw.items()}
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
