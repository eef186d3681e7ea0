"""What status.py computes once or in one pass equals its plain definition: a Trust's pool
reports and fence (`Trust.pools`, `Trust.fence`, found once per judgement), and the statuses
compared without ages or times (`without_ages`, `without_times`, each pool's observation
stripped in one pass)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.controller.fence import Fence
from gpufleet.controller.status import AgentReport, Trust, without_ages, without_times

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
