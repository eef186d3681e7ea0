"""Issue 30 (done when): the CLI fuzz corpus covers scenario files too. A builtin scenario
with one value anywhere in it replaced by a hostile one (another type, a huge number, a
deep list), and arbitrary text, given to `gpufleet simulate`: an exit code of 0, 1 or 2 and
never a traceback."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from gpufleet.cli.main import app

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()


def assert_no_traceback(result: Result) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


QUICKSTART = Path(__file__).parents[2] / "src/gpufleet/sim/scenario/builtin/quickstart.yaml"
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.just("1000000h"),
    st.just([[[[[]]]]]),
    st.just({"a": {"b": {}}}),
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*at, i))
    return found


def _replaced(node: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    node[at[0]] = _replaced(node[at[0]], at[1:], value)
    return node


SOURCE = yaml.safe_load(QUICKSTART.read_text())
PATHS = _paths(SOURCE)[1:]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(at=st.sampled_from(PATHS), value=HOSTILE)
def test_a_scenario_with_a_hostile_value_never_ends_in_a_traceback(
    tmp_path: Path, at: tuple[Any, ...], value: Any
) -> None:
    broken = _replaced(yaml.safe_load(QUICKSTART.read_text()), at, value)
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    assert_no_traceback(runner.invoke(app, ["simulate", str(path)]))


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=st.text(max_size=200))
def test_arbitrary_text_as_a_scenario_never_ends_in_a_traceback(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_no_traceback(runner.invoke(app, ["simulate", str(path)]))


def _quickstart_with_namespace(tmp_path: Path, namespace: Any) -> Path:
    broken = yaml.safe_load(QUICKSTART.read_text())
    broken["manifests"][0]["metadata"]["namespace"] = namespace
    path = tmp_path / "ns.yaml"
    path.write_text(yaml.safe_dump(broken), encoding="utf-8")
    return path


def test_a_manifest_with_a_null_namespace_runs_in_the_default_one(tmp_path: Path) -> None:
    """Found by the fuzz above: `metadata.namespace: null` passed validation and the
    simulator's store refused it with a traceback; the API server reads it as unset."""
    path = _quickstart_with_namespace(tmp_path, None)
    result = runner.invoke(app, ["simulate", str(path), "-o", "json"])
    assert_no_traceback(result)
    assert result.exit_code == 0, result.output
    assert "default/" in result.output


def test_a_manifest_with_an_empty_namespace_is_refused_at_its_field(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", str(_quickstart_with_namespace(tmp_path, ""))])
    assert result.exit_code == 2
    assert "manifests[0].metadata.namespace: must be a DNS label" in result.output
