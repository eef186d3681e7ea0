"""A `claim: DevicePlugin` device (issue 27 section 1): validated (`resourceName` an extended
resource name, required then and only then), converted, and counted by the core under its
resource name, so a device-plugin pool's histogram (keyed `nvidia.com/gpu` by the agent) is
read as a DRA pool's is; its requests resolve to that name, which materialize writes as limits."""

from __future__ import annotations

from typing import Any

import pytest

from builders_api import device, inference_class
from gpufleet.agent.materialize import materialize
from gpufleet.api import ValidationFailed, parse_object
from gpufleet.api.convert import devices_from_class
from gpufleet.core.capacity import class_facts
from gpufleet.core.matching import match_member
from gpufleet.core.model import DeviceRequest, Member

GPU = "nvidia.com/gpu"


def plugin_device(**fields: Any) -> dict[str, Any]:
    d = device(count=8, claim="DevicePlugin", **{"resourceName": GPU, **fields})
    del d["deviceClassName"]
    return d


def test_a_device_plugin_class_is_valid_and_counts_under_its_resource() -> None:
    klass = parse_object(inference_class("h100-plugin", plugin_device()))
    devices = devices_from_class(klass)  # type: ignore[arg-type]
    assert devices[0].key == GPU
    facts = class_facts(devices)
    assert (facts.drivers, facts.full) == ((GPU,), (8,))
    match = match_member(Member(requests=(DeviceRequest(name="gpu", count=2),)), devices)
    (resolved,) = match.resolved
    assert (resolved.driver, resolved.count) == (GPU, 2)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"resourceName": None}, "is required when claim is DevicePlugin"),
        ({"resourceName": "gpu"}, "'gpu' is not an extended resource name"),
        ({"resourceName": "kubernetes.io/gpu"}, "'kubernetes.io/gpu' is not an extended"),
        ({"resourceName": "Nvidia.com/gpu"}, "'Nvidia.com/gpu' is not an extended"),
    ],
)
def test_a_bad_resource_name_is_refused_at_its_field(fields: dict[str, Any], message: str) -> None:
    d = plugin_device(**fields)
    if d["resourceName"] is None:
        del d["resourceName"]
    with pytest.raises(ValidationFailed) as raised:
        parse_object(inference_class("c", d))
    (error,) = raised.value.errors
    assert error.path == "spec.devices[0].resourceName"
    assert error.message.startswith(message)


def test_a_resource_name_on_a_dra_device_is_refused() -> None:
    with pytest.raises(ValidationFailed) as raised:
        parse_object(inference_class("c", device(resourceName=GPU)))
    (error,) = raised.value.errors
    assert (error.path, error.message) == (
        "spec.devices[0].resourceName",
        "is allowed only when claim is DevicePlugin",
    )


def test_materialize_writes_the_extended_resource_instead_of_a_claim() -> None:
    member = {
        "role": "Standalone",
        "nodePoolName": "plugin",
        "deviceRequests": [{"name": "gpu", "deviceClassName": GPU, "driver": GPU, "count": 2}],
        "template": {"spec": {"containers": [{"name": "engine", "image": "vllm"}]}},
    }
    replica = {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": "r", "namespace": "ml", "generation": 1, "labels": {}},
        "spec": {
            "deploymentName": "d",
            "clusterName": "a",
            "engines": [{"name": "main", "copies": 1, "members": [member]}],
        },
    }
    made = materialize(replica)
    assert "ResourceClaimTemplate" not in {o["kind"] for o in made}
    (deployment,) = [o for o in made if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod
    assert pod["containers"][0]["resources"] == {"limits": {GPU: "2"}}
