"""Kubernetes conditions and JSON merge patches on plain status bodies (pure).

A condition keeps its `lastTransitionTime` while its `status` stays the same, so rewriting an
unchanged condition changes nothing and a controller can compare before it writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gpufleet.store import copy_json, format_time
from gpufleet.store.merge import merge_patch

Obj = dict[str, Any]
#: An object the controller reads and never changes (a store view may share it).
ReadObj = Mapping[str, Any]


def condition(type_: str, status: str, reason: str, message: str = "") -> Obj:
    # str(): a StrEnum reason is written as its plain value.
    return {"type": type_, "status": status, "reason": str(reason), "message": message}


def find_condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Obj | None:
    for c in conditions:
        if c.get("type") == type_:
            return dict(c)
    return None


def drop_condition(conditions: list[Obj], type_: str) -> list[Obj]:
    """`conditions` without the condition of `type_`; the same list when it has none (so a
    status that did not move compares by identity)."""
    if find_condition(conditions, type_) is None:
        return conditions
    return [c for c in conditions if c.get("type") != type_]


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    new: Mapping[str, Any],
    now: datetime,
    generation: int | None = None,
) -> list[Obj]:
    """`conditions` with `new` in place of the condition of its type (appended when absent).

    `lastTransitionTime` is kept when the status did not change, else set to `now`; the other
    conditions are kept as they are, in their order. `generation` (the object's
    `metadata.generation` the condition was computed from) is written as the condition's
    `observedGeneration`, as metav1.Condition has it.
    """
    if generation is not None:
        new = {**new, "observedGeneration": generation}
    out: list[Obj] = []
    found = False
    for c in conditions:
        if c.get("type") != new["type"]:
            out.append(copy_json(dict(c)))
            continue
        found = True
        merged = dict(new)
        if c.get("status") == new["status"] and c.get("lastTransitionTime"):
            merged["lastTransitionTime"] = c["lastTransitionTime"]
        else:
            merged["lastTransitionTime"] = format_time(now)
        out.append(merged)
    if not found:
        out.append({**new, "lastTransitionTime": format_time(now)})
    return out


def is_owned_equal(
    current: Mapping[str, Any], desired: Mapping[str, Any], owned: Sequence[str]
) -> bool:
    """Whether the `owned` keys of `current` already equal `desired` (absent: absent): the
    same answer as an empty `owned_patch`, without building the patch."""
    return all(
        (key in current) == (key in desired) and current.get(key) == desired.get(key)
        for key in owned
    )


def owned_patch(
    current: Mapping[str, Any], desired: Mapping[str, Any], owned: Sequence[str]
) -> Obj:
    """The merge patch making the `owned` keys of `current` equal `desired` (absent: removed).

    Keys of `current` that are not `owned` are other writers' and are never touched.
    """
    old = {k: current[k] for k in owned if k in current}
    new = {k: desired[k] for k in owned if k in desired}
    return merge_patch(old, new)
