"""Oracle: `validate_model` (plain schema, then one walk of the rules) is `model_validate`.

On every base body of the catalogue and any combination of its mutations, both build an equal
object or both fail with the same errors (type, path, message, in order).
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from builders_api import edited
from catalogue_api import BASES
from gpufleet.api.kinds import KINDS
from gpufleet.api.models import LEGACY_POOL_NAMES
from gpufleet.api.rules import validate_model

pytestmark = pytest.mark.timeout(120)


def outcome(validate: Any, *args: object) -> object:
    try:
        return validate(*args)
    except ValidationError as error:
        return [(e["type"], e["loc"], e["msg"]) for e in error.errors()]


def assert_same(body: dict[str, Any]) -> None:
    model = KINDS[body["kind"]]
    context = {LEGACY_POOL_NAMES: frozenset()}
    fast = outcome(validate_model, model, body, context)
    plain = outcome(lambda: model.model_validate(body, context=context))
    assert type(fast) is type(plain)
    assert fast == plain


@pytest.mark.parametrize("kind", sorted(BASES))
def test_valid_bases_build_the_same_object(kind: str) -> None:
    build, _ = BASES[kind]
    body = build()
    assert_same(body)
    assert not isinstance(outcome(validate_model, KINDS[body["kind"]], body, {}), list)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(BASES)))
def test_mutated_bodies_fail_the_same_way(data: st.DataObject, kind: str) -> None:
    build, catalogue = BASES[kind]
    picked = data.draw(st.lists(st.sampled_from(catalogue), max_size=4, unique_by=lambda m: m.id))
    edits: dict[str, object] = {}
    for mutation in picked:
        edits |= mutation.edits
    assert_same(edited(build(), edits))


@pytest.mark.parametrize("kind", sorted(BASES))
def test_each_rule_alone_fails_the_same_way(kind: str) -> None:
    build, catalogue = BASES[kind]
    for mutation in catalogue:
        body = edited(build(), mutation.edits)
        assert isinstance(outcome(validate_model, KINDS[body["kind"]], body, {}), list)
        assert_same(body)
