"""`NodeIndex.selected` (the emulated scheduler's nodeSelector lookup) against its oracle, the
plain check `node_filter` makes first: the nodes whose labels hold the selector, in order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.sim.emulated.kube_scheduler import NodeIndex
from gpufleet.sim.emulated.objects import SELECTOR_MISMATCH, node_filter

_KEYS = st.sampled_from(["pool", "zone", "gpu"])
_VALUES = st.sampled_from(["a", "b", "c"])
_LABELS = st.dictionaries(_KEYS, _VALUES, max_size=3)
_SELECTOR = st.dictionaries(_KEYS, st.one_of(_VALUES, st.integers(0, 1)), max_size=3)


def _node(i: int, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"n{i}", "uid": f"u{i}", "resourceVersion": str(i)}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {}, "status": {}}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), _LABELS), max_size=12), st.lists(_SELECTOR, max_size=4))
def test_selected_is_what_the_plain_filter_admits(
    labels: list[dict[str, str] | None], selectors: list[dict[str, Any]]
) -> None:
    nodes = [_node(i, lab) for i, lab in enumerate(labels)]
    index = NodeIndex(nodes, revision=1)
    for selector in selectors:  # several asks of one index (its per-key tables are reused)
        spec = {"nodeSelector": selector}
        expected = [n for n in nodes if node_filter(n, spec) != SELECTOR_MISMATCH]
        assert list(index.selected(selector)) == expected


_TAINT = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["gpu", "spot"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    },
    optional={"value": st.sampled_from(["a", "b"])},
)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["gpu", "spot"]),
        "operator": st.sampled_from(["Equal", "Exists"]),
        "value": st.sampled_from(["a", "b"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    },
)
_NODE_STATE = st.tuples(
    st.one_of(st.none(), _LABELS), st.booleans(), st.booleans(), st.lists(_TAINT, max_size=2)
)


def _full_node(i: int, state: tuple[Any, bool, bool, list[dict[str, str]]]) -> dict[str, Any]:
    labels, is_ready, is_cordoned, taints = state
    node = _node(i, labels)
    node["spec"] = {"unschedulable": is_cordoned, "taints": taints}
    ready = {"type": "Ready", "status": "True" if is_ready else "False"}
    node["status"] = {"conditions": [ready]}
    return node


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_NODE_STATE, max_size=8),
    st.lists(
        st.tuples(_SELECTOR, st.one_of(st.none(), st.lists(_TOLERATION, max_size=2))),
        max_size=5,
    ),
)
def test_remembered_filter_reasons_are_the_plain_ones(
    states: list[tuple[Any, bool, bool, list[dict[str, str]]]],
    specs: list[tuple[dict[str, Any], list[dict[str, str]] | None]],
) -> None:
    """`NodeIndex.node_filter` (remembered per node and per the pod's nodeSelector and
    tolerations) against `node_filter` itself, for pods asked one after the other (several
    with the same inputs) of all the nodes and of those their selector admits."""
    nodes = [_full_node(i, state) for i, state in enumerate(states)]
    index = NodeIndex(nodes, revision=1)
    for selector, tolerations in [*specs, *specs]:
        spec: dict[str, Any] = {"nodeSelector": selector}
        if tolerations is not None:
            spec["tolerations"] = tolerations
        for asked in (nodes, index.selected(selector)):
            assert index.node_filter(asked, spec) == [node_filter(n, spec) for n in asked]


def test_pods_with_other_tolerations_are_filtered_afresh() -> None:
    """Two pods of one nodeSelector, one tolerating the node's taint: each its own reason."""
    node = _full_node(0, ({"pool": "a"}, True, False, [{"key": "gpu", "effect": "NoSchedule"}]))
    index = NodeIndex([node], revision=1)
    tolerant = {"nodeSelector": {"pool": "a"}, "tolerations": [{"operator": "Exists"}]}
    plain = {"nodeSelector": {"pool": "a"}}
    assert index.node_filter([node], tolerant) == [None]
    assert index.node_filter([node], plain) == ["node(s) had untolerated taint {gpu}"]
    assert index.node_filter([node], tolerant) == [None]
