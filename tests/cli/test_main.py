"""The command line's edges: version, completion, usage lines, wrong orders, bad flags and paths,
kubeconfig errors, the `--now` hint, YAML output and terminal wrapping. Every error path is
run as a user runs it and must end in one message and exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner, Result

from gpufleet.cli.main import app
from gpufleet.cli.paths import write_problem
from gpufleet.cli.render import WORD_MAX_CHARS, Printer, Table, column_widths

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ONE_NODE = EXAMPLES / "one-node"
NOW = "2026-11-29T10:00:05Z"
#: Plain text, and wide enough that rich never breaks a message inside a word.
PLAIN_ENV: dict[str, str | None] = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "COLUMNS": "1000"}
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

runner = CliRunner()


def invoke(*args: str | Path, env: dict[str, str | None] | None = None) -> Result:
    result = runner.invoke(app, [str(a) for a in args], env={**PLAIN_ENV, **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def words(result: Result) -> str:
    """The output with rich's error box and line wrapping undone."""
    return " ".join(result.output.replace("│", " ").split())


def usage_error(result: Result, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    text = words(result)
    for part in expected:
        assert part in text, text


# --- version, `python -m`, completion, usage lines ------------------------------------------


def test_version_is_the_package_version() -> None:
    result = invoke("--version")
    assert (result.exit_code, result.stdout) == (0, f"gpufleet {metadata.version('gpufleet')}\n")


def test_python_dash_m_runs_the_same_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"gpufleet {metadata.version('gpufleet')}\n")


#: A Python type shown as a placeholder (`<bool>`, `<list[Path]>`, `<int range>`).
PYTHON_TYPE = re.compile(r"<(str|int|float|bool|Path|path|datetime|list\[)[^>]*>")
#: What `gpufleet --help` must not import (each costs a large share of a start-up).
HEAVY = ("pydantic", "cel", "yaml", "rich", "lightkube", "prometheus_client", "gpufleet.api")


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_the_root_help_and_version_import_no_command(args: list[str]) -> None:
    """Lazy commands (cli/main.py): the list of commands and --version load no command's
    module, so none of what the commands import."""
    code = (
        "import sys\n"
        "from gpufleet.cli.main import app\n"
        f"try:\n    app({args!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        f"or any(m.startswith(h + '.') or m == h for h in {HEAVY!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_each_command_summary_is_its_help_and_examples_are_shown() -> None:
    """`COMMANDS` (what `gpufleet --help` lists without loading) agrees with each command."""
    from gpufleet.cli.main import COMMANDS, load

    root = invoke("--help")
    for name, entry in COMMANDS.items():
        command = load(name)
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert first.startswith(entry.summary.rstrip(".").split(":")[0]), (name, first)
        assert name in root.stdout
        own = invoke(name, "--help")
        assert own.exit_code == 0
        assert not PYTHON_TYPE.search(own.stdout), own.stdout
        for example in entry.examples:
            assert example.split(" | ")[0] in " ".join(own.stdout.split()), (name, example)
    completed = invoke(
        "",
        env={"_GPUFLEET_COMPLETE": "complete_bash", "COMP_WORDS": "gpufleet pl", "COMP_CWORD": "1"},
    )
    assert completed.stdout.split() == ["plain,plan"] or "plan" in completed.stdout


def test_shell_completion_script_is_offered() -> None:
    result = invoke("--show-completion", "bash", env={"SHELL": "/bin/bash"})
    assert result.exit_code == 0
    assert "_gpufleet_completion" in result.stdout


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("validate", "gpufleet validate [OPTIONS] FILE_OR_DIR..."),
        ("plan", "gpufleet plan [OPTIONS] FILE_OR_DIR..."),
        ("explain", "gpufleet explain [OPTIONS] NAMESPACE/DEPLOYMENT FILE_OR_DIR..."),
        ("simulate", "gpufleet simulate [OPTIONS] [SCENARIO]"),
    ],
)
def test_usage_lines_spell_arguments_the_posix_way(command: str, usage: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    (line,) = [line.strip() for line in result.stdout.splitlines() if "Usage:" in line]
    assert line.startswith(f"Usage: {usage}")
    assert "{" not in line and "[[" not in line


def test_a_command_after_its_arguments_gets_the_order() -> None:
    result = invoke(ONE_NODE, "plan", "--now", NOW)
    usage_error(
        result,
        f"No such command '{ONE_NODE}'",
        f"The command comes first: gpufleet plan {ONE_NODE} --now {NOW}",
    )


def test_an_unknown_command_still_says_so() -> None:
    usage_error(invoke("plna", ONE_NODE), "No such command 'plna'")


# --- daemon flags and kubeconfigs --------------------------------------------------------------


def daemon(*args: str | Path, env: dict[str, str | None] | None = None) -> Result:
    return invoke(*args, "--metrics-address", "0", "--health-address", "0", env=env)


@pytest.mark.parametrize("command", [["controller"], ["agent", "--cluster", "a"]])
def test_an_unknown_log_level_is_a_usage_error(command: list[str]) -> None:
    usage_error(daemon(*command, "--log-level", "loud"), "'--log-level'", "'loud'")


KUBECONFIGS = {
    "not YAML": "clusters: [\n",
    "not a kubeconfig": "just a string\n",
    "not a kubeconfig (no 'clusters' entry)": "contexts: []\n",
    "Context 'x' not found": "clusters: []\ncontexts: []\ncurrent-context: x\n",
    "No current context set": "clusters: []\ncontexts: []\n",
    "cannot build a Kubernetes client from it: Missing user": (
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: c}}]\ncurrent-context: x\n"
    ),
}


