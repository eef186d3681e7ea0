"""Generated CRDs: up to date in deploy/crds, structural, and valid Kubernetes objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cel
import kubernetes_validate
import pytest
import yaml

from builders_api import edited
from catalogue_api import BASES, Mutation
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
    from gpufleet.api.kinds import KINDS

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
    assert columns[:6] == ["Desired", "Placed", "Ready", "Pending", "Running", "Scheduled"]
    assert columns[-1] == "Age"


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
    template = dict(member["properties"]["template"])
    assert template.pop("description").startswith("The pod template")
    assert template == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
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


def crd_schemas() -> dict[str, dict[str, Any]]:
    return {
        c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for c in crds.generate()
    }


@pytest.mark.parametrize("kind", sorted(crd_schemas()))
def test_every_field_explains_itself(kind: str) -> None:
    """`kubectl explain` has something to say for the object and every field (issue 15.4)."""
    schema = crd_schemas()[kind]
    undescribed = [
        path
        for path, node in walk(schema, kind)
        if "description" not in node and not path.endswith("{}")  # map values are not fields
    ]
    assert undescribed == []
    assert schema["description"]


def conditions_schemas(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    return ((p, n) for p, n in walk(schema, path) if p.endswith(".conditions"))


@pytest.mark.parametrize("kind", sorted(crd_schemas()))
def test_conditions_follow_metav1_condition(kind: str) -> None:
    found = list(conditions_schemas(crd_schemas()[kind], kind))
    for path, node in found:
        assert node["x-kubernetes-list-type"] == "map", path
        assert node["x-kubernetes-list-map-keys"] == ["type"], path
        item = node["items"]
        assert sorted(item["properties"]) == sorted(
            ["type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"]
        ), path
        assert item["properties"]["observedGeneration"]["type"] == "integer"
        assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
        assert "type" in item["required"] and "status" in item["required"]
    if kind not in ("InferenceClass", "ReplicaObservation"):
        assert found, f"{kind} has conditions"


def crd_violations(schema: dict[str, Any], value: object, path: str = "") -> list[str]:
    """Where the CRD's `x-kubernetes-validations` and list-map keys reject `value`, as the API
    server checks them once the schema passed, rules evaluated with the project's CEL library."""
    found: list[str] = []
    for rule in schema.get("x-kubernetes-validations", ()):
        if cel.evaluate(rule["rule"], {"self": value}) is not True:
            found.append(path + rule.get("fieldPath", ""))
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                found += crd_violations(sub, value[name], f"{path}.{name}".lstrip("."))
        values_schema = schema.get("additionalProperties")
        if isinstance(values_schema, dict):
            for name, item in value.items():
                found += crd_violations(values_schema, item, f"{path}.{name}")
    if isinstance(value, list):
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys is not None:
            seen = [tuple(item.get(k) for k in keys) for item in value]
            if len(set(seen)) < len(seen):
                found.append(path)
        for index, item in enumerate(value):
            found += crd_violations(schema.get("items", {}), item, f"{path}[{index}]")
    return found


CEL_CASES = [(kind, m) for kind, (_, catalogue) in sorted(BASES.items()) for m in catalogue]


@pytest.mark.parametrize(
    ("kind", "mutation"), CEL_CASES, ids=[f"{k}: {m.id}" for k, m in CEL_CASES]
)
def test_crd_rules_and_the_validator_agree_on_the_catalogue(kind: str, mutation: Mutation) -> None:
    """Each cross-field rule the CRD states fires exactly where the Python validator reports it
    (issue 15.4 / 18); the valid bases pass the CRD's rules."""
    build, _ = BASES[kind]
    schema = crd_schemas()[kind.split("/")[0]]
    assert crd_violations(schema, build()) == []
    if not mutation.cel:
        return
    found = crd_violations(schema, edited(build(), mutation.edits))
    assert len(found) == 1, found
    # the CRD reports a rule at the object that holds it, the validator at the field or item
    assert mutation.path.startswith(found[0]), (found, mutation.path)


def test_crd_rules_and_the_validator_agree_on_the_invalid_examples() -> None:
    """Every rule the CRD breaks on an invalid example is one the validator reports too."""
    from gpufleet.api import ValidationFailed, check_paths

    schemas = crd_schemas()
    examples = Path(__file__).resolve().parents[2] / "examples" / "invalid"
    for path in sorted(examples.glob("*.yaml")):
        (failure,) = check_paths([path])
        assert isinstance(failure, ValidationFailed)
        (body,) = yaml.safe_load_all(path.read_text())
        for where in crd_violations(schemas[body["kind"]], body):
            assert any(e.path.startswith(where) for e in failure.errors), (path.name, where)


@pytest.mark.parametrize(
    ("kind", "longest"), [("ModelDeployment", 63), ("InferenceCluster", 46)], ids=str
)
def test_names_that_become_label_values_must_fit_one(kind: str, longest: int) -> None:
    """A name past a label value's 63 characters (a cluster's: its hub namespace's 46) is
    refused by the validator and by the CRD's root rule alike, at metadata.name (issue 30,
    4: 999 refused replica writes a step, forever)."""
    from builders_api import inference_cluster, model_deployment
    from gpufleet.api import ValidationFailed, parse_object

    build = model_deployment if kind == "ModelDeployment" else inference_cluster
    schema = crd_schemas()[kind]
    fits = build()
    fits["metadata"]["name"] = "a" * longest
    parse_object(fits)
    assert crd_violations(schema, fits) == []
    too_long = build()
    too_long["metadata"]["name"] = "a" * (longest + 1)
    with pytest.raises(ValidationFailed) as e:
        parse_object(too_long)
    assert [err.path for err in e.value.errors] == ["metadata.name"]
    assert f"at most {longest} characters" in e.value.errors[0].message
    assert crd_violations(schema, too_long) == [""]  # a root rule: reported at the object
