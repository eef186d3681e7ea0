"""DRA device selectors: the device binding, the Kubernetes quantity/semver libraries,
every evaluation-error path (always a non-match) and compile errors.

Scenarios 45-50 are from reference/modelplane-model.md section 5; library examples from
k8s.io/apiserver/pkg/cel/library (quantity.go, semverlib.go).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from gpufleet.cel import CelCompileError, CelError, CelSelector, compile_selector
from gpufleet.core.model import Attribute, AttributeKind, Device, DriverName, Selector

DRIVER = "gpu.nvidia.com"


def gpu(
    attributes: Mapping[str, Attribute] | None = None,
    capacity: Mapping[str, str] | None = None,
    driver: str = DRIVER,
) -> Device:
    return Device(
        name="gpu",
        driver=DriverName(driver),
        attributes=attributes
        if attributes is not None
        else {
            "productName": Attribute(AttributeKind.STRING, "NVIDIA H200"),
            "architecture": Attribute(AttributeKind.STRING, "Hopper"),
            "driverVersion": Attribute(AttributeKind.VERSION, "550.54.15"),
            "mig": Attribute(AttributeKind.BOOL, False),
            "index": Attribute(AttributeKind.INT, 3),
            "example.com/rack": Attribute(AttributeKind.STRING, "r7"),
        },
        capacity=capacity if capacity is not None else {"memory": "141Gi"},
    )


H200 = gpu()
A100 = gpu(capacity={"memory": "80Gi"})


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    expected: bool
    device: Device = field(default_factory=gpu)


MATCH_CASES = [
    # Scenario 45.
    Case(
        "45-141Gi-fits",
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("141Gi")) >= 0',
        True,
    ),
    Case(
        "45-80Gi-does-not",
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("141Gi")) >= 0',
        False,
        A100,
    ),
    # Scenario 46.
    Case(
        "46-semver-greater",
        f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("535.0.0"))',
        True,
    ),
    Case("46-isSemver-strict", 'isSemver("1.0")', False),
    Case("46-isSemver-normalize", 'isSemver("1.0", true)', True),
    # Scenario 49.
    Case("49-unknown-domain-not-in", '"other.com" in device.attributes', False),
    Case("known-domain-in", f'"{DRIVER}" in device.attributes', True),
    Case("qualified-domain-in", '"example.com" in device.attributes', True),
    # Scenario 50.
    Case("50-saturation", 'quantity("10Ei") == quantity("8Ei")', True),
    # The binding.
    Case("driver", f'device.driver == "{DRIVER}"', True),
    Case("string", f'device.attributes["{DRIVER}"].productName == "NVIDIA H200"', True),
    Case("bool", f'device.attributes["{DRIVER}"].mig == false', True),
    Case("int", f'device.attributes["{DRIVER}"].index > 2', True),
    Case("qualified-key", 'device.attributes["example.com"].rack == "r7"', True),
    Case("version-is-semver", f'device.attributes["{DRIVER}"].driverVersion.major() == 550', True),
    Case(
        "bare-key-splits-at-first-slash",
        'device.attributes["a.com"]["b/c"] == "x"',
        True,
        gpu(attributes={"a.com/b/c": Attribute(AttributeKind.STRING, "x")}),
    ),
    # Macros and operators.
    Case("has-true", f'has(device.attributes["{DRIVER}"].productName)', True),
    Case("has-false", f'has(device.attributes["{DRIVER}"].nope)', False),
    Case("in-list", f'device.attributes["{DRIVER}"].architecture in ["Hopper", "Blackwell"]', True),
    Case("and-or", f'device.driver == "x" || device.attributes["{DRIVER}"].index == 3', True),
    Case("exists", 'device.attributes.exists(d, d == "example.com")', True),
    Case("all", f'device.attributes["{DRIVER}"].all(k, k.size() > 0)', True),
    Case("ternary", 'device.driver.startsWith("gpu") ? true : false', True),
    Case("error-absorbed-by-or", f'device.attributes["{DRIVER}"].nope == 1 || true', True),
    Case("error-absorbed-by-and", f'device.attributes["{DRIVER}"].nope == 1 && false', False),
    # Quantity library (apiserver/pkg/cel/library/quantity.go examples).
    Case("q-equal-values", 'quantity("1Gi") == quantity("1024Mi")', True),
    Case("q-equal-decimal-binary", 'quantity("1Gi") == quantity("1073741824")', True),
    Case("q-not-equal", 'quantity("1G") == quantity("1Gi")', False),
    Case("q-compareTo-0", 'quantity("200M").compareTo(quantity("0.2G")) == 0', True),
    Case("q-compareTo-less", 'quantity("50M").compareTo(quantity("50Mi")) == -1', True),
    Case("q-isGreaterThan", 'quantity("150Mi").isGreaterThan(quantity("100Mi"))', True),
    Case("q-isLessThan", 'quantity("100M").isLessThan(quantity("50M"))', False),
    Case("q-isQuantity", 'isQuantity("1.3Gi") && !isQuantity("1,3G") && !isQuantity("Mi")', True),
    Case("q-isInteger", 'quantity("50k").isInteger() && !quantity("50.5").isInteger()', True),
    Case("q-asInteger", 'quantity("50k").asInteger() == 50000', True),
    Case(
        "q-asApproximateFloat", 'quantity("50k").sub(20000).asApproximateFloat() == 30000.0', True
    ),
    Case("q-sign", 'quantity("-1m").sign() == -1 && quantity("0").sign() == 0', True),
    Case("q-add-quantity", 'quantity("50k").add(quantity("20k")) == quantity("70k")', True),
    Case("q-add-int", 'quantity("50k").add(20) == quantity("50020")', True),
    Case(
        "q-chain",
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")',
        True,
    ),
    Case(
        "q-capacity-add",
        f'device.capacity["{DRIVER}"].memory.add(quantity("1Gi")) == quantity("142Gi")',
        True,
    ),
    # Semver library (apiserver/pkg/cel/library/semverlib.go examples).
    Case("s-compareTo-0", 'semver("1.2.3").compareTo(semver("1.2.3")) == 0', True),
    Case("s-compareTo-less", 'semver("1.2.3").compareTo(semver("2.0.0")) == -1', True),
    Case("s-compareTo-greater", 'semver("1.2.3").compareTo(semver("0.1.2")) == 1', True),
    Case("s-isLessThan", 'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    Case("s-parts", 'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2', True),
    Case("s-patch", 'semver("1.2.3").patch() == 3', True),
    Case("s-normalize", 'semver("v01.2", true) == semver("1.2.0")', True),
    Case("s-build-ignored", 'semver("1.0.0+a") == semver("1.0.0+b")', True),
]


def compiled(expression: str) -> CelSelector:
    """The selector, compiled with Kubernetes' cost limit (every case is within it)."""
    return compile_selector(expression)