@pytest.mark.parametrize("problem", list(KUBECONFIGS))
@pytest.mark.parametrize("flag", ["--kubeconfig", "--hub-kubeconfig"])
def test_a_broken_kubeconfig_is_one_message(tmp_path: Path, problem: str, flag: str) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIGS[problem])
    if flag == "--kubeconfig":
        result = daemon("controller", flag, path)
    else:  # the agent's local kubeconfig is fine up to building a client: the hub's is not
        local = tmp_path / "local"
        local.write_text(KUBECONFIGS["cannot build a Kubernetes client from it: Missing user"])
        local.write_text(local.read_text().replace("{cluster: c}", "{cluster: c, user: u}"))
        local.write_text(local.read_text() + "users: [{name: u, user: {token: t}}]\n")
        result = daemon("agent", "--cluster", "a", "--kubeconfig", local, flag, path)
    usage_error(result, f"'{flag}'", problem)


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    usage_error(
        daemon("controller", "--kubeconfig", tmp_path / "nope"),
        f"{tmp_path}/nope: no such file",
    )


@pytest.mark.skipif(SERVICE_ACCOUNT.exists(), reason="runs inside a pod: in-cluster config works")
def test_no_kubeconfig_anywhere_says_what_was_tried(tmp_path: Path) -> None:
    unset = daemon("controller", env={"HOME": str(tmp_path), "KUBECONFIG": None})
    usage_error(
        unset,
        "no usable kubeconfig: tried in-cluster (no service account), $KUBECONFIG (unset), "
        "~/.kube/config (no such file)",
    )
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    usage_error(
        daemon("controller", env={"HOME": str(tmp_path), "KUBECONFIG": str(broken)}),
        f"tried in-cluster (no service account), $KUBECONFIG={broken} (not YAML)",
    )


# --- output paths -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["simulate", "--report"], "'--report'"), (["bench", "--quick", "--write"], "'--write'")],
)
def test_an_unwritable_report_path_fails_before_the_run(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    result = invoke(*args, tmp_path / "missing" / "report.html")
    usage_error(result, flag, f"directory {tmp_path}/missing does not exist")
    assert result.stdout == ""  # nothing ran


def test_write_problems(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert write_problem(tmp_path / "new.html") is None
    assert write_problem(tmp_path / "file") is None  # overwritten
    assert write_problem(tmp_path) == f"{tmp_path} is a directory"
    assert write_problem(tmp_path / "a" / "b") == f"directory {tmp_path}/a does not exist"
    assert write_problem(tmp_path / "file" / "b") == f"{tmp_path}/file is not a directory"
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert write_problem(locked / "x") == f"directory {locked} is not writable"


# --- plan and explain ---------------------------------------------------------------------


def test_plan_without_now_on_old_observations_suggests_now() -> None:
    result = invoke("plan", ONE_NODE)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "note: 1 pool read as Expired at the current time (newest observedAt "
        "2026-11-29T10:00:00Z); to schedule as of the manifests, pass --now 2026-11-29T10:00:05Z"
    ]
    assert invoke("plan", ONE_NODE, "--now", NOW).stderr == ""  # a time given: no note
    assert "pass --now" in invoke("explain", "ml-team/phi-4", ONE_NODE).stderr


@pytest.mark.parametrize(
    "args",
    [["plan", ONE_NODE], ["explain", "ml-team/qwen-2-7b", ONE_NODE]],
    ids=["plan", "explain"],
)
def test_yaml_output_is_the_json_data(args: list[str | Path]) -> None:
    as_json = invoke(*args, "--now", NOW, "-o", "json")
    as_yaml = invoke(*args, "--now", NOW, "-o", "yaml")
    assert (as_json.exit_code, as_yaml.exit_code) == (0, 0)
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    assert as_yaml.stdout.startswith("now: '2026-11-29T10:00:05Z'\n")


def test_explain_takes_a_namespace_flag() -> None:
    by_flag = invoke("explain", "qwen-2-7b", "-n", "ml-team", ONE_NODE, "--now", NOW)
    by_key = invoke("explain", "ml-team/qwen-2-7b", ONE_NODE, "--now", NOW)
    assert by_flag.exit_code == 0
    assert by_flag.stdout == by_key.stdout
    usage_error(
        invoke("explain", "ml-team/qwen-2-7b", "-n", "other", ONE_NODE),
        "'--namespace'",
        "'ml-team/qwen-2-7b' names namespace 'ml-team' but -n says 'other'",
    )


def test_explain_with_the_deployment_last_gets_the_order() -> None:
    usage_error(
        invoke("explain", ONE_NODE, "ml-team/qwen-2-7b", "--now", NOW),
        f"the deployment comes first: gpufleet explain ml-team/qwen-2-7b {ONE_NODE}",
    )


def test_plan_given_a_deployment_points_at_explain() -> None:
    result = invoke("plan", "ml-team/qwen-2-7b", ONE_NODE, "--now", NOW)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "note: plan takes no deployment; to explain ml-team/qwen-2-7b: "
        f"gpufleet explain ml-team/qwen-2-7b {ONE_NODE}",
        "✗ ml-team/qwen-2-7b: no such file or directory",
        "1 invalid (1 error): nothing scheduled",
    ]


