"""Every condition the hub controller writes follows metav1.Condition: it carries the
`observedGeneration` of the object it was computed from (issue 15, point 4), on every kind it
writes conditions on, through a whole run in which specs change (scaling, re-stamped
replicas)."""

from __future__ import annotations

import pytest

from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import load_scenario

#: The condition types the controller writes, by kind.
OWNED = {
    "InferenceCluster": {"PoolsPublished", "Ready"},
    "ModelDeployment": {"ReplicasScheduled"},
    "ModelReplica": {"ModelPodsScheduled"},
}
#: Ready reasons the controller writes (another writer's Ready is left as it is).
CONTROLLER_READY = {"AgentReporting", "AgentExpired", "AgentNotReporting"}


@pytest.mark.parametrize("name", ["quickstart", "stale-expired", "race"])
def test_each_condition_the_controller_writes_names_its_generation(name: str) -> None:
    scenario = load_scenario(name)
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(scenario.end_s)
    seen = 0
    for key, objs in fleet.snapshot().items():
        if not key.startswith("hub/"):
            continue
        for obj in objs:
            owned = OWNED.get(obj["kind"], set())
            for c in (obj.get("status") or {}).get("conditions") or []:
                if c["type"] not in owned:
                    continue
                if c["type"] == "Ready" and c["reason"] not in CONTROLLER_READY:
                    continue
                seen += 1
                assert c.get("observedGeneration") == obj["metadata"]["generation"], (key, c)
                assert set(c) == {
                    "type",
                    "status",
                    "observedGeneration",
                    "lastTransitionTime",
                    "reason",
                    "message",
                }, (key, c)
    assert seen > 3
