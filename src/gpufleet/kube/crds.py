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

The schema carries what OpenAPI can say (types, required fields, bounds, enums), a description
on every field (the models' field docstrings, for `kubectl explain`), and the rules of
`gpufleet.api` that the API server can check:

- keyed lists (unique names, condition types, taints by key and effect) are
  `x-kubernetes-list-type: map` with their keys (`LIST_MAPS`); conditions follow
  metav1.Condition (type, status, observedGeneration, lastTransitionTime, reason, message);
- the cross-field rules CEL can state (`VALIDATIONS`: pool sizes, a Worker's `worker`, an
  engine's shape, P/D pairs, tolerations, reserved labels, a DRA device's class) are
  `x-kubernetes-validations` on the model that holds the fields. A test evaluates them with the
  project's CEL library against the validator's catalogue of broken objects.

What CEL cannot state here (selectors that compile, quantities and semvers that parse, unique
free vectors, DNS names of list items) stays with `gpufleet validate` and the controller.
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

_PD = "has(self.serving) && has(self.serving.mode) && self.serving.mode == 'PrefillDecode'"
_WORKER = "has(self.role) && self.role == 'Worker'"
_MEMBER_RULES: tuple[dict[str, str], ...] = (
    {
        "rule": f"({_WORKER}) || !has(self.worker)",
        "message": "worker is only allowed on a Worker member",
        "fieldPath": ".worker",
    },
    {
        "rule": f"!({_WORKER}) || has(self.worker)",
        "message": "worker is required for a Worker member",
        "fieldPath": ".worker",
    },
)
_SHAPE_RULE: dict[str, str] = {
    "rule": "self.members.size() == 1 ? "
    "(!has(self.members[0].role) || self.members[0].role == 'Standalone') : "
    "(self.members.exists(m, has(m.role) && m.role == 'Leader') && "
    "self.members.exists(m, has(m.role) && m.role == 'Worker'))",
    "message": "members must be exactly one Standalone member, or one Leader and one Worker",
    "fieldPath": ".members",
}
_SERVING_RULES: tuple[dict[str, str], ...] = (
    {
        "rule": f"({_PD}) || self.engines.all(e, !has(e.phase))",
        "message": "phase is only allowed when serving.mode is PrefillDecode",
        "fieldPath": ".engines",
    },
    {
        "rule": f"!({_PD}) || (self.engines.size() == 2 && "
        "self.engines.exists(e, has(e.phase) && e.phase == 'Prefill') && "
        "self.engines.exists(e, has(e.phase) && e.phase == 'Decode'))",
        "message": "PrefillDecode needs exactly two engines, one Prefill and one Decode",
        "fieldPath": ".engines",
    },
)

#: The cross-field rules of gpufleet.api.models that CEL can state, by model.
VALIDATIONS: dict[str, tuple[dict[str, str], ...]] = {
    "NodePoolSpec": (
        {
            "rule": "!has(self.maxNodeCount) || "
            "self.maxNodeCount >= (has(self.minNodeCount) ? self.minNodeCount : 0)",
            "message": "maxNodeCount must be at least minNodeCount",
            "fieldPath": ".maxNodeCount",
        },
        {
            "rule": "!has(self.maxNodeCount) || "
            "(has(self.nodeCount) ? self.nodeCount : 1) <= self.maxNodeCount",
            "message": "nodeCount must be at most maxNodeCount",
            "fieldPath": ".nodeCount",
        },
    ),
    "DeviceSpec": (
        {
            "rule": "(has(self.claim) && self.claim != 'DRA') || "
            "(has(self.deviceClassName) && self.deviceClassName != '')",
            "message": "deviceClassName is required when claim is DRA",
            "fieldPath": ".deviceClassName",
        },
    ),
    "AttributeValue": (
        {
            "rule": "[has(self.string), has(self.version), has(self.bool), has(self.int)]"
            ".filter(x, x).size() == 1",
            "message": "must set exactly one of string, version, bool, int",
        },
    ),
    "MemberSpec": _MEMBER_RULES,
    "ReplicaMemberSpec": _MEMBER_RULES,
    "EngineSpec": (
        _SHAPE_RULE,
        {
            "rule": "self.members.exists(m, has(m.nodeSelector))",
            "message": "at least one member must have a nodeSelector",
            "fieldPath": ".members",
        },
    ),
    "ReplicaEngineSpec": (_SHAPE_RULE,),
    "TolerationSpec": (
        {
            "rule": "(has(self.key) && self.key != '') || "
            "(has(self.operator) && self.operator == 'Exists')",
            "message": "operator must be Exists when key is empty",
            "fieldPath": ".operator",
        },
        {
            "rule": "!(has(self.operator) && self.operator == 'Exists') || "
            "!has(self.value) || self.value == ''",
            "message": "value must be empty when operator is Exists",
            "fieldPath": ".value",
        },
    ),
    "TemplateMeta": (
        {
            "rule": "!has(self.labels) || self.labels.all(k, !k.startsWith('gpufleet.io/'))",
            "message": "the gpufleet.io/ label prefix is reserved",
            "fieldPath": ".labels",
        },
    ),
    "DeploymentTemplateSpec": _SERVING_RULES,
    "ModelReplicaSpec": _SERVING_RULES,
}

_BY_NAME = ("name",)
_BY_TYPE = ("type",)
#: Lists whose items are unique by their keys, by (model, property).
LIST_MAPS: dict[tuple[str, str], tuple[str, ...]] = {
    ("InferenceClassSpec", "devices"): _BY_NAME,
    ("InferenceClusterSpec", "nodePools"): _BY_NAME,
    ("InferenceClusterSpec", "taints"): ("key", "effect"),
    ("InferenceClusterStatus", "gpuPools"): _BY_NAME,
    ("InferenceClusterStatus", "conditions"): _BY_TYPE,
    ("PublishedObservation", "conditions"): _BY_TYPE,
    ("PoolObservationStatus", "conditions"): _BY_TYPE,
    ("NodeSelectorSpec", "devices"): _BY_NAME,
    ("DeploymentTemplateSpec", "engines"): _BY_NAME,
    ("ModelDeploymentStatus", "conditions"): _BY_TYPE,
    ("ReplicaMemberSpec", "deviceRequests"): _BY_NAME,
    ("ModelReplicaSpec", "engines"): _BY_NAME,
    ("ModelReplicaStatus", "pools"): _BY_NAME,
    ("ModelReplicaStatus", "conditions"): _BY_TYPE,
    ("ReplicaObservationStatus", "pools"): _BY_NAME,
    ("ReplicaObservationStatus", "conditions"): _BY_TYPE,
}

_META = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object.",
    "kind": "Kind is a string value representing the REST resource this object represents.",
    "metadata": "Standard object metadata.",
}
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
            # Placed is not running: replicas whose pods are not all scheduled, and why.
            {"name": "Pending", "type": "integer", "jsonPath": ".status.replicas.pending"},
            {
                "name": "Running",
                "type": "string",
                "jsonPath": _condition("ReplicasRunning", "reason"),
            },
            {
                "name": "Scheduled",
                "type": "string",
                "jsonPath": _condition("ReplicasScheduled", "reason"),
            },
            {"name": "Up-To-Date", "type": "integer", "jsonPath": ".status.updatedReplicas"},
            {
                "name": "Progressing",
                "type": "string",
                "jsonPath": _condition("Progressing", "reason"),
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
            },
            {
                "name": "Unschedulable",
                "type": "string",
                "jsonPath": ".status.pools[*].unschedulablePods",
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
        _add_rules(ref.rsplit("/", 1)[-1], target)
        return {**target, **_convert(node, defs, seen, overlay=True)}

    if "anyOf" in node:
        return _any_of(node, defs, seen)

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
    return out if overlay else _typed(out)


def _typed(out: dict[str, Any]) -> dict[str, Any]:
    """A structural node has a type, or keeps unknown fields."""
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


def _any_of(node: dict[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """An Optional field (`X | None`) or an int-or-string; nothing else has a structural form."""
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


def _add_rules(model: str, schema: dict[str, Any]) -> None:
    """The model's CEL rules and keyed lists, as the API server states them."""
    if model in VALIDATIONS:
        schema["x-kubernetes-validations"] = [dict(rule) for rule in VALIDATIONS[model]]
    for name, prop in schema.get("properties", {}).items():
        keys = LIST_MAPS.get((model, name))
        if keys is not None:
            prop["x-kubernetes-list-type"] = "map"
            prop["x-kubernetes-list-map-keys"] = list(keys)


#: Rules on a whole object (CEL may read `self.metadata.name` at the root only): names that
#: become label values must fit one (`gpufleet.api.names`).
ROOT_VALIDATIONS: dict[str, tuple[dict[str, str], ...]] = {
    "ModelDeployment": (
        {
            "rule": "self.metadata.name.size() <= 63",
            "message": "metadata.name must be at most 63 characters: it is the value of its "
            "replicas' gpufleet.io/deployment label",
        },
    ),
    "InferenceCluster": (
        {
            "rule": "self.metadata.name.size() <= 46",
            "message": "metadata.name must be a DNS label of at most 46 characters: it names "
            "the cluster's hub namespace gpufleet-cluster-<name>",
        },
    ),
}


def _object_schema(model: type[BaseModel]) -> dict[str, Any]:
    converted = structural(model.model_json_schema(by_alias=True, mode="validation"))
    properties = dict(converted.get("properties", {}))
    properties["apiVersion"] = {"type": "string", "description": _META["apiVersion"]}
    properties["kind"] = {"type": "string", "description": _META["kind"]}
    # the API server owns ObjectMeta's schema
    properties["metadata"] = {"type": "object", "description": _META["metadata"]}
    if "status" in properties:
        properties["status"] = {k: v for k, v in properties["status"].items() if k != "nullable"}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if "description" in converted:
        schema["description"] = converted["description"]
    required = [r for r in converted.get("required", []) if r not in ("metadata",)]
    if required:
        schema["required"] = required
    if model.__name__ in ROOT_VALIDATIONS:
        schema["x-kubernetes-validations"] = [dict(r) for r in ROOT_VALIDATIONS[model.__name__]]
    return schema


def generate() -> list[dict[str, Any]]:
    """One CRD per API kind, in a stable order."""
    from gpufleet.api.kinds import KINDS  # models import CEL; load them only when asked

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
