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


#: Types copied by reference: immutable, and exact (a subclass goes to `copy.deepcopy`).
_ATOMS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return _copy_dict(value)
    if kind is list:
        return _copy_list(value)
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def _copy_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    # Leaves are dispatched inline: most values are strings, and a call per leaf is most of
    # the cost of a copy.
    out = {}
    for k, v in value.items():
        kind = type(v)
        if kind in _ATOMS:
            out[k] = v
        elif kind is dict:
            out[k] = _copy_dict(v)
        elif kind is list:
            out[k] = _copy_list(v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _copy_list(value: list[Any]) -> list[Any]:
    out = []
    for v in value:
        kind = type(v)
        if kind in _ATOMS:
            out.append(v)
        elif kind is dict:
            out.append(_copy_dict(v))
        elif kind is list:
            out.append(_copy_list(v))
        else:
            out.append(copy.deepcopy(v))
    return out


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """The merge patch turning `old` into `new`: removed keys map to None, lists are replaced
    whole, and an empty patch means nothing changed. The patch shares the values it takes
    from `new` (no copies: a patch is sent, and whoever applies it copies what it keeps, as
    `merged` does); neither may be changed while the other is in use."""
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
            patch[key] = value
    return patch


def merged(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`apply_merge_patch` to a copy of `target`, copying only what the patch changes: the
    result shares every subtree the patch leaves alone with `target` (so neither may be
    changed in place afterwards) and owns copies of what the patch brings."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif type(value) in _ATOMS:
            out[key] = value  # what `copy_json` gives: most patches bring a time or a count
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy_json(value)
    return out


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
