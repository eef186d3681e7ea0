"""Reading a scenario's fields: every problem is collected with its field path, none raised.

`Problems` gathers `path: message` lines; the readers (`get_str`, `get_int`, `get_duration`,
...) return a usable default after recording a problem, so one pass finds every problem of a
file. `validated` checks a manifest with the API and reports its errors under the manifest's
path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.api import ValidationFailed, parse_object
from gpufleet.sim.scenario.model import DEFAULT_NAMESPACE, parse_duration
from gpufleet.store.port import Obj


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self._paths: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)
        self._paths.append(path)

    def covers(self, path: str) -> bool:
        """Whether a problem is already reported at `path`, inside it, or around it: a second
        check of the same field (the API's, after the scenario's own) is not reported again."""
        return any(
            p == path
            or p.startswith((f"{path}.", f"{path}["))
            or path.startswith((f"{p}.", f"{p}["))
            for p in self._paths
            if p
        )


def get_mapping(value: object, path: str, problems: Problems) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, "must be a mapping")
        return {}
    return value


def get_list(value: object, path: str, problems: Problems) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(path, "must be a list")
        return []
    return value


def check_known(
    data: Mapping[str, Any], allowed: Sequence[str], path: str, problems: Problems
) -> None:
    for key in data:
        if isinstance(key, str) and key.startswith("x-"):
            continue  # extension fields, for YAML anchors
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            problems.add(where, f"unknown field (expected one of {', '.join(allowed)})")


def get_str(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: Problems,
    default: str | None = None,
) -> str:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return ""
        return default
    if not isinstance(value, str) or not value:
        problems.add(where, "must be a non-empty string")
        return default or ""
    return value


def get_int(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: Problems,
    default: int | None = None,
    minimum: int = 0,
) -> int:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return minimum
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        problems.add(where, "must be an integer")
        return default if default is not None else minimum
    if value < minimum:
        problems.add(where, f"must be at least {minimum}")
    return value


def get_duration(
    data: Mapping[str, Any],
    key: str,
    path: str,
    problems: Problems,
    default: float | None = None,
) -> float:
    value = data.get(key)
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            problems.add(where, "is required")
            return 0.0
        return default
    try:
        return parse_duration(value)
    except ValueError as error:
        problems.add(where, str(error))
        # NaN fails every later comparison, so no second problem is reported for it.
        return default if default is not None else math.nan


def get_bool(
    data: Mapping[str, Any], key: str, path: str, problems: Problems, default: bool
) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.add(f"{path}.{key}", "must be true or false")
        return default
    return value


def validated(
    body: object, path: str, problems: Problems, expected_kind: str | None = None
) -> Obj | None:
    """A manifest validated with the API; its errors are reported under `path`."""
    if not isinstance(body, Mapping):
        problems.add(path, "must be a mapping (a Kubernetes object)")
        return None
    if expected_kind is not None and body.get("kind") != expected_kind:
        problems.add(f"{path}.kind", f"must be {expected_kind}, got {body.get('kind')!r}")
        return None
    try:
        parse_object(dict(body))
    except ValidationFailed as failure:
        for error in failure.errors:
            problems.add(f"{path}.{error.path}" if error.path else path, error.message)
        return None
    out: Obj = plain(body)
    if not out["metadata"].get("namespace"):
        # Absent, null or "": the default namespace, as the API server reads it.
        out["metadata"]["namespace"] = DEFAULT_NAMESPACE
    return out


def plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists (YAML anchors share objects)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
