"""CustomResourceDefinitions generated from the API models (`gpufleet.api.models`).

`generate()` returns one `apiextensions.k8s.io/v1` CRD per kind; `crds_yaml()` renders them as
one multi-document YAML (what `gpufleet crds` prints and `deploy/crds/` holds, one file per
kind: `write(directory)`).

A pydantic JSON schema is not a *structural* schema, which the API server requires. The
conversion (`structural`):

- `$ref`s are inlined (a sibling `default` or `description` overlays the target);
- `anyOf: [X, {type: null}]` (an Optional field) becomes X with `nullable: true`;
- `anyOf` of integer and string becomes `x-kubernetes-int-or-string: true`;
- an object with arbitrary members (`dict[str, Any]`, pod templates) becomes
  `type: object` + `x-kubernetes-preserve-unknown-fields: true`; a map keeps its value
  schema under `additionalProperties`;
- `additionalProperties: false` is dropped: the API server prunes unknown fields instead;
- `title`, `examples`, `discriminator` and `default: null` are dropped; `const` becomes a
  one-value `enum`.

The schema carries what OpenAPI can say (types, required fields, bounds, enums). The rules that
span fields (unique keys, CEL that compiles, P/D pairs) are not in it: `gpufleet validate` and
the controller check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpufleet.kube.resources import plural

GROUP = "gpufleet.io"
VERSION = "v1alpha1"
CATEGORY = "gpufleet"

_DROP = frozenset({"title", "examples", "discriminator", "$defs"})
_AGE: dict[str, Any] = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True, slots=True)
class CrdInfo:
    """What a CRD needs beyond the model's schema."""

    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    columns: tuple[dict[str, Any], ...]
    scale: bool = False


def _condition(type_: str, field: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].{field}'


INFOS: tuple[CrdInfo, ...] = (
    CrdInfo(
        "InferenceClass",
        namespaced=False,
        short_names=("iclass",),
        columns=(
            {"name": "Devices", "type": "string", "jsonPath": ".spec.devices[*].name"},
            _AGE,
        ),
    ),
    CrdInfo(
        "InferenceCluster",
        namespaced=False,
        short_names=("icluster",),
        columns=(
            {"name": "Ready", "type": "string", "jsonPath": _condition("Ready", "status")},
            {"name": "Reason", "type": "string", "jsonPath": _condition("Ready", "reason")},
            {"name": "Pools", "type": "string", "jsonPath": ".spec.nodePools[*].name"},
            {
                "name": "Agent",
                "type": "string",
                "jsonPath": ".status.agent.identity",
                "priority": 1,
            },
            _AGE,
        ),
    ),
    CrdInfo(
        "ModelDeployment",
        namespaced=True,
        short_names=("mdep",),
        scale=True,
        columns=(
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Placed", "type": "integer", "jsonPath": ".status.replicas.total"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.replicas.ready"},
            {
                "name": "Scheduled",
                "type": "string",
                "jsonPath": _condition("ReplicasScheduled", "reason"),
            },
            {
                "name": "Message",
                "type": "string",
                "jsonPath": _condition("ReplicasScheduled", "message"),
                "priority": 1,
            },
            _AGE,
        ),
    ),
    CrdInfo(
        "ModelReplica",
        namespaced=True,
        short_names=("mrep",),
        columns=(
            {"name": "Deployment", "type": "string", "jsonPath": ".spec.deploymentName"},
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
            {
                "name": "Index",
                "type": "string",
                "jsonPath": ".metadata.labels.gpufleet\\.io/replica-index",
            },
            {
                "name": "PodsScheduled",
                "type": "string",
                "jsonPath": _condition("ModelPodsScheduled", "status"),
            },
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": _condition("ModelPodsScheduled", "reason"),
                "priority": 1,
            },
            _AGE,
        ),
    ),
    CrdInfo(
        "PoolObservation",
        namespaced=True,
        short_names=("pobs",),
        columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
            {"name": "Pool", "type": "string", "jsonPath": ".spec.poolName"},
            {"name": "Nodes", "type": "integer", "jsonPath": ".status.observedNodes"},
            {"name": "ObservedAt", "type": "date", "jsonPath": ".status.observedAt"},
            {
                "name": "Epoch",
                "type": "integer",
                "jsonPath": ".status.agent.leaseEpoch",
                "priority": 1,
            },
        ),
    ),
    CrdInfo(
        "ReplicaObservation",
        namespaced=True,
        short_names=("robs",),
        columns=(
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
            {"name": "Replica", "type": "string", "jsonPath": ".spec.replicaName"},
            {"name": "PodsScheduled", "type": "boolean", "jsonPath": ".status.podsScheduled"},
            {"name": "ObservedAt", "type": "date", "jsonPath": ".status.observedAt"},
        ),
    ),
)


