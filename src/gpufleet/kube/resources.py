"""The mapping from the store's `Kind`s to Kubernetes REST resources (plurals, lightkube classes).

Every kind, built-in or ours, is handled as a lightkube *generic* resource, so objects stay
plain dicts exactly as the API server returns them (the `Store` contract) instead of being
converted through typed models, which would drop fields the models do not know.
`lightkube.generic_resource.create_*_resource` registers each class in lightkube's global
resource registry; a typed model registered there under the same apiVersion and kind first
would be returned instead, which `to_obj` also handles.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from gpufleet.store.port import Kind, Obj

_IRREGULAR_PLURALS: dict[str, str] = {}


def plural(kind: str) -> str:
    """The REST collection name of a kind: `InferenceClass` -> `inferenceclasses`."""
    lower = kind.lower()
    if lower in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[lower]
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


def group_version(kind: Kind) -> tuple[str, str]:
    """(group, version) of a kind; the core group is ``""``."""
    group, _, version = kind.api_version.rpartition("/")
    return group, version


@cache
def resource_class(kind: Kind) -> Any:
    """The lightkube generic resource class serving `kind`."""
    group, version = group_version(kind)
    create = create_namespaced_resource if kind.namespaced else create_global_resource
    return create(group, version, kind.kind, plural(kind.kind))


def to_obj(value: Any) -> Obj:
    """A plain dict of a lightkube object (generic or typed)."""
    if isinstance(value, dict):
        obj = dict(value)
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            obj["metadata"] = meta.to_dict()
        return obj
    result: Obj = value.to_dict()
    return result
