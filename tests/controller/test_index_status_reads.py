"""The index's reads of a status write against the plain reads of the whole object: on every
version of a simulated run's replicas, what the index reads after the previous version was
read (only the status validated and converted again) equals `read_replica` of the version."""

from __future__ import annotations

from typing import Any

from gpufleet.api import parse_object, parse_status_change
from gpufleet.bench.simulate import fleet_scenario
from gpufleet.controller.index import HubIndex, read_replica
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.store.port import MODEL_REPLICA


def _versions() -> list[list[dict[str, Any]]]:
    """Each replica's versions, in order, in a short simulated run."""
    scenario = fleet_scenario(2, 6, 900, 12, 3)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(900)
    changes, _ = fleet.hub.changes(0, [MODEL_REPLICA])
    versions: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for change in changes:
        versions.setdefault((change.namespace or "", change.name), []).append(change.obj)
    return list(versions.values())


def test_a_replica_read_after_its_last_version_reads_as_the_whole_object() -> None:
    index = HubIndex()
    reads = status_writes = 0
    for versions in _versions():
        for last, obj in zip([None, *versions], versions, strict=False):
            if last is not None and parse_status_change(last, parse_object(last), obj):
                status_writes += 1
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            core, error = index.put(MODEL_REPLICA, key, obj).parsed
            assert (core, error) == read_replica(obj)
            assert core is None or core.signature == (
                obj["metadata"]["uid"],
                obj["metadata"]["resourceVersion"],
            )
            reads += 1
    assert status_writes > reads // 3  # the status path is the one mostly taken
