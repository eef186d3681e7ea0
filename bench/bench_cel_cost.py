"""How long the dearest selectors the CEL cost budget admits take to evaluate (not a test).

For each shape of costly selector (nested comprehensions, device map reads, library calls,
string work, regular expressions), grows it to the largest size `compile_selector` accepts,
then times one evaluation against a device at the schema's bounds (30 string attributes of
64 characters). One evaluation holds the GIL throughout: this is the longest a selector can
keep the Lease renewal and the probes waiting (docs/devices.md, "Cost budget").

    .venv/bin/python bench/bench_cel_cost.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.cel import CelCompileError, compile_selector
from gpufleet.cel.cost import estimate_cost
from gpufleet.cel.syntax import parse
from gpufleet.core.model import Attribute, AttributeKind, Device, DriverName

DOMAIN = "gpu.nvidia.com"


def numbers(n: int) -> str:
    return "[" + ",".join(str(i) for i in range(n)) + "]"


def regex(n: int) -> str:
    pattern = "(a|b)*c" * n
    return f'device.attributes["{DOMAIN}"].all(k, !device.attributes["{DOMAIN}"][k].matches("{pattern}"))'


SHAPES: dict[str, Callable[[int], str]] = {
    "two nested all": lambda n: f"{numbers(n)}.all(x, {numbers(n)}.all(y, x != y + 1000))",
    "three nested": lambda n: (
        f"{numbers(n)}.all(x, {numbers(n)}.all(y, !{numbers(n)}.exists(z, z == 1000)))"
    ),
    "three nested map": lambda n: (
        f"{numbers(n)}.map(x, {numbers(n)}.map(y, {numbers(n)}.map(z, z))).size() > 0"
    ),
    "filter": lambda n: f"{numbers(n)}.filter(x, x >= 0).size() > 0",
    "attribute reads": lambda n: (
        f'{numbers(n)}.all(x, {numbers(n)}.all(y, device.attributes["{DOMAIN}"].a1 != "z"))'
    ),
    "quantity calls": lambda n: (
        f"{numbers(n)}.all(x, {numbers(n)}.all(y, "
        f'device.capacity["{DOMAIN}"].m.isGreaterThan(quantity("1"))))'
    ),
    "string compare": lambda n: (
        f'{numbers(n)}.all(x, device.attributes["{DOMAIN}"].all(k, '
        f'device.attributes["{DOMAIN}"][k] != "{"y" * 64}"))'
    ),
    "regex": regex,
}


def largest_admitted(make: Callable[[int], str]) -> int:
    low, high = 1, 4000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            compile_selector(make(middle))
            low = middle
        except CelCompileError:
            high = middle - 1
    return low


def main() -> None:
    attributes = {f"{DOMAIN}/a{i}": Attribute(AttributeKind.STRING, "x" * 64) for i in range(30)}
    worst_s = 0.0
    for name, make in SHAPES.items():
        n = largest_admitted(make)
        expression = make(n)
        selector = compile_selector(expression)
        on_engine = estimate_cost(parse(expression), is_this_engine=True)
        device = Device(
            name="gpu", driver=DriverName(DOMAIN), attributes=attributes, capacity={"m": "1Gi"}
        )
        started = time.perf_counter()
        selector.matches(device)
        elapsed_s = time.perf_counter() - started
        worst_s = max(worst_s, elapsed_s)
        print(
            f"{name:18} n={n:5}  cost {selector.estimated_cost:>9,}  "
            f"on this engine {on_engine:>9,}  {elapsed_s:6.3f} s"
        )
    print(f"worst: {worst_s:.3f} s for one evaluation")


if __name__ == "__main__":
    main()
