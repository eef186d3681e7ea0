"""`parse_status_change` against its oracle, `parse_object` of the whole body: on every status
write of a simulated run's clusters and replicas, and on status writes that break a rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.api import ValidationFailed, parse_object, parse_status_change
from gpufleet.bench.simulate import fleet_scenario
from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.store.port import INFERENCE_CLUSTER, MODEL_REPLICA, Kind


def _versions(kind: Kind) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each (previous, next) version of one object of `kind` in a short simulated run."""
    scenario = fleet_scenario(2, 6, 900, 12, 3)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(900)
    changes, _ = fleet.hub.changes(0, [kind])
    last: dict[tuple[str, str], dict[str, Any]] = {}
    pairs = []
    for change in changes:
        key = (change.namespace or "", change.name)
        if key in last:
            pairs.append((last[key], change.obj))
        last[key] = change.obj
    return pairs


@pytest.mark.parametrize("kind", [INFERENCE_CLUSTER, MODEL_REPLICA], ids=lambda k: k.kind)
def test_every_status_write_of_a_run_parses_as_the_whole_body(kind: Kind) -> None:
    pairs = _versions(kind)
    reused = 0
    for before, after in pairs:
        got = parse_status_change(before, parse_object(before), after)
        if got is not None:
            reused += 1
            assert got == parse_object(after)
            assert got.model_fields_set == parse_object(after).model_fields_set
            assert got.to_manifest() == parse_object(after).to_manifest()
    assert reused > len(pairs) // 2  # status writes are most of the versions


def _a_cluster_write() -> tuple[dict[str, Any], dict[str, Any]]:
    for before, after in _versions(INFERENCE_CLUSTER):
        if before.get("status") and (after["status"].get("gpuPools") or []):
            return copy.deepcopy(before), copy.deepcopy(after)
    raise AssertionError("no cluster status write with pools")


def _dup_pool(status: dict[str, Any]) -> None:
    status["gpuPools"].append(copy.deepcopy(status["gpuPools"][0]))


def _bad_type(status: dict[str, Any]) -> None:
    status["gpuPools"][0]["nodes"] = "many"


def _unknown_field(status: dict[str, Any]) -> None:
    status["surprise"] = 1


def _bad_epoch(status: dict[str, Any]) -> None:
    status["agent"] = {"identity": "a", "leaseEpoch": -1}


@pytest.mark.parametrize("breaks", [_dup_pool, _bad_type, _unknown_field, _bad_epoch])
def test_a_status_that_breaks_a_rule_is_left_to_the_whole_parse(breaks: Any) -> None:
    before, after = _a_cluster_write()
    breaks(after["status"])
    with pytest.raises(ValidationFailed):
        parse_object(after)
    assert parse_status_change(before, parse_object(before), after) is None


def test_anything_but_the_status_changed_is_left_to_the_whole_parse() -> None:
    before, after = _a_cluster_write()
    parsed = parse_object(before)
    for change in (
        lambda o: o["metadata"].setdefault("labels", {}).update({"new": "label"}),
        lambda o: o["spec"]["nodePools"][0].update({"nodeCount": 1}),
        lambda o: o.pop("status"),
    ):
        changed = copy.deepcopy(after)
        change(changed)
        assert parse_status_change(before, parsed, changed) is None


def test_a_first_status_after_none_is_a_status_write() -> None:
    """A replica created without a status and given its first one reads as the whole parse."""
    firsts = [(b, a) for b, a in _versions(MODEL_REPLICA) if "status" not in b and a.get("status")]
    assert firsts
    for before, after in firsts:
        got = parse_status_change(before, parse_object(before), after)
        assert got is not None
        assert got == parse_object(after)
        assert got.to_manifest() == parse_object(after).to_manifest()


def test_a_resource_version_that_is_not_a_string_is_left_to_the_whole_parse() -> None:
    before, after = _a_cluster_write()
    after["metadata"]["resourceVersion"] = 7
    with pytest.raises(ValidationFailed):
        parse_object(after)
    assert parse_status_change(before, parse_object(before), after) is None
