"""The shipped examples: the fleet validates and converts; the broken ones fail as documented."""

from pathlib import Path

import pytest

from gpufleet.api import (
    FieldError,
    ValidationFailed,
    check_paths,
    load_manifests,
    snapshot_from_manifests,
)
from gpufleet.api.names import DNS_LABEL_RULE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MEMBER = "spec.template.spec.engines[0].members[0]"


def test_fleet_validates_and_converts() -> None:
    manifests = load_manifests([EXAMPLES / "fleet"])
    assert sorted(f"{m.obj.kind}/{m.obj.display_name}" for m in manifests) == [
        "InferenceClass/h100-8x",
        "InferenceClass/l4-4x-g2",
        "InferenceClass/l4-4x-g6",
        "InferenceClass/t4-4x-g4dn",
        "InferenceCluster/eks-us-east",
        "InferenceCluster/gke-eu-west",
        "ModelDeployment/ml-team/deepseek-v3",
        "ModelDeployment/ml-team/llama-70b-pd",
        "ModelDeployment/ml-team/mistral-24b",
        "ModelDeployment/ml-team/qwen-7b",
    ]
    snapshot = snapshot_from_manifests(manifests)
    assert {
        c.name: [(p.name, p.nodes, p.observation is not None) for p in c.pools]
        for c in snapshot.clusters
    } == {
        "eks-us-east": [("t4", 3, True), ("l4", 6, False)],
        "gke-eu-west": [("l4", 8, False), ("h100", 4, False)],
    }
    shapes = {
        d.key.name: [
            (e.name, e.phase, [(m.role, m.pods_per_copy) for m in e.members]) for e in d.engines
        ]
        for d in snapshot.deployments
    }
    assert shapes == {
        "deepseek-v3": [("engine", None, [("Leader", 1), ("Worker", 1)])],
        "llama-70b-pd": [
            ("prefill", "Prefill", [("Standalone", 1)]),
            ("decode", "Decode", [("Standalone", 1)]),
        ],
        "mistral-24b": [("engine", None, [("Standalone", 1)])],
        "qwen-7b": [("engine", None, [("Standalone", 1)])],
    }


INVALID = [
    ("bad-pool-name.yaml", FieldError("spec.nodePools[0].name", DNS_LABEL_RULE)),
    (
        "negative-count.yaml",
        FieldError(f"{MEMBER}.nodeSelector.devices[0].count", "must be at least 1"),
    ),
    ("missing-field.yaml", FieldError("spec.devices[0].driver", "is required")),
    ("unknown-field.yaml", FieldError("spec.replica", "unknown field")),
]


@pytest.mark.parametrize(("name", "error"), INVALID, ids=[name for name, _ in INVALID])
def test_invalid_example_fails_with_its_error(name: str, error: FieldError) -> None:
    (failure,) = check_paths([EXAMPLES / "invalid" / name])
    assert isinstance(failure, ValidationFailed)
    assert failure.errors == (error,)


def test_broken_cel_example_names_the_selector() -> None:
    (failure,) = check_paths([EXAMPLES / "invalid" / "broken-cel.yaml"])
    assert isinstance(failure, ValidationFailed)
    (error,) = failure.errors
    assert error.path == f"{MEMBER}.nodeSelector.devices[0].selectors[0].cel"
    assert error.message.startswith("does not compile: ERROR: <input>:1:52: Syntax error")


def test_several_errors_example_reports_every_error_in_one_pass() -> None:
    (failure,) = check_paths([EXAMPLES / "invalid" / "several-errors.yaml"])
    assert isinstance(failure, ValidationFailed)
    assert failure.errors == (
        FieldError(
            "spec.taints[1]", 'duplicate key and effect "maintenance:NoSchedule" (also at index 0)'
        ),
        FieldError("spec.nodePools[0].name", DNS_LABEL_RULE),
        FieldError("spec.nodePools[0].nodeCount", "must be at least 0"),
        FieldError("spec.nodePools[1].maxNodeCount", "must be at least minNodeCount (3)"),
        FieldError("spec.nodePools[2]", 'duplicate name "h100" (also at index 1)'),
    )
