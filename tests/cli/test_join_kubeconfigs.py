"""Issue 30.4: `gpufleet join` on hostile kubeconfigs: one clear error each (exit 2, naming the
field), never a traceback, never a hang; an insecure hub only with `--allow-insecure-hub`.

The corpus runs in one child process (`_RUNNER`), one case after another; the child's timeout
is only the hang detector (which case hung is the first one without a result line).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli.join_kubeconfig import MAX_KUBECONFIG_BYTES

pytestmark = pytest.mark.timeout(600)

# Nothing listens on port 9: a kubeconfig that passes every check fails to connect (exit 1).
BASE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "hub", "cluster": {"server": "https://127.0.0.1:9"}},
        {"name": "member", "cluster": {"server": "https://127.0.0.1:9"}},
    ],
    "users": [{"name": "admin", "user": {"token": "t"}}],
    "contexts": [
        {"name": "hub", "context": {"cluster": "hub", "user": "admin"}},
        {"name": "member", "context": {"cluster": "member", "user": "admin"}},
    ],
    "current-context": "hub",
}

_RUNNER = """
import json, sys
from typer.testing import CliRunner
from gpufleet.cli.main import app
runner = CliRunner()
for line in sys.stdin:
    case = json.loads(line)
    result = runner.invoke(app, case["args"])
    ok = result.exception is None or isinstance(result.exception, SystemExit)
    print(json.dumps({"name": case["name"], "code": result.exit_code, "output": result.output,
                      "raised": None if ok else repr(result.exception)}), flush=True)
