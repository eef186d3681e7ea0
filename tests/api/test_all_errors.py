"""Issue 18: validation reports every error of an object in one pass, each once.

From each valid base body, any combination of the catalogue's independent mutations
(tests/catalogue_api.py) must produce exactly the union of their errors, at their paths: no rule
waits for another part of the object to be fixed, none reports twice or as a consequence of
another.
"""

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders_api import edited
from catalogue_api import BASES, Mutation
from gpufleet.api import FieldError, ValidationFailed, parse_object

pytestmark = pytest.mark.timeout(120)


def mutated(base: dict[str, Any], mutations: list[Mutation]) -> dict[str, Any]:
    edits: dict[str, object] = {}
    for mutation in mutations:
        edits |= mutation.edits
    return edited(base, edits)


def errors_of(body: dict[str, Any]) -> list[FieldError]:
    try:
        parse_object(body)
    except ValidationFailed as failure:
        return list(failure.errors)
    return []


def assert_exactly(errors: list[FieldError], mutations: list[Mutation]) -> None:
    """Each mutation's error once, at its path, and nothing else."""
    unmatched = list(errors)
    for mutation in mutations:
        found = [
            e
            for e in unmatched
            if e.path == mutation.path and e.message.startswith(mutation.message)
        ]
        assert len(found) == 1, (
            f"{mutation.id}: expected one error at {mutation.path}, got {errors}"
        )
        unmatched.remove(found[0])
    assert not unmatched, f"unexpected errors {unmatched} for {[m.id for m in mutations]}"


@pytest.mark.parametrize("kind", sorted(BASES))
def test_catalogue_paths_are_disjoint_and_bases_valid(kind: str) -> None:
    build, catalogue = BASES[kind]
    assert errors_of(build()) == []
    touched = Counter(path for m in catalogue for path in m.edits)
    assert [p for p, n in touched.items() if n > 1] == []


CASES = [(kind, m) for kind, (_, catalogue) in sorted(BASES.items()) for m in catalogue]


@pytest.mark.parametrize(("kind", "mutation"), CASES, ids=[f"{k}: {m.id}" for k, m in CASES])
def test_each_mutation_alone_breaks_its_rule(kind: str, mutation: Mutation) -> None:
    build, _ = BASES[kind]
    assert_exactly(errors_of(mutated(build(), [mutation])), [mutation])


@pytest.mark.parametrize("kind", sorted(BASES))
def test_all_mutations_at_once_report_every_error(kind: str) -> None:
    build, catalogue = BASES[kind]
    assert_exactly(errors_of(mutated(build(), catalogue)), catalogue)


@st.composite
def combinations(draw: st.DrawFn) -> tuple[str, list[Mutation]]:
    kind = draw(st.sampled_from(sorted(BASES)))
    catalogue = BASES[kind][1]
    chosen = draw(st.lists(st.sampled_from(catalogue), unique_by=lambda m: m.id))
    return kind, chosen


@settings(max_examples=300, deadline=None)
@given(combinations())
def test_any_combination_reports_exactly_its_errors(case: tuple[str, list[Mutation]]) -> None:
    kind, mutations = case
    build, _ = BASES[kind]
    assert_exactly(errors_of(mutated(build(), mutations)), mutations)


def test_issue_18_pool_name_and_count_in_one_pass() -> None:
    body = edited(
        BASES["InferenceCluster"][0](),
        {"spec.nodePools[0].name": "GPU_pool", "spec.nodePools[0].nodeCount": -1},
    )
    assert [str(e) for e in errors_of(body)] == [
        "spec.nodePools[0].name: must be a DNS label (lowercase letters, digits and '-', "
        "starting and ending with a letter or digit)",
        "spec.nodePools[0].nodeCount: must be at least 0",
    ]


def test_a_broken_operand_silences_the_rule_that_reads_it() -> None:
    body = edited(
        BASES["InferenceCluster"][0](),
        {"spec.nodePools[0].nodeCount": "9", "spec.nodePools[0].maxNodeCount": 4},
    )
    assert [str(e) for e in errors_of(body)] == ["spec.nodePools[0].nodeCount: must be an integer"]
