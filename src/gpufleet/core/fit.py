"""Fit pods onto a free-device histogram, pod by pod, independent of pod order.

Model. What one replica puts on one pool is a list of *units*: a unit is either one pod of a
Standalone copy, or the claiming pods of one gang copy (leader and workers), which must land on
distinct nodes. Claimless pods need no device and are never in a unit. A pod is a demand vector
(devices per driver of the pool).

- `fit` (placement) sorts units largest first (largest pod, then total demand, then size, then
  the vectors themselves), and each unit's pods largest first, so the outcome depends only on
  the multiset of units, never on input order (review point 7). Each pod goes where the node
  choice policy predicts; a gang copy's pods each take a node set aside for the rest of that
  copy. It fails at the first pod no node can take, and says which. Standalone copies and the
  engines of a P/D pair may share a node.
- `charge` (existing replicas) never fails: a pod that fits nowhere takes what it can from the
  node(s) with the most of what it needs, which errs toward full. Gang pods of one charged copy
  still go to distinct nodes while there are any.

Which way it errs: the fit is greedy (no backtracking over node choices), so it may refuse a fit
that a cleverer assignment would find; it never overcommits a node: every placed pod's demand is
at most the free vector of the node it takes, which `Assignment` records make checkable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.core.capacity import NodeChoicePolicy, Vector, subtract

#: Pods that must land on distinct nodes (one pod for a Standalone copy), largest first.
Unit = tuple[Vector, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One pod (or, for a charge that fits nowhere, part of one) taken from one node.

    `node` is that node's free vector before, `taken` what was subtracted (== `pod` for a fit).
    `unit` numbers the units of one `fit`/`charge` call: pods of a gang unit took distinct nodes.
    """

    owner: str
    unit: int
    pod: Vector
    node: Vector
    taken: Vector
    is_charge: bool


@dataclass(frozen=True, slots=True)
class FitFailure:
    pod: Vector
    unit_size: int
    #: Pods of all units that found nodes before the failing one.
    placed_pods: int


@dataclass(frozen=True, slots=True)
class FitResult:
    """The histogram after the fit, or the failure (then `free` is the input unchanged)."""

    free: Mapping[Vector, int]
    failure: FitFailure | None
    assignments: tuple[Assignment, ...] = ()

    @property
    def is_fit(self) -> bool:
        return self.failure is None


def _unit_key(unit: Unit) -> tuple[int, int, int, Unit]:
    return (sum(unit[0]), sum(sum(p) for p in unit), len(unit), unit)


def make_unit(pods: Iterable[Vector]) -> Unit:
    return tuple(sorted(pods, key=lambda p: (sum(p), p), reverse=True))


def order_units(units: Iterable[Unit]) -> list[Unit]:
    """The canonical order: largest first, ties broken by the vectors themselves."""
    return sorted(units, key=_unit_key, reverse=True)


def _remove(free: dict[Vector, int], node: Vector) -> None:
    left = free[node] - 1
    if left:
        free[node] = left
    else:
        del free[node]


def _add(free: dict[Vector, int], node: Vector) -> None:
    free[node] = free.get(node, 0) + 1


def fit(
    free: Mapping[Vector, int],
    units: Sequence[Unit],
    policy: NodeChoicePolicy,
    *,
    owner: str = "",
    record: bool = False,
) -> FitResult:
    """Place every unit or none; `units` in any order."""
    remaining = dict(free)
    log: list[Assignment] = []
    placed = 0
    for number, unit in enumerate(order_units(units)):
        aside: list[Vector] = []
        for pod in unit:
            node = policy.choose(remaining, pod)
            if node is None:
                return FitResult(free, FitFailure(pod, len(unit), placed))
            _remove(remaining, node)
            aside.append(subtract(node, pod))
            if record:
                log.append(Assignment(owner, number, pod, node, pod, is_charge=False))
        for node in aside:
            _add(remaining, node)
        placed += len(unit)
    return FitResult(remaining, None, tuple(log))


def _most_useful(free: Mapping[Vector, int], need: Vector) -> Vector | None:
    best: Vector | None = None
    best_key: tuple[int, Vector] | None = None
    for vector, nodes in free.items():
        if nodes <= 0:
            continue
        useful = sum(min(f, n) for f, n in zip(vector, need, strict=True))
        if useful <= 0:
            continue
        key = (useful, vector)
        if best_key is None or key > best_key:
            best, best_key = vector, key
    return best


def charge(
    free: Mapping[Vector, int],
    units: Sequence[Unit],
    policy: NodeChoicePolicy,
    *,
    owner: str = "",
    record: bool = False,
) -> tuple[dict[Vector, int], tuple[Assignment, ...]]:
    """Subtract existing pods; never fails. Returns the new histogram and what was taken."""
    remaining = dict(free)
    log: list[Assignment] = []
    for number, unit in enumerate(order_units(units)):
        aside: list[Vector] = []
        for pod in unit:
            node = policy.choose(remaining, pod)
            if node is not None:
                _remove(remaining, node)
                aside.append(subtract(node, pod))
                if record:
                    log.append(Assignment(owner, number, pod, node, pod, is_charge=True))
                continue
            need = pod
            while any(need):
                spill = _most_useful(remaining, need)
                if spill is None:
                    break
                taken = tuple(min(f, n) for f, n in zip(spill, need, strict=True))
                _remove(remaining, spill)
                aside.append(subtract(spill, taken))
                need = subtract(need, taken)
                if record:
                    log.append(Assignment(owner, number, pod, spill, taken, is_charge=True))
            # Out of distinct nodes: the gang's own nodes are better than dropping the charge.
            while any(need) and aside:
                i, spill = max(
                    enumerate(aside),
                    key=lambda e: (sum(min(f, n) for f, n in zip(e[1], need, strict=True)), e),
                )
                taken = tuple(min(f, n) for f, n in zip(spill, need, strict=True))
                if not any(taken):
                    break
                aside[i] = subtract(spill, taken)
                need = subtract(need, taken)
                if record:
                    log.append(Assignment(owner, number, pod, spill, taken, is_charge=True))
        for node in aside:
            _add(remaining, node)
    return remaining, tuple(log)


def nodes_that_fit(free: Mapping[Vector, int], pod: Vector) -> int:
    return sum(n for v, n in free.items() if all(f >= d for f, d in zip(v, pod, strict=True)))
