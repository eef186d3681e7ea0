"""The exact packing optimum of a static instance, by the pattern formulation (highspy).

An instance is one pool of `nodes` identical nodes with `gpus_per_node` GPUs each, and a list
of replicas; a replica is a multiset of pods, each pod needing some GPUs on one node. The
formulation (one integer per feasible node pattern, as in cutting stock):

- a *pattern* is a multiset of pod sizes that fits one node (sum of sizes <= gpus_per_node);
  `x_p` >= 0 integer counts the nodes packed with pattern p;
- `y_t` (0..available_t, integer) counts the replicas of shape t that are admitted; a shape is
  a vector of pod counts by size (a 4-GPU replica: one 4; a P/D pair: two 2s and one 4; a
  2-node gang of 8-GPU pods on 8-GPU nodes: two 8s);
- for every pod size s: sum_p x_p * pattern_p[s] >= sum_t y_t * shape_t[s] (every admitted
  pod has a slot of its size), and sum_p x_p <= nodes.

`max_gpus` maximises the GPUs of admitted replicas (all pods of a replica or none);
`min_nodes` minimises the nodes needed to pack a fixed demand. Both are exact for pods that
may share nodes freely. A gang's pods must go to distinct nodes; the formulation does not say
so, which is exact when each gang pod fills a node (as in our traces: 8-GPU gang pods on
8-GPU nodes, 4-GPU on 4-GPU) and otherwise a relaxation (the optimum is then an upper bound).

highspy is optional (`pip install highspy`): `is_available()` says whether it imports; every
function raises `SolverUnavailable` without it. Each solve runs single-threaded with a time
limit; a solve that stops at the limit reports its bound (`Solution.is_optimal` False).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: The shape of a replica: pod size (GPUs) -> number of such pods.
Shape = tuple[tuple[int, int], ...]

TIME_LIMIT_S = 20.0


class SolverUnavailable(RuntimeError):
    """highspy is not installed."""


@lru_cache(maxsize=1)
def _highspy() -> Any:
    try:
        return importlib.import_module("highspy")
    except ImportError:
        return None


def is_available() -> bool:
    return _highspy() is not None


def solver_version() -> str:
    module = _highspy()
    if module is None:
        return ""
    try:
        from importlib.metadata import version

        return f"highspy {version('highspy')}"
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return "highspy"


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ on construction, before `output_flag` can be set."""
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no fd 1
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _new_solver() -> Any:
    module = _highspy()
    if module is None:
        raise SolverUnavailable("highspy is not installed (pip install highspy)")
    with _quiet_stdout():
        h = module.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", TIME_LIMIT_S)
    return h


def patterns(sizes: Sequence[int], gpus_per_node: int) -> list[tuple[int, ...]]:
    """Every non-empty count vector over `sizes` that fits one node (maximal or not)."""
    sizes = sorted(set(sizes))
    out: list[tuple[int, ...]] = []

    def extend(i: int, room: int, acc: list[int]) -> None:
        if i == len(sizes):
            if any(acc):
                out.append(tuple(acc))
            return
        for n in range(room // sizes[i] + 1):
            acc.append(n)
            extend(i + 1, room - n * sizes[i], acc)
            acc.pop()

    extend(0, gpus_per_node, [])
    return out


@dataclass(frozen=True, slots=True)
class Solution:
    value: float
    is_optimal: bool
    #: Replicas admitted per shape (max_gpus only).
    admitted: Mapping[Shape, int]


def _status_optimal(h: Any) -> bool:
    return str(h.getModelStatus()).endswith("kOptimal")


def max_gpus(available: Mapping[Shape, int], nodes: int, gpus_per_node: int) -> Solution:
    """The most GPUs of whole replicas (at most `available[shape]` of each) on the pool."""
    shapes = [s for s in sorted(available) if available[s] > 0 and _fits(s, gpus_per_node)]
    if not shapes or nodes <= 0:
        return Solution(0.0, True, {})
    sizes = sorted({size for s in shapes for size, _ in s})
    pats = patterns(sizes, gpus_per_node)
    h = _new_solver()
    x = h.addIntegrals(len(pats), lb=0, ub=nodes)
    y = [h.addIntegral(lb=0, ub=available[s]) for s in shapes]
    for k, size in enumerate(sizes):
        supply = sum(x[p] * pat[k] for p, pat in enumerate(pats) if pat[k])
        demand = sum(y[t] * dict(s).get(size, 0) for t, s in enumerate(shapes) if dict(s).get(size))
        h.addConstr(supply - demand >= 0)
    h.addConstr(sum(x[p] for p in range(len(pats))) <= nodes)
    gpus = [sum(size * n for size, n in s) for s in shapes]
    h.maximize(sum(y[t] * gpus[t] for t in range(len(shapes))))
    values = h.vals(y)
    admitted = {s: round(float(v)) for s, v in zip(shapes, values, strict=True) if round(float(v))}
    value = float(sum(gpus[t] * admitted.get(s, 0) for t, s in enumerate(shapes)))
    return Solution(value, _status_optimal(h), admitted)


def min_nodes(demand: Mapping[int, int], gpus_per_node: int) -> Solution:
    """The fewest nodes that hold `demand` (pod size -> pods); inf if a pod fits no node."""
    demand = {s: n for s, n in demand.items() if n > 0}
    if not demand:
        return Solution(0.0, True, {})
    if max(demand) > gpus_per_node:
        return Solution(float("inf"), True, {})
    sizes = sorted(demand)
    pats = patterns(sizes, gpus_per_node)
    h = _new_solver()
    upper = sum(demand.values())
    x = h.addIntegrals(len(pats), lb=0, ub=upper)
    for k, size in enumerate(sizes):
        h.addConstr(sum(x[p] * pat[k] for p, pat in enumerate(pats) if pat[k]) >= demand[size])
    h.minimize(sum(x[p] for p in range(len(pats))))
    return Solution(float(round(h.getInfo().objective_function_value)), _status_optimal(h), {})


def longest_packable_prefix(
    shapes: Sequence[Shape], nodes: int, gpus_per_node: int
) -> tuple[int, bool]:
    """The largest k such that the first k replicas all fit the pool together, and whether
    every solve proved optimality. Feasibility is monotone in k: binary search."""
    proven = True

    def fits(k: int) -> bool:
        nonlocal proven
        demand: dict[int, int] = {}
        for shape in shapes[:k]:
            for size, n in shape:
                demand[size] = demand.get(size, 0) + n
        solution = min_nodes(demand, gpus_per_node)
        proven = proven and solution.is_optimal
        return solution.value <= nodes

    low, high = 0, len(shapes)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low, proven


def _fits(shape: Shape, gpus_per_node: int) -> bool:
    return all(size <= gpus_per_node for size, _ in shape)
