"""End to end in the simulator (the real agent and controller): with the default cluster
policy, a deployment whose pod template asks for the node's network is never materialized on
the cluster, the hub re-places it at once saying why (the agent's refusal), and ordinary
deployments run beside it."""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.sim.run.runner import build_fleet, timeline_runner
from gpufleet.sim.scenario.load import builtin_text, parse_scenario_text


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
    # The namespace the agent made for the replicas is labelled for Pod Security Admission.
    [namespace] = [o for o in snap["solo/Namespace.v1"] if o["metadata"]["name"] == "ml-team"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    # The hub accepted the agent's report (it parses observations strictly) and re-placed the
    # refused replica at once (controller/replace.py): deleted, with an event naming the
    # agent's refusal and its fields, and the only cluster avoided for the backoff.
    assert not any(
        refused in o["metadata"]["name"]  # <deployment namespace>.<name> on the hub
        for o in snap["hub/ModelReplica.gpufleet.io/v1alpha1"]
    )
    [replaced] = [e for e in snap["hub/Event.v1"] if e["reason"] == "Replaced"]
    assert replaced["involvedObject"]["name"] == refused
    assert replaced["message"].startswith(f"deleted replica {refused}")
    assert "PolicyDenied" in replaced["message"]
    assert "spec.engines[0].members[0].template.spec.hostNetwork" in replaced["message"]
    assert "cluster solo avoided for 2m (repeat 1" in replaced["message"]
    [deployment] = [
        o
        for o in snap["hub/ModelDeployment.gpufleet.io/v1alpha1"]
        if o["metadata"]["name"] == refused
    ]
    [scheduled] = [
        c for c in deployment["status"]["conditions"] if c["type"] == "ReplicasScheduled"
    ]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "BackingOff")
