"""Issue 26 §2: the agent writes the hub's proportional requests (the replica member's
`hostRequests`) into the pod template where the template requests none, so the pod asks what
the hub fitted and the agent's node choice checked."""

from __future__ import annotations

from typing import Any

from gpufleet.agent.materialize import with_host_requests
from gpufleet.agent.steer import HOST_CPU, HOST_MEMORY, member_demand
from gpufleet.core.pod_requests import pod_requests

SIZED = {"milliCpu": 5750, "memory": 23 * 2**30}


def spec(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"containers": list(containers)}


def test_unrequested_cpu_and_memory_are_written() -> None:
    engine = {"name": "engine", "image": "vllm"}
    written = with_host_requests(engine, spec(engine), SIZED)
    assert pod_requests(spec(written)) == (5750, 23 * 2**30)
    assert engine == {"name": "engine", "image": "vllm"}  # the input is not changed


def test_explicit_requests_win_resource_by_resource() -> None:
    engine = {"name": "engine", "resources": {"requests": {"cpu": "2"}, "limits": {"x": "1"}}}
    written = with_host_requests(engine, spec(engine), SIZED)
    assert pod_requests(spec(written)) == (2000, 23 * 2**30)
    assert written["resources"]["limits"] == {"x": "1"}
    # A sidecar's memory request counts as the pod's: the engine gets no memory written.
    sidecar = {"name": "proxy", "resources": {"requests": {"memory": "1Gi"}}}
    written = with_host_requests(engine, spec(engine, sidecar), SIZED)
    assert "memory" not in written["resources"]["requests"]


def test_the_node_choice_reads_the_same_figures() -> None:
    member = {
        "deviceRequests": [{"name": "gpu", "driver": "gpu.nvidia.com", "count": 1}],
        "template": {
            "spec": {"containers": [{"name": "e", "resources": {"requests": {"cpu": "2"}}}]}
        },
        "hostRequests": SIZED,
    }
    demand = dict(member_demand(member) or ())
    assert (demand[HOST_CPU], demand[HOST_MEMORY]) == (2000, 23 * 2**30)