@pytest.mark.parametrize("case", MATCH_CASES, ids=[c.name for c in MATCH_CASES])
def test_matches(case: Case) -> None:
    assert compiled(case.expression).matches(case.device) is case.expected


# Every evaluation error path: each expression compiles and each is a non-match, no exception.
ERROR_CASES = [
    # Scenario 47.
    Case("47-unknown-id", f'device.attributes["{DRIVER}"].nope == "x"', False),
    Case(
        "47-malformed-capacity",
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) >= 0',
        False,
        gpu(capacity={"memory": "141 Gi"}),
    ),
    Case(
        "47-two-part-version-attribute",
        f'device.attributes["{DRIVER}"].v.isGreaterThan(semver("0.1.0"))',
        False,
        gpu(attributes={"v": Attribute(AttributeKind.VERSION, "1.0")}),
    ),
    # Kubernetes fails every selector on a device with an unparsable version (DeviceMatches).
    Case(
        "bad-version-refuses-whole-device",
        f'device.driver == "{DRIVER}"',
        False,
        gpu(attributes={"v": Attribute(AttributeKind.VERSION, "1.0")}),
    ),
    Case(
        "bad-capacity-refuses-whole-device",
        "true",
        False,
        gpu(capacity={"memory": "Gi"}),
    ),
    Case(
        "mistyped-attribute",
        "true",
        False,
        gpu(attributes={"n": Attribute(AttributeKind.INT, "3")}),
    ),
    Case(
        "int-attribute-beyond-int64",
        "true",
        False,
        gpu(attributes={"n": Attribute(AttributeKind.INT, 2**63)}),
    ),
    Case(
        "duplicate-qualified-key",
        "true",
        False,
        gpu(
            attributes={
                "model": Attribute(AttributeKind.STRING, "a"),
                f"{DRIVER}/model": Attribute(AttributeKind.STRING, "b"),
            }
        ),
    ),
    # Scenario 48: non-bool results, no truthiness (an attribute is dyn: it type-checks).
    Case("48-string-result", f'device.attributes["{DRIVER}"].productName', False),
    # Unknown domain: indexing it is an error here (an empty map in Kubernetes).
    Case("unknown-domain-lookup", 'device.attributes["other.com"].x == 1', False),
    # Library errors on values known only when evaluating (a constant argument, a wrong
    # argument type and a non-bool result are refused when compiling: tests/cel/test_cel_check.py).
    Case("bad-quantity-from-device", "quantity(device.driver).sign() == 1", False),
    Case("bad-semver-from-device", "semver(device.driver).major() == 1", False),
    Case(
        "compare-quantity-with-version-attribute",
        f'quantity("1").compareTo(device.attributes["{DRIVER}"].driverVersion) == 0',
        False,
    ),
    Case("asInteger-fraction", 'quantity("50.5").asInteger() == 50', False),
    Case("asInteger-overflow", 'quantity("10E").asInteger() > 0', False),
    Case(
        "semver-normalize-from-device",
        f'semver("1.0", device.attributes["{DRIVER}"].productName).major() == 1',
        False,
    ),
    Case("major-beyond-int64", 'semver("9223372036854775808.0.0").major() > 0', False),
    Case(
        "string-attribute-plus-int",
        f'device.attributes["{DRIVER}"].productName + 1 > 0',
        False,
    ),
    # Engine errors.
    Case("division-by-zero", "1 / 0 == 1", False),
    Case("int-overflow", "9223372036854775807 + 1 > 0", False),
    Case("index-out-of-range", "[1][5] == 1", False),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.name for c in ERROR_CASES])
