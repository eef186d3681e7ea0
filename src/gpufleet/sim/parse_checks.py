"""Reading a scenario's checks: each entry becomes a `Check` with its expectations, checked
against the fleet's clusters and pools and the deployments the scenario applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

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

    placements: dict[str, PlacementExpectation] = {}
    for name, value in get_mapping(
        expect.get("placements"), f"{epath}.placements", problems
    ).items():
        where = f"{epath}.placements.{name}"
        key = resolve_deployment(str(name), known, where, problems)
        if isinstance(value, int) and not isinstance(value, bool):
            placements[key] = PlacementExpectation(count=value)
            continue
        v = get_mapping(value, where, problems)
        check_known(v, ("count", "clusters"), where, problems)
        count = get_int(v, "count", where, problems, -1)
        clusters_raw = v.get("clusters")
        clusters: dict[str, int] | None = None
        if isinstance(clusters_raw, list):
            clusters = {}
            for c in clusters_raw:
                clusters[str(c)] = clusters.get(str(c), 0) + 1
        elif isinstance(clusters_raw, Mapping):
            clusters = {str(c): int(n) for c, n in clusters_raw.items()}
        elif clusters_raw is not None:
            problems.add(f"{where}.clusters", "must be a list of clusters or {cluster: count}")
        for c in clusters or {}:
            if c not in fleet.pools:
                problems.add(f"{where}.clusters", f"unknown cluster {c!r}")
        placements[key] = PlacementExpectation(None if count < 0 else count, clusters)

    histogram: dict[tuple[str, str], dict[int, int]] = {}
    for key, value in get_mapping(expect.get("histogram"), f"{epath}.histogram", problems).items():
        where = f"{epath}.histogram.{key}"
        pool = fleet.pool_key(key, where, problems)
        buckets: dict[int, int] = {}
        for free, nodes in get_mapping(value, where, problems).items():
            try:
                buckets[int(free)] = int(nodes)
            except (TypeError, ValueError):
                problems.add(f"{where}.{free}", "must map free GPUs to a node count")
        histogram[pool] = buckets

    pool_state: dict[tuple[str, str], str] = {}
    for key, value in get_mapping(expect.get("poolState"), f"{epath}.poolState", problems).items():
        where = f"{epath}.poolState.{key}"
        pool = fleet.pool_key(key, where, problems)
        if value not in ("Fresh", "Stale", "Expired", "None"):
            problems.add(where, "must be Fresh, Stale, Expired or None")
        pool_state[pool] = str(value)

    conditions: dict[str, ConditionExpectation] = {}
    for name, value in get_mapping(
        expect.get("conditions"), f"{epath}.conditions", problems
    ).items():
        where = f"{epath}.conditions.{name}"
        key = resolve_deployment(str(name), known, where, problems)
        v = get_mapping(value, where, problems)
        check_known(v, ("type", "status", "reason", "message"), where, problems)
        status = v.get("status")
        if status is not None and str(status) not in ("True", "False", "Unknown"):
            problems.add(f"{where}.status", "must be True, False or Unknown (quoted in YAML)")
        conditions[key] = ConditionExpectation(
            type=str(v.get("type") or "ReplicasScheduled"),
            status=None if status is None else str(status),
            reason=None if v.get("reason") is None else str(v["reason"]),
            message=None if v.get("message") is None else str(v["message"]),
        )

    free_gpus = _per_pool_ints(expect.get("freeGPUs"), f"{epath}.freeGPUs", problems, fleet)
    observed = _per_pool_ints(
        expect.get("observedFreeGPUs"), f"{epath}.observedFreeGPUs", problems, fleet
    )
    return Check(
        at_s=at_s,
        path=path,
        placements=placements,
        pending=_per_deployment_ints(expect.get("pending"), f"{epath}.pending", problems, known),
        pods_running=_per_deployment_ints(
            expect.get("podsRunning"), f"{epath}.podsRunning", problems, known
        ),
        free_gpus=free_gpus,
        observed_free_gpus=observed,
        allocated_gpus=_per_pool_ints(
            expect.get("allocatedGPUs"), f"{epath}.allocatedGPUs", problems, fleet
        ),
        histogram=histogram,
        nodes=_per_pool_ints(expect.get("nodes"), f"{epath}.nodes", problems, fleet),
        pool_state=pool_state,
        conditions=conditions,
    )
