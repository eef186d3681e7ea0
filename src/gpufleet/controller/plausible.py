"""Whether an agent's pool report can be true of the pool and class the hub declares.

An agent's numbers are not trusted blindly (issue 17, point 3). A PoolObservation's status is
checked against its cluster's declared pool (`spec.nodePools[]`) and the pool's InferenceClass:

- `ObservedNodesOverCeiling`: `observedNodes` at most the pool's ceiling, `maxNodeCount` when
  set (an autoscaled pool may legitimately have that many), else `nodeCount`;
- `BucketNodesMismatch`: the histogram's bucket node counts sum to `observedNodes` (the agent
  counts every observed node in exactly one bucket, excluded ones at zero free);
- `FreeOverDevicesPerNode`: each bucket's free devices of a driver at most what one node of the
  class offers of that driver (the sum of the class's device `count`s of that driver; a driver
  the class does not declare offers none);
- `ExcludedOverObserved`: the excluded nodes, summed over reasons, at most `observedNodes`;
- `ValueOutOfRange`: every number an int64 (`extendedResources` included).

Validation (`parse_report`) already made every number a non-negative integer. A report that
breaks a rule is refused for its pool: the controller publishes it without its histogram and
with `HistogramAvailable=False` / `ImplausibleReport` (the rule and the numbers in the
message), so the scheduler counts that pool whole-node, from its declared size, as a pool
without a usable observation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpufleet.api.models import INT64_MAX

IMPLAUSIBLE_REPORT: Final = "ImplausibleReport"


@dataclass(frozen=True, slots=True)
class Implausible:
    """Why a pool report cannot be true: a rule code, its numbers, a human summary."""

    rule: str
    numbers: Mapping[str, int | str]
    summary: str

    @property
    def message(self) -> str:
        numbers = ", ".join(f"{k}={v}" for k, v in self.numbers.items())
        return f"{self.rule}: {self.summary} ({numbers}): whole-node accounting for this pool"


def pool_ceiling(pool: Mapping[str, Any]) -> int:
    """The most nodes a declared pool can have: `maxNodeCount` if set, else `nodeCount`."""
    max_nodes = pool.get("maxNodeCount")
    return int(max_nodes) if max_nodes is not None else int(pool.get("nodeCount", 1))


def devices_per_node(klass: Mapping[str, Any]) -> dict[str, int]:
    """Devices one node of the class offers, per driver (a device plugin's: per extended
    resource, `Device.key`)."""
    per_driver: dict[str, int] = {}
    for device in (klass.get("spec") or {}).get("devices") or []:
        driver = str(device.get("driver", ""))
        if device.get("claim") == "DevicePlugin":  # counted under its extended resource
            driver = str(device.get("resourceName", ""))
        per_driver[driver] = per_driver.get(driver, 0) + int(device.get("count", 1))
    return per_driver


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


def _numbers(status: Mapping[str, Any]) -> Iterator[tuple[str, tuple[object, ...], object]]:
    """Each number of a report: (path format, its arguments, value), in report order (the
    path is formatted only for the one refused: a plausible report has none)."""
    yield "observedNodes", (), status.get("observedNodes")
    for key in ("excludedNodes", "extendedResources"):
        for k, v in (status.get(key) or {}).items():
            yield "{}.{}", (key, k), v
    for i, bucket in enumerate(status.get("freeDevices") or []):
        yield "freeDevices[{}].nodes", (i,), bucket.get("nodes")
        for d, v in bucket.get("free", {}).items():
            yield "freeDevices[{}].free.{}", (i, d), v


def _out_of_range(status: Mapping[str, Any]) -> Implausible | None:
    for path_format, args, value in _numbers(status):
        if not _is_int(value):
            path = path_format.format(*args)
            return Implausible(
                "ValueOutOfRange",
                {"field": path, "value": str(value)[:40], "max": INT64_MAX},
                f"{path} is not an integer between 0 and {INT64_MAX}",
            )
    return None


def _histogram(
    buckets: list[Mapping[str, Any]], observed: int, per_node: Mapping[str, int]
) -> Implausible | None:
    total = sum(int(b["nodes"]) for b in buckets)
    if total != observed:
        return Implausible(
            "BucketNodesMismatch",
            {"bucketNodes": total, "observedNodes": observed},
            "the histogram's buckets do not add up to the observed nodes",
        )
    for i, bucket in enumerate(buckets):
        for driver, free in sorted(bucket.get("free", {}).items()):
            limit = per_node.get(driver, 0)
            if free > limit:
                return Implausible(
                    "FreeOverDevicesPerNode",
                    {"bucket": i, "driver": driver, "free": free, "devicesPerNode": limit},
                    f"a node reported with more free {driver} devices than the class offers",
                )
    return None


def check_pool_report(
    status: Mapping[str, Any], pool: Mapping[str, Any], klass: Mapping[str, Any]
) -> Implausible | None:
    """Why the PoolObservation `status` cannot be true of the declared `pool` (a cluster's
    `spec.nodePools[]` entry) and its InferenceClass `klass`; None when it is plausible."""
    out_of_range = _out_of_range(status)
    if out_of_range is not None:
        return out_of_range
    observed = int(status["observedNodes"])
    ceiling = pool_ceiling(pool)
    if observed > ceiling:
        return Implausible(
            "ObservedNodesOverCeiling",
            {"observedNodes": observed, "ceiling": ceiling},
            f"more nodes observed than pool {pool.get('name')} can have",
        )
    excluded = sum(int(v) for v in (status.get("excludedNodes") or {}).values())
    if excluded > observed:
        return Implausible(
            "ExcludedOverObserved",
            {"excludedNodes": excluded, "observedNodes": observed},
            "more nodes excluded than observed",
        )
    buckets = status.get("freeDevices")
    if buckets is not None:
        return _histogram(list(buckets), observed, devices_per_node(klass))
    return None
