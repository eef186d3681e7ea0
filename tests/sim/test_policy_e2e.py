"""End to end in the simulator (the real agent and controller): with the default cluster
policy, a deployment whose pod template asks for the node's network is never materialized on
the cluster, its ReplicaObservation says why, and ordinary deployments run beside it."""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.sim.run import build_fleet, timeline_runner
from gpufleet.sim.scenario import builtin_text, parse_scenario_text


def _scenario_text() -> str:
    doc: dict[str, Any] = yaml.safe_load(builtin_text("quickstart"))
    doc.pop("checks")
    doc["timeline"] = []
    doc["end"] = "1m"
    hostile = doc["manifests"][0]
    template = hostile["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]
    hostile["spec"] = {
        **hostile["spec"],
        "template": {
            "spec": {
                **hostile["spec"]["template"]["spec"],
                "engines": [
                    {
                        **hostile["spec"]["template"]["spec"]["engines"][0],
                        "members": [
                            {
                                **hostile["spec"]["template"]["spec"]["engines"][0]["members"][0],
                                "template": {"spec": {**template["spec"], "hostNetwork": True}},
                            }
                        ],
                    }
                ],
            }
        },
    }
    text: str = yaml.safe_dump(doc)
    return text


def test_a_refused_deployment_never_reaches_the_cluster() -> None:
    scenario = parse_scenario_text(_scenario_text(), "policy-e2e")
    fleet, _ = build_fleet(scenario, scenario.controller.accounting)
    timeline_runner(fleet, scenario)(scenario.end_s)
    snap = fleet.snapshot()
    workloads = sorted(o["metadata"]["name"] for o in snap["solo/Deployment.apps/v1"])
    refused = "gemma-2-9b"
    assert workloads and not any(w.startswith(refused) for w in workloads)
    assert not any(
        o["metadata"]["name"].startswith(refused)
        for o in snap.get("solo/ResourceClaimTemplate.resource.k8s.io/v1", [])
    )
    [observation] = [
        o
        for o in snap["hub/ReplicaObservation.gpufleet.io/v1alpha1"]
        if o["spec"]["replicaName"].partition(".")[2].startswith(refused)  # <namespace>.<name>
    ]
    status = observation["status"]
    assert status["podsScheduled"] is False
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PolicyAllowed",
        "False",
        "PolicyDenied",
    )
    assert "spec.engines[0].members[0].template.spec.hostNetwork" in condition["message"]
    # The namespace the agent made for the replicas is labelled for Pod Security Admission.
    [namespace] = [o for o in snap["solo/Namespace.v1"] if o["metadata"]["name"] == "ml-team"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    # The hub accepted the report (it parses observations strictly): the replica is observed.
    [replica] = [
        o
        for o in snap["hub/ModelReplica.gpufleet.io/v1alpha1"]
        if o["metadata"]["name"].startswith(f"ml-team.{refused}")
    ]
    [scheduled] = [c for c in replica["status"]["conditions"] if c["type"] == "ModelPodsScheduled"]
    # ... and the controller says why on the ModelReplica: the agent's refusal, with its fields.
    assert (scheduled["status"], scheduled["reason"]) == ("False", "PolicyDenied")
    assert "spec.engines[0].members[0].template.spec.hostNetwork" in scheduled["message"]
