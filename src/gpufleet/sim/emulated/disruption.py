"""Evictions and drains of one emulated cluster, guarded by PodDisruptionBudgets.

`refusal(store, pod)` is the API server's eviction rule (the `pods/eviction` subresource): a
pod no `policy/v1` PodDisruptionBudget selects is evicted; one a budget selects is evicted
only while the budget allows a disruption; otherwise the eviction is refused (HTTP 429, "Cannot
evict pod as it would violate the pod's disruption budget"). A pod that is not healthy (Ready)
is evicted regardless when the budget's `unhealthyPodEvictionPolicy` is `AlwaysAllow`, and with
the default `IfHealthyBudget` while the budget is met (healthy >= desired healthy). A pod two
budgets select is refused (the API server answers 500 and evicts nothing).

`budget_counts` is the disruption controller's arithmetic, computed when asked rather than
written to the budget's status: the budget's live pods (selected by `selector.matchLabels`; a
`matchExpressions` is not modelled), `currentHealthy` the Ready ones, `desiredHealthy`
`minAvailable` or, for `maxUnavailable`, the pods the budget's controllers want (the scale of
each owning Deployment, `replicas * size` of a LeaderWorkerSet) less `maxUnavailable` (either
an int or a percentage, rounded up as Kubernetes rounds), `disruptionsAllowed = max(0,
currentHealthy - desiredHealthy)`. A pod with no controller makes a `maxUnavailable` budget
allow nothing (the real controller cannot find its scale either). An eviction of a healthy pod
leaves it terminating, so the next one counts one fewer healthy: the decrement of
`disruptionsAllowed` the API server writes.

`Drains` is `kubectl drain`'s loop: each drained node's live pods are evicted on every pass;
a refused eviction is retried `RETRY_S` later (kubectl's interval) until the pod can go or is
gone; a drain is done when no live pod is left on its node (it has no `--timeout`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.emulated.objects import is_alive
from gpufleet.sim.emulated.sim_store import SimStore
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    POD_DISRUPTION_BUDGET,
    NotFound,
    Obj,
)

#: How long `kubectl drain` waits before it tries a refused eviction again.
RETRY_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class BudgetCounts:
    """A budget's status as the disruption controller would write it."""

    current_healthy: int
    desired_healthy: int
    disruptions_allowed: int


def is_healthy(pod: Obj) -> bool:
    """Live and Ready (what the disruption controller counts as healthy)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return is_alive(pod) and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def _selects(budget: Obj, pod: Obj) -> bool:
    wanted = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    have = pod["metadata"].get("labels") or {}
    return bool(wanted) and all(have.get(k) == v for k, v in wanted.items())


def _scaled(value: Any, total: int) -> int:
    """An IntOrString of `total`: an int, or a percentage rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _expected(store: SimStore, pods: list[Obj]) -> int | None:
    """The pods the budget's controllers want; None when a pod has no controller."""
    total = 0
    seen: set[str] = set()
    for pod in pods:
        ref = next(
            (r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None
        )
        if ref is None:
            return None
        if ref["uid"] in seen:
            continue
        seen.add(ref["uid"])
        namespace = pod["metadata"].get("namespace")
        if ref["kind"] == DEPLOYMENT.kind:
            owner = store.peek_one(DEPLOYMENT, ref["name"], namespace)
            total += int((owner or {}).get("spec", {}).get("replicas", 1)) if owner else 0
        elif ref["kind"] == LEADER_WORKER_SET.kind:
            owner = store.peek_one(LEADER_WORKER_SET, ref["name"], namespace)
            if owner is not None:
                spec = owner["spec"]
                size = int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
                total += int(spec.get("replicas", 1)) * size
        else:
            return None
    return total


def budget_counts(store: SimStore, budget: Obj) -> BudgetCounts:
    """What the disruption controller computes for `budget` (see the module)."""
    namespace = budget["metadata"].get("namespace")
    pods = [p for p in store.peek(POD, namespace) if is_alive(p) and _selects(budget, p)]
    healthy = sum(1 for p in pods if is_healthy(p))
    spec = budget.get("spec") or {}
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], len(pods))
    else:
        expected = _expected(store, pods)
        if expected is None:
            return BudgetCounts(healthy, healthy + 1, 0)
        desired = expected - _scaled(spec.get("maxUnavailable", 0), expected)
    return BudgetCounts(healthy, desired, max(0, healthy - desired))


def refusal(store: SimStore, pod: Obj) -> str | None:
    """None when the API server would evict `pod`; else why it refuses (see the module)."""
    namespace = pod["metadata"].get("namespace")
    budgets = [b for b in store.peek(POD_DISRUPTION_BUDGET, namespace) if _selects(b, pod)]
    if not budgets:
        return None
    if len(budgets) > 1:
        names = ", ".join(sorted(b["metadata"]["name"] for b in budgets))
        return f"pod {pod['metadata']['name']} is selected by more than one budget ({names})"
    budget = budgets[0]
    counts = budget_counts(store, budget)
    if not is_healthy(pod):
        policy = (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or counts.current_healthy >= counts.desired_healthy:
            return None
    elif counts.disruptions_allowed > 0:
        return None
    return (
        f"Cannot evict pod as it would violate the pod's disruption budget "
        f"{budget['metadata']['name']}: {counts.current_healthy} healthy, "
        f"{counts.desired_healthy} desired, {counts.disruptions_allowed} disruptions allowed"
    )


@dataclass(slots=True)
class Drains:
    """`kubectl drain`'s evictions, retried until each drained node has no live pod."""

    store: SimStore
    loop: EventLoop
    wake_at: Callable[[datetime], None]
    #: The nodes being drained, in the order their drains began.
    nodes: list[str] = field(default_factory=list)
    #: Every refused eviction: (time, pod namespace/name, why), for tests and reports.
    refused: list[tuple[datetime, str, str]] = field(default_factory=list)
    #: Every eviction made: (time, pod namespace/name).
    evicted: list[tuple[datetime, str]] = field(default_factory=list)
    _retry_at: datetime | None = None

    def drain(self, node: str) -> None:
        """Begin draining `node` (already cordoned) and evict what may go at once."""
        if node not in self.nodes:
            self.nodes.append(node)
        self._retry_at = None
        self.run()

    def forget(self, node: str) -> None:
        """The node is gone: its drain with it."""
        if node in self.nodes:
            self.nodes.remove(node)

    def run(self) -> None:
        if not self.nodes:
            return
        if self._retry_at is not None and self.loop.now < self._retry_at:
            self.wake_at(self._retry_at)  # the cluster forgets its timers as a tick begins
            return
        self._retry_at = None
        for node in list(self.nodes):
            if not self._evict_from(node):
                self.nodes.remove(node)
        if self.nodes:
            self._retry_at = self.loop.now + timedelta(seconds=RETRY_S)
            self.wake_at(self._retry_at)

    def _evict_from(self, node: str) -> bool:
        """Evict every live pod on `node` that may go; whether one is left (refused)."""
        left = False
        for pod in list(self.store.pods_on(node)):
            if not is_alive(pod):
                continue
            meta: Mapping[str, Any] = pod["metadata"]
            ref = f"{meta.get('namespace')}/{meta['name']}"
            why = refusal(self.store, pod)
            if why is not None:
                self.refused.append((self.loop.now, ref, why))
                left = True
                continue
            with contextlib.suppress(NotFound):
                self.store.delete(POD, meta["name"], meta.get("namespace"))
                self.evicted.append((self.loop.now, ref))
        return left
