"""Selectors through the API validation (issue 30, 1; issue 28, 3): a deep, long or mistyped
selector is one error at its field path naming the limit or the type, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from builders_api import edited, model_deployment
from gpufleet.api import ValidationFailed, validate
from gpufleet.cel.syntax import MAX_DEPTH

PATH = "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
CAPACITY = 'device.capacity["gpu.nvidia.com"]'


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    #: Words of the one error at PATH (None: the selector is valid).
    words: str | None


CASES = [
    Case("250-nots", "!" * 250 + "true", None),
    Case("250-ors", " || ".join(["true"] * 250), None),
    Case("250-plus", " + ".join(["1"] * 250) + " > 0", f"limit {MAX_DEPTH}"),
    Case("300-selections", "device.attributes" + ".a" * 300 + " == 1", f"limit {MAX_DEPTH}"),
    Case("96-brackets", "(" * 96 + "true" + ")" * 96, "nest at most 95 levels deep"),
    Case("string-result", "device.driver", "must evaluate to bool or the unknown type, not string"),
    Case(
        "quantity-compared-with-int",
        f"{CAPACITY}.memory > 5",
        "found no matching overload for '_>_' applied to '(kubernetes.Quantity, int)'",
    ),
    Case(
        "unparsable-quantity-literal",
        f'{CAPACITY}.memory.isGreaterThan(quantity("16GB"))',
        "quantity('16GB') does not parse",
    ),
    Case("unknown-device-field", 'device.vendor == "nvidia"', "undefined field 'vendor'"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_selector_is_refused_at_its_path(case: Case) -> None:
    body = edited(model_deployment(), {PATH: case.expression})
    if case.words is None:
        validate(body)
        return
    with pytest.raises(ValidationFailed) as raised:
        validate(body)
    (error,) = raised.value.errors
    assert error.path == PATH
    assert error.message.startswith("does not compile: ERROR: <input>")
    assert case.words in error.message


def test_a_type_error_carries_a_caret_under_its_operator() -> None:
    body = edited(model_deployment(), {PATH: f"{CAPACITY}.memory > 5"})
    with pytest.raises(ValidationFailed) as raised:
        validate(body)
    (error,) = raised.value.errors
    assert error.message.splitlines()[1:] == [f"| {CAPACITY}.memory > 5", f"| {'.' * 41}^"]
