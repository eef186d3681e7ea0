"""Selectors are compiled as the Kubernetes API server compiles them: bounded in size and depth
(issue 30, 1) and type-checked against the DRA device environment (issue 28, 3).

The verdict table is written from the Kubernetes sources each case cites; a change of the
checker that flips one of them is a change of what the API server would accept:

- DRA = k8s.io/dynamic-resource-allocation/cel/compile.go (`newCompiler`: the `device` type, the
  result-type rule) and its compile_test.go (`testcases`: `expectCompileError`);
- QTY = k8s.io/apiserver/pkg/cel/library/quantity.go, SEMVER = .../library/semverlib.go (the
  overloads: member functions, no relational operators);
- BASE = k8s.io/apiserver/pkg/cel/environment/base.go (from 1.29: `ValidateDurationLiterals`,
  `ValidateTimestampLiterals`, `ValidateRegexLiterals`, `ValidateHomogeneousAggregateLiterals`;
  `CrossTypeNumericComparisons(true)` from 1.28);
- CELGO = cel-go's checker/decls (standard overloads: `_==_` is `(A, A) -> bool`, `_+_` is
  homogeneous) and parser/parser.go (`maxRecursionDepth` 250, `expressionSizeCodePointLimit`
  100,000, the `&&`/`||` balancer, `!`/`-` runs by parity);
- OURS = stricter than Kubernetes on purpose (docs/devices.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.cel.check import check
from gpufleet.cel.selector import SELECTOR_MAX_BYTES
from gpufleet.cel.syntax import MAX_CODE_POINTS, MAX_DEPTH, SyntaxLimit, depth, parse
from gpufleet.core.model import Attribute, AttributeKind, Device, DriverName

DRA = "dra.example.com"
ATTRIBUTES = f'device.attributes["{DRA}"]'
CAPACITY = f'device.capacity["{DRA}"]'


@dataclass(frozen=True)
class Verdict:
    name: str
    expression: str
    #: None: Kubernetes compiles it; else the words its compile error contains (cel-go's).
    refused: str | None
    source: str


KUBERNETES_VERDICTS = [
    # compile_test.go, accepted.
    Verdict("true", "true", None, "DRA"),
    Verdict("driver-name-qualifier", f"{ATTRIBUTES}.name", None, "DRA"),  # dyn result
    Verdict("int", f"{ATTRIBUTES}.name > 0", None, "DRA"),
    Verdict("string", f'{ATTRIBUTES}.name == "fish"', None, "DRA"),
    Verdict("version", f'{ATTRIBUTES}.name.isGreaterThan(semver("0.0.1"))', None, "DRA"),
    Verdict(
        "version_v",
        f'{ATTRIBUTES}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        None,
        "DRA",
    ),
    Verdict("quantity", f'{CAPACITY}.name.isGreaterThan(quantity("1Ki"))', None, "DRA"),
    Verdict(
        "check-negative",
        f'!("name" in {CAPACITY}) || {CAPACITY}.name.isGreaterThan(quantity("1Ki"))',
        None,
        "DRA",
    ),
    Verdict(
        "runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        None,
        "DRA",
    ),
    Verdict("macro-exists-on-int", f"{ATTRIBUTES}.name.exists(x, x > 0)", None, "DRA"),
    Verdict(
        "check_attribute_domains", f'device.attributes.exists_one(x, x == "{DRA}")', None, "DRA"
    ),
    Verdict("regexp_attribute", f'{ATTRIBUTES}.services.matches("[^a]?sym")', None, "DRA"),
    Verdict("allow_multiple_allocations", "device.allowMultipleAllocations == true", None, "DRA"),
    Verdict("dynamic-domain", f'device.attributes[device.driver].model == "{DRA}"', None, "DRA"),
    # compile_test.go, refused.
    Verdict("syntax-error", "?!", "Syntax error", "DRA"),
    Verdict("type-error", "1", "must evaluate to bool or the unknown type, not int", "DRA"),
    # The device type declares driver, attributes, capacity (and allowMultipleAllocations).
    Verdict("unknown-device-field", "device.nope == 1", "undefined field 'nope'", "DRA"),
    Verdict(
        "string-result",
        "device.driver",
        "must evaluate to bool or the unknown type, not string",
        "DRA",
    ),
    Verdict(
        "quantity-result",
        f"{CAPACITY}.memory",
        "must evaluate to bool or the unknown type, not kubernetes.Quantity",
        "DRA",
    ),
    Verdict(
        "null-result", "null", "must evaluate to bool or the unknown type, not null_type", "DRA"
    ),
    # Quantities have no relational operators and no overload with an int.
    Verdict(
        "quantity-greater-than-int",
        f"{CAPACITY}.memory > 5",
        "found no matching overload for '_>_' applied to '(kubernetes.Quantity, int)'",
        "QTY",
    ),
    Verdict(
        "quantity-equals-int",
        f"{CAPACITY}.memory == 5",
        "found no matching overload for '_==_' applied to '(kubernetes.Quantity, int)'",
        "QTY",
    ),
    Verdict(
        "relational-on-quantities",
        'quantity("2") > quantity("1")',
        "found no matching overload for '_>_'",
        "QTY",
    ),
    Verdict("quantity-equality", f'{CAPACITY}.memory == quantity("1Gi")', None, "QTY"),
    Verdict(
        "compare-with-int",
        'quantity("1").compareTo(1) == 0',
        "found no matching overload for 'compareTo' applied to 'kubernetes.Quantity.(int)'",
        "QTY",
    ),
    Verdict("add-int", 'quantity("1").add(1) == quantity("2")', None, "QTY"),
    Verdict("add-bool", 'quantity("1").add(true) == quantity("2")', "'add'", "QTY"),
    Verdict("add-double", 'quantity("1").add(1.0) == quantity("2")', "'add'", "QTY"),
    Verdict("quantity-of-int", "quantity(1).sign() == 1", "'quantity' applied to '(int)'", "QTY"),
    Verdict("sign-is-a-method", 'sign(quantity("0")) == 0', "'sign'", "QTY"),
    Verdict("wrong-arity", 'quantity("1", "2").sign() == 1', "'quantity'", "QTY"),
    Verdict("method-on-string", '"1Gi".compareTo(quantity("1Gi")) == 0', "'compareTo'", "QTY"),
    Verdict("forged-tag", '{"__quantity__": "nope"}.sign() == 0', "'sign'", "QTY"),
    Verdict(
        "compare-quantity-semver",
        'quantity("1").compareTo(semver("1.0.0")) == 0',
        "'compareTo' applied to 'kubernetes.Quantity.(kubernetes.Semver)'",
        "QTY",
    ),
    Verdict("major-of-quantity", 'quantity("1").major() == 1', "'major'", "SEMVER"),
    Verdict("semver-normalize-not-bool", 'semver("1.0", 1).major() == 1', "'semver'", "SEMVER"),
    Verdict("isSemver-not-string", "isSemver(1)", "'isSemver' applied to '(int)'", "SEMVER"),
    # The base environment's literal validators and cel-go's standard overloads.
    Verdict("bad-regex", f'{ATTRIBUTES}.services.matches("[")', "invalid regular", "BASE"),
    Verdict("bad-duration", 'duration("1x") > duration("1s")', "invalid duration", "BASE"),
    Verdict("bad-timestamp", 'timestamp("yesterday") > timestamp(0)', "invalid timestamp", "BASE"),
    Verdict("mixed-list", '[1, "a"].size() > 0', "expected type 'int' but found 'string'", "BASE"),
    Verdict("cross-type-ordering", "1 < 2.0", None, "BASE"),
    Verdict("string-plus-int", '"a" + 1 == "a1"', "'_+_' applied to '(string, int)'", "CELGO"),
    Verdict("int-equals-string", '1 == "1"', "'_==_' applied to '(int, string)'", "CELGO"),
    Verdict("not-of-int", "!1", "'!_' applied to '(int)'", "CELGO"),
    Verdict("size-of-int", "size(1) > 0", "'size' applied to '(int)'", "CELGO"),
    Verdict(
        "field-of-string", 'device.driver.x == "a"', "does not support field selection", "CELGO"
    ),
    Verdict("or-of-string", "device.driver || true", "'_||_' applied to '(string, bool)'", "CELGO"),
    Verdict("macro-on-string", 'device.driver.all(c, c == "a")', "cannot be the range", "CELGO"),
    Verdict("collapsed-nots", "!" * 250 + "true", None, "CELGO"),
    Verdict("balanced-ors", " || ".join(["false"] * 300) + " || true", None, "CELGO"),
    Verdict(
        "deep-sum",
        " + ".join(["1"] * 250) + " > 0",
        f"limit {MAX_DEPTH} (cel-go's maxRecursionDepth)",
        "CELGO",
    ),
    # Constant quantity and semver literals must parse.
    Verdict("bad-quantity-literal", 'quantity("200K").sign() == 1', "does not parse", "OURS"),
    Verdict("bad-semver-literal", 'semver("1.0").major() == 1', "does not parse", "OURS"),
    Verdict("normalized-semver-literal", 'semver("1.0", true).major() == 1', None, "OURS"),
]


@pytest.mark.parametrize("case", KUBERNETES_VERDICTS, ids=[c.name for c in KUBERNETES_VERDICTS])
def test_the_verdict_is_the_api_servers(case: Verdict) -> None:
    if case.refused is None:
        compile_selector(case.expression)
        return
    with pytest.raises(CelCompileError) as raised:
        compile_selector(case.expression)
    assert case.refused in raised.value.message


def test_a_type_error_points_at_its_operator_with_a_caret() -> None:
    with pytest.raises(CelCompileError) as raised:
        compile_selector(f"{CAPACITY}.memory > 5")
    assert raised.value.message == (
        "ERROR: <input>:1:43: found no matching overload for '_>_' applied to "
        "'(kubernetes.Quantity, int)'\n"
        f"| {CAPACITY}.memory > 5\n"
        f"| {'.' * 42}^"
    )


def test_an_unknown_field_on_a_later_line_points_at_its_dot() -> None:
    expression = 'device.driver == "a" &&\n  device.drivr == "b"'
    with pytest.raises(CelCompileError) as raised:
        compile_selector(expression)
    assert raised.value.message == (
        "ERROR: <input>:2:9: undefined field 'drivr'\n|   device.drivr == \"b\"\n| ........^"
    )


def test_attribute_values_are_dynamic_as_in_kubernetes() -> None:
    # An attribute may be a bool, an int, a string or a version: only the device knows.
    for use in ("", " > 1", ' == "a"', '.isGreaterThan(semver("1.0.0"))', ".startsWith('a')"):
        assert check(parse(f"{ATTRIBUTES}.any{use}")) in ("bool", "dyn")


# --- bounds (issue 30, 1) -----------------------------------------------------------------

H100 = Device(
    name="gpu",
    driver=DriverName(DRA),
    attributes={"model": Attribute(AttributeKind.STRING, "H100")},
    capacity={"memory": "80Gi"},
)


@dataclass(frozen=True)
class Shape:
    name: str
    expression: str
    #: None: compiles, and matches H100 as `matches`; else the words of the refusal.
    refused: str | None
    matches: bool = False


DEEP = f"limit {MAX_DEPTH} (cel-go's maxRecursionDepth)"
SHAPES = [
    Shape("250-nots", "!" * 250 + "true", None, True),
    Shape("251-nots", "!" * 251 + "true", None, False),
    Shape("300-negations", "-" * 300 + "1 == 1", None, True),
    Shape("300-ors", " || ".join([f'device.driver == "{i}"' for i in range(300)]), None, False),
    Shape("250-ands", " && ".join(["true"] * 249) + f' && device.driver == "{DRA}"', None, True),
    Shape("240-plus", " + ".join(["1"] * 240) + " == 240", None, True),
    Shape("250-plus", " + ".join(["1"] * 250) + " > 0", DEEP),
    Shape("250-times", " * ".join(["1"] * 250) + " > 0", DEEP),
    Shape("250-minus", " - ".join(["1"] * 250) + " < 0", DEEP),
    Shape("250-equalities", "true" + " == true" * 250, DEEP),
    Shape("300-selections", f"{ATTRIBUTES}" + ".a" * 300 + " == 1", DEEP),
    Shape("300-indexes", f"{ATTRIBUTES}.model" + "[0]" * 300 + " == 1", DEEP),
    Shape("300-method-calls", 'quantity("1")' + ".add(1)" * 300 + ' == quantity("1")', DEEP),
    Shape("95-brackets", "(" * 95 + f'device.driver == "{DRA}"' + ")" * 95, None, True),
    Shape("95-lists", "[" * 95 + "1" + "]" * 95 + " != []", None, True),
    Shape("95-conditionals", "true ? false : " * 94 + "true", None, False),
    Shape("96-brackets", "(" * 96 + "true" + ")" * 96, "nest at most 95 levels deep"),
    Shape("20000-plus", "1" + "+1" * 20_000 + " > 0", f"limit {SELECTOR_MAX_BYTES}"),
    Shape("10KiB-of-multibyte", f'device.driver == "{"é" * 5200}"', f"limit {SELECTOR_MAX_BYTES}"),
]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_deep_or_long_selector_is_bounded_never_a_crash(shape: Shape) -> None:
    if shape.refused is not None:
        with pytest.raises(CelCompileError) as raised:
            compile_selector(shape.expression)
        assert shape.refused in raised.value.message
        return
    # Within the bounds the parser, the check, the estimate and the engine all take it.
    assert compile_selector(shape.expression).matches(H100) is shape.matches


def test_chains_are_shaped_as_cel_go_shapes_them() -> None:
    assert depth(parse("!" * 250 + "true")) == 1
    assert depth(parse("!" * 251 + "true")) == 2
    assert depth(parse(" || ".join(["true"] * 1024))) == 11  # balanced: log2(1024) + 1
    assert depth(parse(" + ".join(["1"] * 100))) == 100


def _nested(frames: int, expression: str) -> int:
    """`compile_selector(expression)` run with `frames` Python frames already on the stack."""
    if frames == 0:
        return compile_selector(expression).estimated_cost
    return _nested(frames - 1, expression)


def test_no_walker_recurses_past_what_it_allows() -> None:
    # The deepest tree admitted, with most of Python's stack already used by a caller: the
    # check and the estimate walk on an explicit stack, and chains parse in loops.
    assert _nested(900, " + ".join(["1"] * 240) + " > 0") == 240
    # Brackets recurse (~6 frames a level), at most 95 levels (the engine's parser's limit).
    assert _nested(300, "dyn(" * 95 + "true" + ")" * 95) == 95


def test_the_parser_bounds_hold_for_any_caller() -> None:
    with pytest.raises(SyntaxLimit, match=f"limit {MAX_CODE_POINTS}"):
        parse("true" + " || true" * (MAX_CODE_POINTS // 8))
    with pytest.raises(SyntaxLimit, match=f"limit {MAX_DEPTH}"):
        parse("1" + " + 1" * 20_000)
