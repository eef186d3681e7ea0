"""JSON documents: merge patches (RFC 7386), computing one and applying one, and fast copies.

Both the agent and the controller write status by merge patch, and `MemoryStore` applies them
as the API server does, so the two directions live here together.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from gpufleet.store.port import Obj

_T = TypeVar("_T")


def copy_json(value: _T) -> _T:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than
    `copy.deepcopy`, which the simulator's hot paths otherwise spend most of their time in.
    Anything else is copied with `copy.deepcopy`."""
    return cast(_T, _copy(value))


def copy_obj(obj: Mapping[str, Any]) -> Obj:
    """`copy_json` of an object: a private, changeable dict from one that may be shared."""
    return cast(Obj, _copy(obj))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """The merge patch turning `old` into `new`: removed keys map to None, lists are replaced
    whole, and an empty patch means nothing changed."""
    patch: Obj = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value:
            patch[key] = copy_json(value)
    return patch


def apply_merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply `patch` to `target` in place: None deletes a key, mappings merge, the rest
    replaces. Returns `target`."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            apply_merge_patch(target[key], value)
        else:
            target[key] = copy_json(value)
    return target