def test_evaluation_errors_are_non_matches(case: Case) -> None:
    assert compiled(case.expression).matches(case.device) is False


def test_errors_do_not_write_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert compile_selector("quantity(device.driver).sign() == 1").matches(H200) is False
    assert capsys.readouterr() == ("", "")


@dataclass(frozen=True)
class CompileErrorCase:
    name: str
    expression: str
    message: str


COMPILE_ERROR_CASES = [
    CompileErrorCase(
        "syntax",
        "1 +* 2",
        "ERROR: <input>:1:4: Syntax error: extraneous input '*' expecting {'[', '{', '(', '.',"
        " '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES,"
        " IDENTIFIER}\n| 1 +* 2\n| ...^",
    ),
    CompileErrorCase(
        "unknown-variable",
        'dev.driver == "x"',
        "ERROR: <input>:1:1: undeclared reference to 'dev'\n| dev.driver == \"x\"\n| ^",
    ),
    CompileErrorCase(
        "unknown-function",
        'device.driver == "x" && foo(1)',
        "ERROR: <input>:1:25: undeclared reference to 'foo'\n"
        '| device.driver == "x" && foo(1)\n'
        "| ........................^",
    ),
    CompileErrorCase(
        "unknown-method",
        'device.driver.lowerAscii() == "x"',
        "ERROR: <input>:1:15: undeclared reference to 'lowerAscii'\n"
        '| device.driver.lowerAscii() == "x"\n'
        "| ..............^",
    ),
    CompileErrorCase(
        "free-variable-beside-macro",
        "[1].all(x, x > 0) && y",
        "ERROR: <input>:1:22: undeclared reference to 'y'\n| [1].all(x, x > 0) && y\n| .....................^",
    ),
    CompileErrorCase(
        "second-line",
        "true &&\n  bogus",
        "ERROR: <input>:2:3: undeclared reference to 'bogus'\n|   bogus\n| ..^",
    ),
    CompileErrorCase(
        "cel-bind",
        'cel.bind(d, device.attributes["x"], d.a)',
        "ERROR: <input>:1:1: cel.bind (cel-go's bindings extension) is not supported\n"
        '| cel.bind(d, device.attributes["x"], d.a)\n'
        "| ^",
    ),
]


@pytest.mark.parametrize("case", COMPILE_ERROR_CASES, ids=[c.name for c in COMPILE_ERROR_CASES])
def test_compile_errors(case: CompileErrorCase) -> None:
    with pytest.raises(CelCompileError) as raised:
        compile_selector(case.expression)
    assert (raised.value.message, raised.value.expression, str(raised.value)) == (
        case.message,
        case.expression,
        case.message,
    )
    assert isinstance(raised.value, CelError)


def test_selector_satisfies_the_core_protocol() -> None:
    selector: Selector = compile_selector('device.driver == "gpu.nvidia.com"')
    assert (selector.expression, selector.matches(H200)) == (
        'device.driver == "gpu.nvidia.com"',
        True,
    )


def test_compiles_once_per_expression() -> None:
    assert compile_selector("true") is compile_selector("true")


def test_equal_devices_share_results_and_different_devices_do_not() -> None:
    selector: CelSelector = compile_selector(
        f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("100Gi"))'
    )
    twin = Device(
        name="other-name",
        driver=DriverName(DRIVER),
        count=8,
        attributes=dict(H200.attributes),
        capacity={"memory": "141Gi"},
    )
    assert [selector.matches(d) for d in (H200, twin, A100, H200)] == [True, True, False, True]


def test_attribute_kinds_are_part_of_the_cache_key() -> None:
    selector = compile_selector('device.attributes["x.com"].a == 1')
    as_int = gpu(attributes={"x.com/a": Attribute(AttributeKind.INT, 1)})
    as_bool = gpu(attributes={"x.com/a": Attribute(AttributeKind.BOOL, True)})
    assert [selector.matches(as_int), selector.matches(as_bool)] == [True, False]
