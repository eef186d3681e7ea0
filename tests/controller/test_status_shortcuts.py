"""What status.py computes once or in one pass equals its plain definition: a Trust's pool
reports and fence (`Trust.pools`, `Trust.fence`, found once per judgement), and the statuses
compared without ages or times (`without_ages`, `without_times`, each pool's observation
stripped in one pass); and the verdicts on pool reports a cluster keeps while what they read
stays (`VerdictMemo`) are `pool_verdicts` at every publish."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.controller.fence import Fence
from gpufleet.controller.status import (
    AgentReport,
    Trust,
    VerdictMemo,
    pool_verdicts,
    without_ages,
    without_times,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = st.sampled_from(["PoolObservation", "ReplicaObservation"])
STAMP = "2026-01-01T00:00:00Z"
VALUES = st.one_of(st.integers(0, 9), st.text(max_size=3), st.just(STAMP))


def _status() -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from(["observedAt", "observedNodes", "ageSeconds", "state", "x"])
    return st.dictionaries(keys, VALUES, max_size=5)


@st.composite
def reports(draw: st.DrawFn) -> AgentReport:
    status = draw(st.one_of(st.none(), _status()))
    body: dict[str, Any] = {} if status is None else {"status": status}
    seconds = draw(st.integers(0, 600))
    return AgentReport(
        draw(KINDS),
        draw(st.sampled_from(["a", "b", "c"])),
        "ns",
        "agent",
        1,
        T0 + timedelta(seconds=seconds),
        body,
    )


@given(st.lists(reports(), max_size=8), st.lists(reports(), max_size=3))
def test_a_trusts_pools_are_its_accepted_pool_reports_in_order(
    accepted: list[AgentReport], rejected: list[AgentReport]
) -> None:
    epoch = 1 if accepted else None
    trust = Trust(epoch, tuple(accepted), tuple(rejected), uid="u")
    assert trust.pools == tuple(r for r in accepted if r.kind == "PoolObservation")
    assert trust.fence == (Fence("u", 1) if accepted else None)


def _plain_without(status: Mapping[str, Any], keys: list[str]) -> dict[str, Any]:
    """Each key stripped from each pool's observation in turn, one pass per key."""
    stripped = dict(status)
    for key in keys:
        pools = stripped.get("gpuPools")
        if not isinstance(pools, list):
            break
        out = []
        for pool in pools:
            observation = pool.get("observation") if isinstance(pool, Mapping) else None
            if isinstance(observation, Mapping) and key in observation:
                kept = {k: v for k, v in observation.items() if k != key}
                pool = {**pool, "observation": kept}
            out.append(pool)
        stripped["gpuPools"] = out
    return stripped


OBSERVATIONS = st.one_of(st.none(), st.integers(), _status())
POOLS = st.lists(
    st.one_of(
        st.integers(),
        st.dictionaries(st.sampled_from(["name", "observation"]), OBSERVATIONS, max_size=2),
    ),
    max_size=4,
)
STATUSES = st.fixed_dictionaries(
    {},
    optional={
        "gpuPools": st.one_of(POOLS, st.integers()),
        "agent": st.one_of(
            st.integers(), st.dictionaries(st.sampled_from(["observedAt", "identity"]), VALUES)
        ),
        "conditions": st.lists(st.integers(), max_size=2),
    },
)


@given(STATUSES)
def test_without_ages_and_times_strip_what_one_pass_per_key_strips(
    status: dict[str, Any],
) -> None:
    assert without_ages(status) == _plain_without(status, ["ageSeconds"])
    timed = _plain_without(status, ["ageSeconds", "observedAt"])
    agent = timed.get("agent")
    if isinstance(agent, Mapping) and "observedAt" in agent:
        timed["agent"] = {k: v for k, v in agent.items() if k != "observedAt"}
    assert without_times(status) == timed


# --- the verdicts on pool reports, kept while what they read stays --------------------------


def _klass(version: int) -> dict[str, Any]:
    """A class whose content is a function of its resourceVersion (the store's promise)."""
    devices = [{"driver": "gpu", "count": 1 + version % 3}]
    return {"metadata": {"uid": "k", "resourceVersion": str(version)}, "spec": {"devices": devices}}


@st.composite
def publishes(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], Trust]:
    """One publish's inputs: the cluster's pools, the classes, the accepted pool reports."""
    pools = [
        {"name": name, "className": "c", "nodeCount": draw(st.integers(0, 3))}
        for name in draw(st.sampled_from([["a"], ["a", "b"], ["b"]]))
    ]
    cluster = {"metadata": {"name": "east"}, "spec": {"nodePools": pools}}
    classes = {"c": _klass(draw(st.integers(0, 2)))} if draw(st.booleans()) else {}
    reports = []
    for name in draw(st.sampled_from([["a"], ["a", "b"], []])):
        observed = draw(st.integers(0, 4))
        status = {
            "observedAt": f"2026-01-01T00:00:0{draw(st.integers(0, 9))}Z",
            "observedNodes": observed,
            "freeDevices": [{"nodes": draw(st.integers(0, 4)), "free": {"gpu": 1}}],
            "excludedNodes": {"cordoned": draw(st.integers(0, 2))},
        }
        stamp = T0 + timedelta(seconds=draw(st.integers(0, 9)))
        reports.append(
            AgentReport("PoolObservation", name, "ns", "agent", 1, stamp, {"status": status})
        )
    return cluster, classes, Trust(1 if reports else None, tuple(reports), ())


@given(st.lists(publishes(), min_size=1, max_size=12))
def test_the_verdict_memo_finds_what_pool_verdicts_finds_at_every_publish(
    seq: list[tuple[dict[str, Any], dict[str, Any], Trust]],
) -> None:
    memo = VerdictMemo()
    for cluster, classes, trust in seq:
        assert memo.of(cluster, classes, trust) == pool_verdicts(cluster, classes, trust)


def test_a_heartbeat_that_moved_only_its_stamp_keeps_the_verdicts_found() -> None:
    pools = [{"name": "a", "className": "c", "nodeCount": 1}]
    cluster = {"metadata": {"name": "east"}, "spec": {"nodePools": pools}}
    classes = {"c": _klass(0)}
    memo = VerdictMemo()
    found = []
    for second in (0, 5):
        status = {"observedAt": f"2026-01-01T00:00:0{second}Z", "observedNodes": 2}
        report = AgentReport("PoolObservation", "a", "ns", "agent", 1, T0, {"status": status})
        found.append(memo.of(cluster, classes, Trust(1, (report,), ())))
    assert found[0] is found[1]  # not checked again
    assert found[0] == pool_verdicts(cluster, classes, Trust(1, (report,), ()))
    assert found[0]["a"] is not None and found[0]["a"].rule == "ObservedNodesOverCeiling"
