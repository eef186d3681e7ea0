"""The cost budget of DRA selectors: the API server's estimate (cel-go's checker cost with the
DRA device schema's bounds), the runtime bound, and refusal at validation with the field path.

The golden costs are Kubernetes' own (k8s.io/dynamic-resource-allocation/cel compile_test.go,
`expectCost`), so a change of the estimator that moves one of them is a change of what the API
server would accept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.cel.cost import SELECTOR_COST_LIMIT, estimate_cost
from gpufleet.cel.syntax import SyntaxUnsupported, parse
from gpufleet.cli.main import app
from gpufleet.core.model import Attribute, AttributeKind, Device, DriverName

DRA = "dra.example.com"


@dataclass(frozen=True)
class CostCase:
    name: str
    expression: str
    cost: int


KUBERNETES_COSTS = [
    CostCase(
        "runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        6,
    ),
    CostCase(
        "runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        6,
    ),
    CostCase("domain-check", '"no-such-domain" in device.attributes', 3),
    CostCase("empty-driver-name", 'device.driver == ""', 2),
    CostCase("real-driver-name", f'device.driver == "{DRA}"', 4),
    CostCase("driver-name-qualifier", f'device.attributes["{DRA}"].name', 4),
    CostCase("driver-name-qualifier-map-lookup", f'device.attributes["{DRA}"]["name"]', 4),
    CostCase("int", f'device.attributes["{DRA}"].name > 0', 5),
    CostCase("string", f'device.attributes["{DRA}"].name == "fish"', 5),
    CostCase("version", f'device.attributes["{DRA}"].name.isGreaterThan(semver("0.0.1"))', 6),
    CostCase("quantity", f'device.capacity["{DRA}"].name.isGreaterThan(quantity("1Ki"))', 6),
    CostCase(
        "check-positive",
        f'"name" in device.capacity["{DRA}"] && '
        f'device.capacity["{DRA}"].name.isGreaterThan(quantity("1Ki"))',
        10,
    ),
    CostCase(
        "check-negative",
        f'!("name" in device.capacity["{DRA}"]) || '
        f'device.capacity["{DRA}"].name.isGreaterThan(quantity("1Ki"))',
        11,
    ),
    CostCase(
        "all",
        f"""
