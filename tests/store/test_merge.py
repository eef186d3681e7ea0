"""Merge patches: the diff that turns one object into another, and applying it back."""

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.store import apply_merge_patch, merge_patch


@dataclass(frozen=True)
class PatchCase:
    id: str
    old: dict[str, Any]
    new: dict[str, Any]
    want: dict[str, Any]


PATCH_CASES = [
    PatchCase("equal", {"a": 1, "m": {"x": 1}}, {"a": 1, "m": {"x": 1}}, {}),
    PatchCase("removed-key", {"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    PatchCase("nested-removed", {"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}, {"m": {"y": None}}),
    PatchCase("emptied-map", {"m": {"x": 1}}, {"m": {}}, {"m": {"x": None}}),
    PatchCase("new-empty-map", {}, {"m": {}}, {"m": {}}),
    PatchCase("list-replaced", {"l": [1, 2]}, {"l": [1]}, {"l": [1]}),
    PatchCase("map-replaces-scalar", {"a": 1}, {"a": {"x": 1}}, {"a": {"x": 1}}),
]


@pytest.mark.parametrize("case", PATCH_CASES, ids=lambda c: c.id)
def test_merge_patch(case: PatchCase) -> None:
    assert merge_patch(case.old, case.new) == case.want


# JSON-like documents without nulls (a merge patch cannot express a null value).
_leaf = st.one_of(st.integers(), st.text(max_size=3), st.booleans(), st.lists(st.integers()))
_doc = st.recursive(
    st.dictionaries(st.sampled_from("abcd"), _leaf, max_size=3),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), st.one_of(_leaf, inner), max_size=3),
    max_leaves=12,
)


@given(_doc, _doc)
def test_applying_the_diff_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge_patch(dict(old), merge_patch(old, new)) == new
