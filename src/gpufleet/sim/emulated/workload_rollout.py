"""How the emulated Deployment and LeaderWorkerSet controllers roll: their strategies, read as
the real controllers read them.

- **Deployment** (`apps/v1`): `spec.strategy.type` `RollingUpdate` (the default) or
  `Recreate`. RollingUpdate's `maxSurge` and `maxUnavailable` are an int or a percent of
  `replicas` (default 25% each); surge rounds up, unavailability down, and when both come to 0
  unavailability is 1 (the Deployment controller's `ResolveFenceposts`). Recreate deletes every
  old pod and creates new ones only once none is left, terminating ones included.
- **LeaderWorkerSet** (`leaderworkerset.x-k8s.io/v1`): `spec.rolloutStrategy.
  rollingUpdateConfiguration` `maxSurge` (default 0) and `maxUnavailable` (default 1), in
  groups, an int or a percent of `replicas` (rounded as above). A surge group is a whole extra
  group of the new template at an index past `replicas`, removed once every group below
  `replicas` is of the new template.

Pure functions of the workload's spec; `gpufleet.sim.cluster` acts on what they say.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: Kubernetes' RollingUpdate defaults for a Deployment.
DEPLOYMENT_DEFAULT: Final = "25%"


@dataclass(frozen=True, slots=True)
class Strategy:
    """How many pods (or groups) a rollout may add above `replicas` and take below it."""

    is_recreate: bool
    max_surge: int
    max_unavailable: int


def _scaled(value: Any, replicas: int, *, round_up: bool) -> int:
    """An int-or-percent of `replicas`, as `intstr.GetScaledValueFromIntOrPercent` does."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = int(text[:-1])
        except ValueError:
            return 0
        exact = replicas * percent / 100
        return max(0, math.ceil(exact) if round_up else math.floor(exact))
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def _fenceposts(surge: Any, unavailable: Any, replicas: int) -> tuple[int, int]:
    max_surge = _scaled(surge, replicas, round_up=True)
    max_unavailable = _scaled(unavailable, replicas, round_up=False)
    if max_surge == 0 and max_unavailable == 0:
        max_unavailable = 1
    return max_surge, max_unavailable


def deployment_strategy(spec: Mapping[str, Any], replicas: int) -> Strategy:
    """A Deployment's strategy (see the module docstring)."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return Strategy(True, 0, replicas)
    rolling = strategy.get("rollingUpdate") or {}
    surge, unavailable = _fenceposts(
        rolling.get("maxSurge", DEPLOYMENT_DEFAULT),
        rolling.get("maxUnavailable", DEPLOYMENT_DEFAULT),
        replicas,
    )
    return Strategy(False, surge, unavailable)


def lws_strategy(spec: Mapping[str, Any], replicas: int) -> Strategy:
    """A LeaderWorkerSet's strategy, in groups (see the module docstring)."""
    rollout = spec.get("rolloutStrategy") or {}
    config = rollout.get("rollingUpdateConfiguration") or {}
    surge, unavailable = _fenceposts(
        config.get("maxSurge", 0), config.get("maxUnavailable", 1), replicas
    )
    return Strategy(False, surge, unavailable)