class SchemaError(ValueError):
    """The model's JSON schema has a construct with no structural equivalent."""


def structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema (with its `$defs`) as a structural OpenAPI v3 schema."""
    defs: Mapping[str, Any] = schema.get("$defs", {})
    converted: dict[str, Any] = _convert(schema, defs, ())
    return converted


def _resolve(ref: str, defs: Mapping[str, Any]) -> Mapping[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise SchemaError(f"unresolvable $ref {ref!r}")
    target: Mapping[str, Any] = defs[ref[len(prefix) :]]
    return target


def _convert(
    node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...], overlay: bool = False
) -> Any:
    """Convert one schema node; an `overlay` (siblings of a `$ref` or `anyOf`) stays untyped."""
    node = dict(node)
    if "$ref" in node:
        ref = node.pop("$ref")
        if ref in seen:
            raise SchemaError(f"recursive schema through {ref!r} cannot be inlined")
        target = _convert(_resolve(ref, defs), defs, (*seen, ref))
        return {**target, **_convert(node, defs, seen, overlay=True)}

    if "anyOf" in node:
        options = node.pop("anyOf")
        branches = [b for b in options if b.get("type") != "null"]
        nullable = len(branches) < len(options)
        rest = node
        types = {b.get("type") for b in branches}
        if len(branches) == 1:
            single: dict[str, Any] = {
                **_convert(branches[0], defs, seen),
                **_convert(rest, defs, seen, True),
            }
            if nullable:
                single["nullable"] = True
            return single
        if types == {"integer", "string"}:
            return {**_convert(rest, defs, seen, True), "x-kubernetes-int-or-string": True}
        raise SchemaError(f"anyOf of {sorted(map(str, types))} has no structural form")

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {k: _convert(v, defs, seen) for k, v in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, seen)
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, Mapping):
                out["additionalProperties"] = _convert(value, defs, seen)
            # False: dropped (the API server prunes unknown fields)
        else:
            out[key] = value
    if overlay:
        return out
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        if "enum" in out and all(isinstance(v, str) for v in out["enum"]):
            out["type"] = "string"
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _object_schema(model: type[BaseModel]) -> dict[str, Any]:
    converted = structural(model.model_json_schema(by_alias=True, mode="validation"))
    properties = dict(converted.get("properties", {}))
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}  # the API server owns ObjectMeta's schema
    if "status" in properties:
        properties["status"] = {k: v for k, v in properties["status"].items() if k != "nullable"}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if "description" in converted:
        schema["description"] = converted["description"]
    required = [r for r in converted.get("required", []) if r not in ("metadata",)]
    if required:
        schema["required"] = required
    return schema


def generate() -> list[dict[str, Any]]:
    """One CRD per API kind, in a stable order."""
    from gpufleet.api.models import KINDS  # models import CEL; load them only when asked

    crds: list[dict[str, Any]] = []
    for info in INFOS:
        model = KINDS[info.kind]
        name_plural = plural(info.kind)
        subresources: dict[str, Any] = {"status": {}}
        if info.scale:
            subresources["scale"] = {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas.total",
            }
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": f"{name_plural}.{GROUP}",
                    "labels": {"app.kubernetes.io/part-of": "gpufleet"},
                },
                "spec": {
                    "group": GROUP,
                    "scope": "Namespaced" if info.namespaced else "Cluster",
                    "names": {
                        "kind": info.kind,
                        "listKind": f"{info.kind}List",
                        "plural": name_plural,
                        "singular": info.kind.lower(),
                        "shortNames": list(info.short_names),
                        "categories": [CATEGORY],
                    },
                    "versions": [
                        {
                            "name": VERSION,
                            "served": True,
                            "storage": True,
                            "schema": {"openAPIV3Schema": _object_schema(model)},
                            "subresources": subresources,
                            "additionalPrinterColumns": [dict(c) for c in info.columns],
                        }
                    ],
                },
            }
        )
    return crds


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order given."""
    return "".join("---\n" + yaml.safe_dump(doc, sort_keys=False, width=100) for doc in documents)


def crds_yaml() -> str:
    """Every CRD as one YAML stream (`gpufleet crds | kubectl apply -f -`)."""
    return to_yaml(generate())


def files() -> dict[str, str]:
    """`deploy/crds/` contents: file name -> YAML, one CRD per file."""
    return {f"{crd['metadata']['name']}.yaml": to_yaml([crd]) for crd in generate()}


def write(directory: Path) -> list[Path]:
    """Write `files()` into `directory`; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