device.capacity["{DRA}"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["{DRA}"].bool &&
device.attributes["{DRA}"].int > 0 &&
device.attributes["{DRA}"].string == "fish" &&
device.attributes["{DRA}"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["{DRA}"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["{DRA}"]["bool"] &&
device.attributes["{DRA}"]["int"] > 0 &&
device.attributes["{DRA}"]["string"] == "fish" &&
device.attributes["{DRA}"]["version"].isGreaterThan(semver("0.0.1"))
""",
        52,
    ),
    CostCase(
        "many",
        f'device.attributes["{DRA}"].a && device.attributes["{DRA}"].b && '
        f'device.attributes["{DRA}"].c',
        12,
    ),
    CostCase("true", "true", 0),
]


@pytest.mark.parametrize("case", KUBERNETES_COSTS, ids=[c.name for c in KUBERNETES_COSTS])
def test_the_estimate_is_the_api_servers(case: CostCase) -> None:
    assert compile_selector(case.expression).estimated_cost == case.cost


LIST = "[0,1,2,3,4,5,6,7,8,9]"


def nested_maps(depth: int) -> str:
    """`LIST.map(a, LIST.map(b, ... 0)).size() > 0`, `depth` maps deep."""
    expression = "0"
    for variable in "abcdefgh"[:depth]:
        expression = f"{LIST}.map({variable}, {expression})"
    return f"{expression}.size() > 0"


def test_a_nested_map_bomb_is_refused_with_its_estimate_and_the_limit() -> None:
    # 222 characters; evaluated, this runs for minutes while holding the GIL.
    bomb = nested_maps(7)
    with pytest.raises(CelCompileError) as refused:
        compile_selector(bomb)
    assert refused.value.message == (
        "too complex, exceeds cost limit: estimated cost 156666653 exceeds budget 1000000 "
        "by factor of 156.7x"
    )
    # Each map over 10 elements costs 10 x (the body + 12) + 21: nesting multiplies by 10.
    costs = [estimate_cost(parse(nested_maps(depth))) for depth in range(1, 8)]
    assert costs == [143, 1553, 15653, 156653, 1566653, 15666653, 156666653]


def test_within_the_budget_a_selector_keeps_kubernetes_semantics() -> None:
    selector = compile_selector(nested_maps(4))  # 156,653: within the limit
    assert selector.estimated_cost == 156653
    device = Device(name="gpu", driver=DriverName(DRA), attributes={}, capacity={})
    assert selector.matches(device) is True


def test_ordinary_selectors_cost_little() -> None:
    for expression in (
        'device.driver == "gpu.nvidia.com"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("16Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
        'device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (H|B)[0-9]+")',
        'device.attributes.exists(d, d == "example.com")',
        'device.attributes["gpu.nvidia.com"].all(k, k.size() > 0)',
    ):
        assert 0 < compile_selector(expression).estimated_cost < 1_000, expression


def test_an_unbounded_size_is_an_unbounded_cost() -> None:
    # cel-go cannot bound the size of a value returned by quantity(): `!=` of two is priced by
    # the smaller size, unbounded; the API server refuses it.
    with pytest.raises(CelCompileError, match="estimated cost is unbounded"):
        compile_selector('quantity("1Gi") != quantity("1024Mi")')
    assert compile_selector('quantity("1Gi") != quantity("1024Mi")', cost_limit=None)


def test_equality_of_quantities_and_versions_costs_one() -> None:
    # The Kubernetes library prices `==` of two quantities or two versions at 1 (plus the
    # arguments), so the usual capacity and version selectors are admitted.
    for expression, cost in (
        ('quantity("1Gi") == quantity("1024Mi")', 3),
        ('device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")', 6),
        ('semver("1.0.0") == semver("1.0.0")', 3),
    ):
        assert compile_selector(expression).estimated_cost == cost, expression


def test_this_engines_quadratic_list_building_is_bounded_too() -> None:
    big = "[" + ",".join(str(i % 10) for i in range(1000)) + "]"
    expression = f"{big}.map(x, x).size() > 0"
    assert estimate_cost(parse(expression)) == 13023  # Kubernetes would take it
    with pytest.raises(CelCompileError, match=r"on this engine .* exceeds budget 1000000"):
        compile_selector(expression)
    small = f"{LIST}.map(x, x).size() > 0"
    assert compile_selector(small).estimated_cost == 153  # 10 x (1 + 12) + 21 + 2


def test_a_device_beyond_the_schemas_bounds_matches_nothing() -> None:
    def device(attributes: dict[str, Attribute], driver: str = DRA) -> Device:
        return Device(name="gpu", driver=DriverName(driver), attributes=attributes, capacity={})

    anything = compile_selector("true")
    text = Attribute(AttributeKind.STRING, "x" * 64)
    assert anything.matches(device({"a": text}))
    assert not anything.matches(device({"a": Attribute(AttributeKind.STRING, "x" * 65)}))
    assert anything.matches(device({f"a{i}": text for i in range(32)}))
    assert not anything.matches(device({f"a{i}": text for i in range(33)}))
    assert not anything.matches(device({"i" * 33: text}))
    assert not anything.matches(device({}, driver="d" * 64))


def test_syntax_the_estimator_cannot_read_is_refused() -> None:
    assert cel.compile("Foo{a: 1}")  # the engine parses message construction; we do not
    with pytest.raises(CelCompileError, match="cannot estimate the cost"):
        compile_selector("Foo{a: 1} == 1")


def test_validate_refuses_the_bomb_at_its_field_path(tmp_path: Path) -> None:
    manifest = tmp_path / "bomb.yaml"
    manifest.write_text(
        f"""apiVersion: gpufleet.io/v1alpha1
kind: ModelDeployment
metadata: {{name: bomb, namespace: ml-team}}
spec:
  replicas: 1
  template:
    spec:
      engines:
      - name: engine
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - name: gpu
              count: 1
              selectors:
              - cel: '{nested_maps(7)}'
          template:
            spec:
              containers:
              - {{name: engine, image: vllm/vllm-openai}}
"""
    )
    result = CliRunner().invoke(app, ["validate", str(manifest)])
    assert result.exit_code == 1  # an invalid object (2 is for unusable input)
    assert (
        "✗ ModelDeployment ml-team/bomb: spec.template.spec.engines[0].members[0].nodeSelector"
        ".devices[0].selectors[0].cel: does not compile: too complex, exceeds cost limit: "
        "estimated cost 156666653 exceeds budget 1000000 by factor of 156.7x"
    ) in result.output


# --- the parser reads whatever the engine parses ----------------------------------------------

_ATOMS = st.sampled_from(
    [
        "device.driver",
        f'device.attributes["{DRA}"].a',
        f'device.capacity["{DRA}"].m',
        "1",
        "-2",
        "0x1F",
        "3u",
        "2.5",
        "1e3",
        '"s"',
        "'q'",
        'r"a\\\\b"',
        'b"by"',
        '"""t"""',
        "true",
        "null",
        "[1, 2, 3]",
        '{"k": 1}',
        '{"k": 1,}',
        "[1,]",
        'quantity("1Gi")',
        "device.attributes",
    ]
)
_BINARY = st.sampled_from(["+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||", "in"])


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, _BINARY, children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        children.map(lambda c: f"!({c})"),
        children.map(lambda c: f"-({c})"),
        children.map(lambda c: f"({c}).size()"),
        children.map(lambda c: f"size({c})"),
        children.map(lambda c: f"[{c}, {c}]"),
        children.map(lambda c: f"[{c}][0]"),
        st.tuples(st.sampled_from(["all", "exists", "exists_one", "map", "filter"]), children).map(
            lambda t: f"[1, 2].{t[0]}(x, {t[1]})"
        ),
        children.map(lambda c: f"[1].map(x, x > 0, {c})"),
        children.map(lambda c: f"has(device.attributes.{re.sub('[^a-z]', '', c)[:5] or 'a'})"),
        children.map(lambda c: f'({c}).startsWith("a")'),
        children.map(lambda c: f'({c}).matches("^a+$")'),
        children.map(lambda c: f"dyn({c})"),
    )


@settings(max_examples=300, deadline=None)
@given(st.recursive(_ATOMS, _compose, max_leaves=12))
def test_every_expression_the_engine_parses_gets_an_estimate(expression: str) -> None:
    try:
        cel.compile(expression)
    except ValueError:
        return  # not CEL: the engine's own error is reported first
    try:
        cost = estimate_cost(parse(expression))
    except SyntaxUnsupported as error:
        pytest.fail(f"{expression!r}: {error}")
    assert cost >= 0
    # A selector is refused for its cost or its types, never for an estimate that failed.
    try:
        compile_selector(expression)
    except CelCompileError as error:
        assert "cannot estimate" not in error.message


def test_the_limit_is_kubernetes() -> None:
    assert SELECTOR_COST_LIMIT == 1_000_000  # resourceapi.CELSelectorExpressionMaxCost
