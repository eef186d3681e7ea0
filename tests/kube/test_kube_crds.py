"""Generated CRDs: up to date in deploy/crds, structural, and valid Kubernetes objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.kube import crds

pytestmark = pytest.mark.timeout(60)

DEPLOY_CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KUBERNETES_VERSION = "1.37.0"


def test_deploy_crds_are_up_to_date_with_the_generator() -> None:
    expected = crds.files()
    on_disk = {p.name: p.read_text() for p in sorted(DEPLOY_CRDS.glob("*.yaml"))}
    assert sorted(on_disk) == sorted(expected), "regenerate deploy/crds (see docs/operations.md)"
    stale = [name for name, text in expected.items() if on_disk[name] != text]
    assert not stale, f"deploy/crds out of date: {stale}; run gpufleet.kube.crds.write()"


def test_every_kind_has_a_crd_with_status_and_printer_columns() -> None:
    from gpufleet.api.models import KINDS

    generated = {c["spec"]["names"]["kind"]: c for c in crds.generate()}
    assert sorted(generated) == sorted(KINDS)
    for kind, crd in generated.items():
        (version,) = crd["spec"]["versions"]
        assert version["subresources"]["status"] == {}, kind
        assert version["additionalPrinterColumns"], kind
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.gpufleet.io"
    scale = generated["ModelDeployment"]["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas.total",
    }
    columns = [
        c["name"]
        for c in generated["ModelDeployment"]["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert columns[:4] == ["Desired", "Placed", "Ready", "Scheduled"] and columns[-1] == "Age"


def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("crd", crds.generate(), ids=lambda c: c["spec"]["names"]["kind"])
def test_schemas_are_structural(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema, crd["spec"]["names"]["kind"]):
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const"):
            assert forbidden not in node, f"{path}: {forbidden}"
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"
        top_level_metadata = path == f"{crd['spec']['names']['kind']}.metadata"  # server-owned
        if node.get("type") == "object" and "properties" not in node and not top_level_metadata:
            assert "additionalProperties" in node or node.get(
                "x-kubernetes-preserve-unknown-fields"
            ), path


def test_pod_templates_are_free_form() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in crds.generate()}
    schema = by_kind["ModelDeployment"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    member = schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"][
        "properties"
    ]["engines"]["items"]["properties"]["members"]["items"]
    assert member["properties"]["template"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert member["properties"]["nodeSelector"]["nullable"] is True


def test_crds_validate_against_the_kubernetes_schema() -> None:
    for crd in yaml.safe_load_all(crds.crds_yaml()):
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)


def test_the_converter_handles_what_pydantic_emits() -> None:
    schema = {
        "$defs": {
            "Inner": {
                "title": "Inner",
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": {"type": "string", "title": "A"}},
            }
        },
        "type": "object",
        "properties": {
            "ref": {"$ref": "#/$defs/Inner", "description": "overlaid"},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None},
            "port": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "free": {"type": "object", "additionalProperties": True},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "fixed": {"const": "x"},
        },
    }
    inner = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert crds.structural(schema) == {
        "type": "object",
        "properties": {
            "ref": {**inner, "description": "overlaid"},
            "maybe": {**inner, "nullable": True},
            "port": {"x-kubernetes-int-or-string": True},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "fixed": {"enum": ["x"], "type": "string"},
        },
    }
    with pytest.raises(crds.SchemaError):
        crds.structural({"anyOf": [{"type": "boolean"}, {"type": "string"}]})