"""


def args(path: Path, *extra: str) -> list[str]:
    return [
        "join",
        "--cluster",
        "gke-1",
        "--pool",
        "l4=l4-4x:1",
        "--hub-kubeconfig",
        str(path),
        "--hub-context",
        "hub",
        "--member-kubeconfig",
        str(path),
        "--member-context",
        "member",
        *extra,
    ]


def run_corpus(cases: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Each case's exit code and output, from one child process with a hang detector."""
    lines = "".join(json.dumps({"name": n, "args": a}) + "\n" for n, a in cases.items())
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER],
            input=lines,
            capture_output=True,
            text=True,
            timeout=540,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        finished = {json.loads(line)["name"] for line in out.splitlines()}
        hung = [n for n in cases if n not in finished]
        pytest.fail(f"gpufleet join hung on {hung[:1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(results) == set(cases)
    return results


def flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def write(path: Path, config: object) -> Path:
    path.write_text(yaml.safe_dump(config) if not isinstance(config, str) else config)
    return path


def with_cluster(**fields: object) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    config["clusters"][0]["cluster"].update(fields)
    return config


def named_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Hand-written hostile kubeconfigs and the words their one error must contain."""
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    huge = tmp / "huge"
    with huge.open("wb") as f:
        f.write(b"#" * (60 * 1024 * 1024))
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    ca_fifo = with_cluster(**{"certificate-authority": str(fifo)})
    cases = {
        "fifo": (fifo, "not a regular file"),
        "dev-zero": (Path("/dev/zero"), "not a regular file"),
        "directory": (tmp, "Is a directory"),
        "huge": (huge, f"larger than {MAX_KUBECONFIG_BYTES:,} bytes"),
        "alias-bomb": (write(tmp / "bomb", bomb), "aliasNodes"),
        "deep": (write(tmp / "deep", "a: " + "[" * 5000 + "]" * 5000), "depth"),
        "not-utf8": (write(tmp / "latin", ""), "not UTF-8"),
        "scalar": (write(tmp / "scalar", "3\n"), "a kubeconfig is a mapping"),
        "two-docs": (write(tmp / "two", "a: 1\n---\nb: 2\n"), "one YAML document expected"),
        "bad-yaml": (write(tmp / "bad", "a: [\n"), "malformed YAML"),
        "dup-key": (write(tmp / "dup", "a: 1\na: 2\n"), "duplicate"),
        "no-clusters": (write(tmp / "noc", {"contexts": []}), "clusters: required"),
        "server-int": (write(tmp / "si", with_cluster(server=3)), "clusters[0].cluster.server"),
        "server-missing": (
            write(
                tmp / "sm",
                {**BASE, "clusters": [{"name": "hub", "cluster": {}}, BASE["clusters"][1]]},
            ),
            "clusters[0].cluster.server: required",
        ),
        "server-not-url": (write(tmp / "snu", with_cluster(server="hub:6443")), "not an http://"),
        "server-bad-port": (
            write(tmp / "sbp", with_cluster(server="https://h:99999")),
            "not a URL",
        ),
        "server-space": (write(tmp / "ss", with_cluster(server="https://h /x")), "spaces"),
        "insecure": (
            write(tmp / "ins", with_cluster(**{"insecure-skip-tls-verify": True})),
            "insecure-skip-tls-verify: the hub's certificate would not be checked",
        ),
        "plain-http": (
            write(tmp / "http", with_cluster(server="http://127.0.0.1:9")),
            "plain http://",
        ),
        "ca-fifo": (write(tmp / "cafifo", ca_fifo), "certificate-authority"),
        "ca-missing": (
            write(tmp / "cam", with_cluster(**{"certificate-authority": str(tmp / "nope")})),
            "No such file",
        ),
        "ca-data-not-base64": (
            write(tmp / "cab", with_cluster(**{"certificate-authority-data": "!!"})),
            "not usable",
        ),
        "context-dangling": (
            write(tmp / "cd", {**BASE, "clusters": BASE["clusters"][1:]}),
            "cluster 'hub' not found",
        ),
        "user-dangling": (write(tmp / "ud", {**BASE, "users": []}), "user 'admin' not found"),
        "current-context-list": (
            write(tmp / "ccl", {**BASE, "current-context": ["hub"]}),
            "current-context: a string expected",
        ),
    }
    (tmp / "latin").write_bytes(b"a: \xff\xfe\n")
    return {n: (args(p), words) for n, (p, words) in cases.items()}


def mutations(
    value: object, where: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], object]]:
    """Every place in `value` paired with each wrong type (and a deep value) to put there."""
    for wrong in (None, 7, "x", True, [], {}, [[[[[[[["deep"]]]]]]]], {"a": {"b": {"c": 1}}}):
        if where and wrong != value:
            yield where, wrong
    if isinstance(value, dict):
        for key, item in value.items():
            yield from mutations(item, (*where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from mutations(item, (*where, i))


def mutated(where: tuple[Any, ...], wrong: object) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    target: Any = config
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = wrong
    return config


def test_hostile_kubeconfigs_are_one_clear_error_each(tmp_path: Path) -> None:
    cases = named_cases(tmp_path)
    results = run_corpus({n: a for n, (a, _) in cases.items()})
    for name, (_, words) in cases.items():
        result = results[name]
        assert result["raised"] is None, (name, result["raised"])
        assert "Traceback" not in result["output"], name
        assert result["code"] == 2, (name, result["output"])
        assert words in flat(result["output"]), (name, flat(result["output"]))


def test_wrong_types_at_every_level_give_no_traceback(tmp_path: Path) -> None:
    cases: dict[str, list[str]] = {}
    for i, (where, wrong) in enumerate(mutations(BASE)):
        path = write(tmp_path / f"m{i}", mutated(where, wrong))
        cases[f"{'.'.join(map(str, where))}={json.dumps(wrong)}"] = args(path)
    assert len(cases) > 150
    results = run_corpus(cases)
    for name, result in results.items():
        assert result["raised"] is None, (name, result["raised"])
        assert "Traceback" not in result["output"], name
        # 2: refused with the reason; 1: passed every check and failed to connect to port 9.
        assert result["code"] in (1, 2), (name, result["output"])
    refused = [r for r in results.values() if r["code"] == 2]
    assert len(refused) > len(results) // 2


def test_an_insecure_hub_is_accepted_only_with_the_flag_which_warns(tmp_path: Path) -> None:
    insecure = write(tmp_path / "ins", with_cluster(**{"insecure-skip-tls-verify": True}))
    http = write(tmp_path / "http", with_cluster(server="http://127.0.0.1:9"))
    results = run_corpus(
        {
            "insecure": args(insecure, "--allow-insecure-hub"),
            "http": args(http, "--allow-insecure-hub"),
            "http-hub-server": args(insecure, "--hub-server", "http://hub:80"),
            "not-url-hub-server": args(
                insecure, "--allow-insecure-hub", "--hub-server", "hub.internal"
            ),
        }
    )
    assert results["insecure"]["code"] == 1  # accepted, then port 9 refuses the connection
    assert "warning: insecure-skip-tls-verify" in results["insecure"]["output"]
    assert results["http"]["code"] == 1
    assert "warning:" in results["http"]["output"] and "plain http://" in results["http"]["output"]
    assert results["http-hub-server"]["code"] == 2
    assert "--hub-server: 'http://hub:80' is plain http://" in flat(
        results["http-hub-server"]["output"]
    )
    # A server that is not a URL is refused even with the flag: nothing could reach it.
    assert results["not-url-hub-server"]["code"] == 2
    assert "is not an http:// or https:// URL" in flat(results["not-url-hub-server"]["output"])
