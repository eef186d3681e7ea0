"""`NodeIndex.selected` (the emulated scheduler's nodeSelector lookup) against its oracle, the
plain check `node_filter` makes first: the nodes whose labels hold the selector, in order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.sim.kube_scheduler import NodeIndex
from gpufleet.sim.objects import SELECTOR_MISMATCH, node_filter

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