# --- a terminal ---------------------------------------------------------------------------


def terminal_text(width: int, *, lines: list[str], table: Table | None = None) -> str:
    console = Console(force_terminal=True, width=width, record=True, color_system=None)
    printer = Printer(console)
    for line in lines:
        printer.line(line, indent=2)
    if table is not None:
        printer.table(table)
    return console.export_text()


def test_a_terminal_wraps_lines_at_spaces_under_their_indent() -> None:
    text = terminal_text(30, lines=["alpha beta gamma delta epsilon zeta eta theta"])
    assert text.splitlines() == ["  alpha beta gamma delta", "  epsilon zeta eta theta"]


def test_a_table_too_wide_for_its_words_becomes_records() -> None:
    table = Table(("CLUSTER", "REASON"), (("solo", "InsufficientGPU: " + "x" * 25),))
    assert [line.rstrip() for line in terminal_text(30, lines=[], table=table).splitlines()] == [
        "CLUSTER  solo",
        "REASON   InsufficientGPU:",
        "         xxxxxxxxxxxxxxxxxxxxx",
        "         xxxx",
        "",
    ]


CELL = st.lists(
    st.text(alphabet="abcdefghij=_", min_size=1, max_size=40), min_size=1, max_size=6
).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.lists(st.text(alphabet="ABC", min_size=1, max_size=8), min_size=n, max_size=n),
            st.lists(st.lists(CELL, min_size=n, max_size=n), min_size=1, max_size=4),
        )
    ),
    st.integers(20, 200),
)
def test_column_widths_fit_and_never_split_a_word(
    shape: tuple[list[str], list[list[str]]], available: int
) -> None:
    headers, rows = shape
    table = Table(tuple(headers), tuple(tuple(r) for r in rows))
    widths = column_widths(table, available)
    columns = list(zip(table.headers, *table.rows, strict=True))
    longest = [max(len(w) for cell in col for w in cell.split()) for col in columns]
    needed = sum(min(w, WORD_MAX_CHARS) for w in longest) + 3 * (len(columns) - 1)
    if widths is None:
        assert needed > available
        return
    assert sum(widths) + 3 * (len(widths) - 1) <= available
    for width, word in zip(widths, longest, strict=True):
        assert width >= min(word, WORD_MAX_CHARS)


# --- docs/operations.md's troubleshooting command -------------------------------------------

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def kubectl_dump(path: Path) -> None:
    """The examples as `kubectl get ... -A -o yaml` prints them: one List, server metadata."""
    items = []
    for source in sorted(ONE_NODE.glob("*.yaml")):
        for body in yaml.safe_load_all(source.read_text()):
            if not body:
                continue
            body["metadata"].update(
                uid="0b7c4e0e-0000-4000-8000-000000000001",
                resourceVersion="4711",
                generation=1,
                creationTimestamp="2026-11-29T09:00:00Z",
                managedFields=[{"manager": "kubectl", "operation": "Apply"}],
            )
            items.append(body)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))


def test_the_documented_troubleshooting_command_works(tmp_path: Path) -> None:
    documented = "$ gpufleet explain <deployment> -n <namespace> fleet.yaml"
    assert documented in OPERATIONS.read_text()
    kubectl_dump(tmp_path / "fleet.yaml")
    result = invoke("explain", "qwen-2-7b", "-n", "ml-team", tmp_path / "fleet.yaml", "--now", NOW)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[2] == "ml-team/qwen-2-7b: desired 1, placed 0, shortfall 1"
