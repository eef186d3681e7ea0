"""`gpufleet validate` names `file:line` (of the object, and of the field an error names), reads
`-` (standard input), and looks into pod templates as an agent's default policy would."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpufleet.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENV = {"COLUMNS": "1000", "FORCE_COLOR": None, "TTY_COMPATIBLE": None}
runner = CliRunner()

HOSTILE = """\
# a comment first: lines are the file's, as an editor shows them
apiVersion: gpufleet.io/v1alpha1
kind: ModelDeployment
metadata: {name: web, namespace: ml}
spec:
  template:
    spec:
      engines:
      - name: engine
        members:
        - role: Standalone
          nodeSelector:
            devices:
            - {name: gpu, count: 1, selectors: [{cel: "true"}]}
          template:
            spec:
              hostNetwork: true
              containers:
              - name: vllm
                image: vllm/vllm-openai
"""


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["validate", *args], input=stdin, env=ENV)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_errors_name_the_line_of_their_field() -> None:
    code, out = invoke(str(EXAMPLES / "invalid" / "unknown-field.yaml"))
    assert code == 1
    lines = (EXAMPLES / "invalid" / "unknown-field.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.strip().startswith("replica:"))
    assert f"spec.replica: unknown field  ({EXAMPLES}/invalid/unknown-field.yaml:{line})" in out
    assert "#1" not in out


def test_a_dash_reads_standard_input() -> None:
    text = (EXAMPLES / "one-node" / "cluster.yaml").read_text()
    code, out = invoke("-", stdin=text)
    assert code == 0, out
    start = next(i for i, t in enumerate(text.splitlines(), start=1) if t.startswith("apiVersion"))
    assert f"ok   InferenceCluster/solo  stdin:{start}" in out
    code, out = invoke("-", stdin="apiVersion: gpufleet.io/v1alpha1\nkind: InferenceClass\n")
    assert code == 1 and "(stdin:1)" in out
    code, out = invoke("-", stdin="")
    assert (code, out.splitlines()[0]) == (1, "✗ stdin: contains no objects")


def test_pod_templates_are_checked_as_the_default_agent_policy_checks_them() -> None:
    code, out = invoke("-", stdin=HOSTILE)
    assert code == 0, out  # warnings: a cluster's own policy may allow more
    (warning,) = [line for line in out.splitlines() if line.startswith("!")]
    assert warning == (
        "! ModelDeployment ml/web: spec.template.spec.engines[0].members[0].template.spec."
        "hostNetwork: uses the node's network namespace (HostNamespace; refused by the agent's "
        "default policy)  (stdin:17)"
    )
    assert out.splitlines()[-1] == "1 valid, 0 invalid (1 warning)"
    code, out = invoke("-", "-o", "json", stdin=HOSTILE)
    report = json.loads(out)
    assert report["warnings"] == 1
    assert report["objects"][0]["warnings"] == [
        {
            "path": "spec.template.spec.engines[0].members[0].template.spec.hostNetwork",
            "code": "HostNamespace",
            "message": "uses the node's network namespace",
            "source": "stdin:17",
        }
    ]


def test_the_examples_raise_no_template_warning() -> None:
    code, out = invoke(str(EXAMPLES / "fleet"), str(EXAMPLES / "one-node"))
    assert code == 0, out
    assert not [line for line in out.splitlines() if line.startswith("!")]
