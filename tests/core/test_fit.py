"""Fitting pods on a free-device histogram: node choice, order independence, gangs, charging."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.capacity import Pack, Spread, Vector
from gpufleet.core.fit import Assignment, Unit, charge, fit, make_unit

SPREAD = Spread()
PACK = Pack()


def hist(**free_to_nodes: int) -> dict[Vector, int]:
    """hist(f4=1, f1=2) -> {(4,): 1, (1,): 2}"""
    return {(int(k[1:]),): n for k, n in free_to_nodes.items()}


def pods(*demands: int) -> list[Unit]:
    return [((d,),) for d in demands]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(SPREAD, {(3,): 1, (2,): 1}), (PACK, {(4,): 1, (1,): 1})],
    ids=["spread-takes-the-emptiest", "pack-takes-the-fullest"],
)
def test_node_choice(policy: Spread | Pack, expected: dict[Vector, int]) -> None:
    result = fit(hist(f4=1, f2=1), pods(1), policy)
    assert dict(result.free) == expected


@pytest.mark.parametrize(
    ("units", "free", "fits", "after"),
    [
        (pods(1, 4), hist(f4=1, f1=1), True, {(0,): 2}),
        (pods(4, 1), hist(f4=1, f1=1), True, {(0,): 2}),
        ([make_unit([(4,), (4,)])], hist(f8=1, f0=3), False, None),
        ([make_unit([(4,), (4,)])], hist(f8=1, f4=1), True, {(4,): 1, (0,): 1}),
        (pods(4, 4), hist(f8=1), True, {(0,): 1}),
        (pods(2), hist(f1=4), False, None),
    ],
    ids=[
        "61-1-then-4",
        "61-4-then-1",
        "62-gang-distinct",
        "gang-two-nodes",
        "pd-one-node",
        "no-node-has-two",
    ],
)
def test_fit_cases(
    units: list[Unit], free: dict[Vector, int], fits: bool, after: dict[Vector, int] | None
) -> None:
    result = fit(free, units, SPREAD)
    assert result.is_fit is fits
    assert (dict(result.free) if fits else None) == after
    if not fits:
        assert result.free == free


def test_failure_names_the_pod() -> None:
    result = fit(hist(f8=1, f0=3), [make_unit([(4,), (4,)])], SPREAD)
    assert result.failure is not None
    assert (result.failure.pod, result.failure.unit_size, result.failure.placed_pods) == (
        (4,),
        2,
        0,
    )


def test_charge_never_fails_and_takes_what_it_can() -> None:
    free, log = charge(hist(f2=1, f1=1), pods(4), SPREAD, record=True)
    assert free == {(0,): 2}
    assert [(a.node, a.taken) for a in log] == [((2,), (2,)), ((1,), (1,))]


def test_charged_gang_uses_its_own_nodes_last() -> None:
    free, _ = charge(hist(f8=1), [make_unit([(4,), (4,)])], SPREAD)
    assert free == {(0,): 1}


def test_multi_driver_vectors() -> None:
    result = fit({(4, 2): 1, (8, 0): 1}, [((2, 1),)], SPREAD)
    assert dict(result.free) == {(2, 1): 1, (8, 0): 1}


vectors = st.integers(0, 8).map(lambda n: (n,))
histograms = st.dictionaries(vectors, st.integers(1, 3), min_size=1, max_size=5)
unit_lists = st.lists(
    st.lists(st.integers(1, 8).map(lambda n: (n,)), min_size=1, max_size=3).map(make_unit),
    max_size=6,
)


def replay(free: dict[Vector, int], assignments: tuple[Assignment, ...]) -> None:
    """Replay on explicit nodes: every pod fits the node it takes; gang pods on distinct nodes."""
    nodes = [v for v, n in sorted(free.items()) for _ in range(n)]
    used: dict[int, set[int]] = {}
    for a in assignments:
        taken_by_unit = used.setdefault(a.unit, set())
        index = next(
            i
            for i, v in enumerate(nodes)
            if v == a.node and (a.is_charge or i not in taken_by_unit)
        )
        assert all(t <= f for t, f in zip(a.taken, nodes[index], strict=True))
        nodes[index] = tuple(f - t for f, t in zip(nodes[index], a.taken, strict=True))
        taken_by_unit.add(index)
    assert all(f >= 0 for v in nodes for f in v)


@settings(max_examples=200, deadline=None)
@given(histograms, unit_lists, st.randoms(use_true_random=False), st.sampled_from([SPREAD, PACK]))
def test_fit_is_order_independent_and_never_overcommits(
    free: dict[Vector, int], units: list[Unit], rnd: object, policy: Spread | Pack
) -> None:
    shuffled = list(units)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    first = fit(free, units, policy, record=True)
    second = fit(free, shuffled, policy)
    assert (first.is_fit, dict(first.free)) == (second.is_fit, dict(second.free))
    if first.is_fit:
        replay(free, first.assignments)
        used = sum(sum(p) for u in units for p in u)
        total = lambda h: sum(v[0] * n for v, n in h.items())  # noqa: E731
        assert total(free) - total(first.free) == used
        assert Counter(first.free).total() == Counter(free).total()


@settings(max_examples=200, deadline=None)
@given(histograms, unit_lists)
def test_charge_keeps_nodes_and_never_goes_negative(
    free: dict[Vector, int], units: list[Unit]
) -> None:
    after, log = charge(free, units, SPREAD, record=True)
    assert sum(after.values()) == sum(free.values())
    assert all(f >= 0 for v in after for f in v)
    replay(free, log)


def _plain_choice(free: dict[Vector, int], pod: Vector, *, largest: bool) -> Vector | None:
    """The node choice as specified: among node kinds with nodes that fit, the largest
    (Spread) or smallest (Pack) by (free devices, vector)."""
    fitting = [
        v for v, n in free.items() if n > 0 and all(f >= d for f, d in zip(v, pod, strict=True))
    ]
    if not fitting:
        return None
    return max(fitting, key=_by_free) if largest else min(fitting, key=_by_free)


def _by_free(vector: Vector) -> tuple[int, Vector]:
    return (sum(vector), vector)


@given(
    st.integers(1, 3).flatmap(
        lambda k: st.tuples(
            st.dictionaries(st.tuples(*[st.integers(0, 8)] * k), st.integers(-1, 3), max_size=6),
            st.tuples(*[st.integers(0, 8)] * k),
        )
    )
)
def test_node_choice_is_the_plain_choice(case: tuple[dict[Vector, int], Vector]) -> None:
    """One driver takes a shortcut (no key tuple per node kind); any number chooses as
    specified."""
    free, pod = case
    assert SPREAD.choose(free, pod) == _plain_choice(free, pod, largest=True)
    assert PACK.choose(free, pod) == _plain_choice(free, pod, largest=False)
