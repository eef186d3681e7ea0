"""Every validation rule, one failing case each, with the exact field path and message."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders_api import (
    DELETE,
    bucket,
    device,
    edited,
    engine,
    gang,
    inference_class,
    inference_cluster,
    model_deployment,
    model_replica,
    observation,
    pool_observation,
    prefill_decode,
    replica_observation,
    standalone,
)
from gpufleet.api import FieldError, InferenceCluster, ValidationFailed, parse_object, validate
from gpufleet.api.names import DNS_LABEL_RULE, DNS_SUBDOMAIN_RULE

ENGINE = "spec.template.spec.engines[0]"
MEMBER = f"{ENGINE}.members[0]"
REQUEST = f"{MEMBER}.nodeSelector.devices[0]"
DEVICE = "spec.devices[0]"
POOL = "spec.nodePools[0]"
PUBLISHED = "status.gpuPools[0].observation"


def published(*buckets: dict[str, Any]) -> dict[str, Any]:
    return inference_cluster(
        gpuPools=[{"name": "h100", "nodes": 4, "observation": observation(*buckets)}]
    )


@dataclass(frozen=True)
class Case:
    id: str
    base: Callable[[], dict[str, Any]]
    edits: dict[str, object]
    errors: tuple[FieldError, ...]
    extra: dict[str, object] = field(default_factory=dict)


CASES = [
    # names
    Case(
        "object name is a DNS subdomain",
        model_deployment,
        {"metadata.name": "Llama_3"},
        (FieldError("metadata.name", DNS_SUBDOMAIN_RULE),),
    ),
    Case(
        "namespace is a DNS label",
        model_deployment,
        {"metadata.namespace": "ml.team"},
        (FieldError("metadata.namespace", DNS_LABEL_RULE),),
    ),
    Case(
        "cluster-scoped object has no namespace",
        inference_class,
        {"metadata.namespace": "x"},
        (FieldError("metadata.namespace", "must not be set on a cluster-scoped object"),),
    ),
    Case(
        "pool name is a DNS label",
        inference_cluster,
        {f"{POOL}.name": "GPU_pool"},
        (FieldError(f"{POOL}.name", DNS_LABEL_RULE),),
    ),
    Case(
        "pool name at most 40 characters",
        inference_cluster,
        {f"{POOL}.name": "p" * 41},
        (FieldError(f"{POOL}.name", "must be at most 40 characters"),),
    ),
    Case(
        "device name is a DNS label",
        inference_class,
        {f"{DEVICE}.name": "GPU"},
        (FieldError(f"{DEVICE}.name", DNS_LABEL_RULE),),
    ),
    Case(
        "engine name is a DNS label",
        model_deployment,
        {f"{ENGINE}.name": "Engine"},
        (FieldError(f"{ENGINE}.name", DNS_LABEL_RULE),),
    ),
    Case(
        "request name is a DNS label",
        model_deployment,
        {f"{REQUEST}.name": "g_pu"},
        (FieldError(f"{REQUEST}.name", DNS_LABEL_RULE),),
    ),
    # keyed lists
    Case(
        "devices unique by name",
        inference_class,
        {"spec.devices": [device(), device()]},
        (FieldError("spec.devices[1]", 'duplicate name "gpu" (also at index 0)'),),
    ),
    Case(
        "nodePools unique by name",
        inference_cluster,
        {"spec.nodePools[1]": {"name": "h100", "className": "other"}},
        (FieldError("spec.nodePools[1]", 'duplicate name "h100" (also at index 0)'),),
    ),
    Case(
        "engines unique by name",
        model_deployment,
        {"spec.template.spec.engines": [engine(), engine()]},
        (FieldError("spec.template.spec.engines[1]", 'duplicate name "engine" (also at index 0)'),),
    ),
    Case(
        "taints unique by key and effect",
        inference_cluster,
        {"spec.taints[1]": {"key": "maintenance", "value": "x", "effect": "NoSchedule"}},
        (
            FieldError(
                "spec.taints[1]",
                'duplicate key and effect "maintenance:NoSchedule" (also at index 0)',
            ),
        ),
    ),
    Case(
        "requested devices unique by name",
        model_deployment,
        {f"{MEMBER}.nodeSelector.devices[1]": standalone()["nodeSelector"]["devices"][0]},
        (
            FieldError(
                f"{MEMBER}.nodeSelector.devices[1]", 'duplicate name "gpu" (also at index 0)'
            ),
        ),
    ),
    Case(
        "conditions unique by type",
        lambda: inference_cluster(
            conditions=[{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}]
        ),
        {},
        (FieldError("status.conditions[1]", 'duplicate type "Ready" (also at index 0)'),),
    ),
    # bounds
    Case(
        "replicas at most 1000",
        model_deployment,
        {"spec.replicas": 1001},
        (FieldError("spec.replicas", "must be at most 1000"),),
    ),
    Case(
        "replicas not negative",
        model_deployment,
        {"spec.replicas": -1},
        (FieldError("spec.replicas", "must be at least 0"),),
    ),
    Case(
        "copies at least 1",
        model_deployment,
        {f"{ENGINE}.copies": 0},
        (FieldError(f"{ENGINE}.copies", "must be at least 1"),),
    ),
    Case(
        "request count at most 64",
        model_deployment,
        {f"{REQUEST}.count": 65},
        (FieldError(f"{REQUEST}.count", "must be at most 64"),),
    ),
    Case(
        "device count at least 1",
        inference_class,
        {f"{DEVICE}.count": 0},
        (FieldError(f"{DEVICE}.count", "must be at least 1"),),
    ),
    Case(
        "nodeCount not negative",
        inference_cluster,
        {f"{POOL}.nodeCount": -1},
        (FieldError(f"{POOL}.nodeCount", "must be at least 0"),),
    ),
    Case(
        "maxNodeCount at most 10000",
        inference_cluster,
        {f"{POOL}.maxNodeCount": 10001},
        (FieldError(f"{POOL}.maxNodeCount", "must be at most 10000"),),
    ),
    Case(
        "worker nodes at least 1",
        lambda: model_deployment("g", "ml", engine("e", *gang())),
        {f"{ENGINE}.members[1].worker.nodes": 0},
        (FieldError(f"{ENGINE}.members[1].worker.nodes", "must be at least 1"),),
    ),
    Case(
        "at most 8 node pools",
        inference_cluster,
        {"spec.nodePools": [{"name": f"p{i}", "className": "c"} for i in range(9)]},
        (FieldError("spec.nodePools", "must have at most 8 items"),),
    ),
    Case(
        "at least one device",
        inference_class,
        {"spec.devices": []},
        (FieldError("spec.devices", "must have at least 1 items"),),
    ),
    Case(
        "at most 8 selectors",
        model_deployment,
        {f"{REQUEST}.selectors": [{"cel": "true"}] * 9},
        (FieldError(f"{REQUEST}.selectors", "must have at most 8 items"),),
    ),
    Case(
        "CEL at most 10 KiB",
        model_deployment,
        {f"{REQUEST}.selectors[0].cel": "t" * 10241},
        (FieldError(f"{REQUEST}.selectors[0].cel", "must be at most 10240 characters"),),
    ),
    Case(
        "at most 32 attributes",
        inference_class,
        {f"{DEVICE}.attributes": {f"a{i}": {"int": i} for i in range(33)}},
        (FieldError(f"{DEVICE}.attributes", "must have at most 32 entries"),),
    ),
    Case(
        "maxNodeCount at least minNodeCount",
        inference_cluster,
        {f"{POOL}.minNodeCount": 3, f"{POOL}.maxNodeCount": 2, f"{POOL}.nodeCount": 2},
        (FieldError(f"{POOL}.maxNodeCount", "must be at least minNodeCount (3)"),),
    ),
    Case(
        "nodeCount at most maxNodeCount",
        inference_cluster,
        {f"{POOL}.nodeCount": 5},
        (FieldError(f"{POOL}.nodeCount", "must be at most maxNodeCount (4)"),),
    ),
    # members and engines
    Case(
        "two Standalone members",
        model_deployment,
        {f"{ENGINE}.members": [standalone(), standalone()]},
        (
            FieldError(
                f"{ENGINE}.members",
                "must be exactly one Standalone member, or one Leader "
                "and one Worker (got Standalone, Standalone)",
            ),
        ),
    ),
    Case(
        "Leader without Worker",
        model_deployment,
        {f"{MEMBER}.role": "Leader"},
        (
            FieldError(
                f"{ENGINE}.members",
                "must be exactly one Standalone member, or one Leader and one Worker (got Leader)",
            ),
        ),
    ),
    Case(
        "worker only on Worker",
        model_deployment,
        {f"{MEMBER}.worker": {"nodes": 1}},
        (FieldError(f"{MEMBER}.worker", "is only allowed on a Worker member"),),
    ),
    Case(
        "worker required on Worker",
        lambda: model_deployment("g", "ml", engine("e", *gang())),
        {f"{ENGINE}.members[1].worker": DELETE},
        (FieldError(f"{ENGINE}.members[1].worker", "is required for a Worker member"),),
    ),
    Case(
        "Proportional requests need a nodeSelector",
        lambda: model_deployment("g", "ml", engine("e", *gang())),
        {
            f"{ENGINE}.members[0].nodeSelector": DELETE,
            f"{ENGINE}.members[0].hostRequests": "Proportional",
        },
        (
            FieldError(
                f"{ENGINE}.members[0].hostRequests",
                "Proportional needs a nodeSelector: requests are in proportion to devices",
            ),
        ),
    ),
    Case(
        "hostRequests is Template or Proportional",
        model_deployment,
        {f"{MEMBER}.hostRequests": "Half"},
        (FieldError(f"{MEMBER}.hostRequests", "must be one of 'Template' or 'Proportional'"),),
    ),
    Case(
        "some member has a nodeSelector",
        model_deployment,
        {f"{MEMBER}.nodeSelector": DELETE},
        (FieldError(f"{ENGINE}.members", "at least one member must have a nodeSelector"),),
    ),
    Case(
        "PrefillDecode needs two engines",
        prefill_decode,
        {"spec.template.spec.engines": [engine("prefill", phase="Prefill")]},
        (
            FieldError(
                "spec.template.spec.engines",
                "PrefillDecode needs exactly two engines, one Prefill and one Decode",
            ),
        ),
    ),
    Case(
        "PrefillDecode needs a Decode engine",
        prefill_decode,
        {"spec.template.spec.engines[1].phase": "Prefill"},
        (
            FieldError(
                "spec.template.spec.engines",
                "PrefillDecode needs exactly two engines, one Prefill and one Decode",
            ),
        ),
    ),
    Case(
        "phase forbidden under Unified",
        model_deployment,
        {f"{ENGINE}.phase": "Decode"},
        (FieldError(f"{ENGINE}.phase", "is only allowed when serving.mode is PrefillDecode"),),
    ),
    Case(
        "replica members shaped too",
        model_replica,
        {"spec.engines[0].members[0].role": "Worker"},
        (
            FieldError("spec.engines[0].members[0].worker", "is required for a Worker member"),
            # Reported in the same pass, though the member itself is invalid.
            FieldError(
                "spec.engines[0].members",
                "must be exactly one Standalone member, or one Leader and one Worker (got Worker)",
            ),
        ),
    ),
    # devices
    Case(
        "deviceClassName required for DRA",
        inference_class,
        {f"{DEVICE}.deviceClassName": DELETE},
        (FieldError(f"{DEVICE}.deviceClassName", "is required when claim is DRA"),),
    ),
    Case(
        "attribute has two values",
        inference_class,
        {f"{DEVICE}.attributes.architecture": {"string": "Hopper", "int": 9}},
        (
            FieldError(
                f"{DEVICE}.attributes.architecture",
                "must set exactly one of string, version, bool, int",
            ),
        ),
    ),
    Case(
        "attribute has no value",
        inference_class,
        {f"{DEVICE}.attributes.architecture": {}},
        (
            FieldError(
                f"{DEVICE}.attributes.architecture",
                "must set exactly one of string, version, bool, int",
            ),
        ),
    ),
    Case(
        "version attribute is strict semver",
        inference_class,
        {f"{DEVICE}.attributes.cudaComputeCapability.version": "v9.0.0"},
        (
            FieldError(
                f"{DEVICE}.attributes.cudaComputeCapability.version",
                "must be a semantic version: invalid version 'v9.0.0': "
                "major number 'v9' must be ASCII digits",
            ),
        ),
    ),
    Case(
        "capacity is a quantity",
        inference_class,
        {f"{DEVICE}.capacity.memory.value": "80GB"},
        (
            FieldError(
                f"{DEVICE}.capacity.memory.value",
                "must be a Kubernetes quantity: invalid quantity '80GB': unknown suffix "
                "'GB'; expected one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an "
                "exponent such as e3 or E-6",
            ),
        ),
    ),
    # labels and tolerations
    Case(
        "gpufleet.io/ labels reserved",
        model_deployment,
        {"spec.template.metadata.labels[gpufleet.io/replica]": "x"},
        (
            FieldError(
                "spec.template.metadata.labels[gpufleet.io/replica]",
                "the gpufleet.io/ prefix is reserved",
            ),
        ),
    ),
    Case(
        "toleration without key must be Exists",
        model_deployment,
        {"spec.template.spec.tolerations[0]": {"operator": "Equal", "value": "x"}},
        (
            FieldError(
                "spec.template.spec.tolerations[0].operator", "must be Exists when key is empty"
            ),
        ),
    ),
    Case(
        "Exists toleration has no value",
        model_deployment,
        {"spec.template.spec.tolerations[0].value": "x"},
        (
            FieldError(
                "spec.template.spec.tolerations[0].value", "must be empty when operator is Exists"
            ),
        ),
    ),
    # histograms
    Case(
        "bucket has at least one node",
        lambda: published(bucket(3)),
        {f"{PUBLISHED}.freeDevices[0].nodes": 0},
        (FieldError(f"{PUBLISHED}.freeDevices[0].nodes", "must be at least 1"),),
    ),
    Case(
        "host room points count the bucket's nodes",
        lambda: published(
            {**bucket(3, nodes=2), "hostRoom": [{"milliCpu": 8000, "memory": 2**34, "nodes": 1}]}
        ),
        {},
        (
            FieldError(
                f"{PUBLISHED}.freeDevices[0].hostRoom", "points count 1 nodes, the bucket has 2"
            ),
        ),
    ),
    Case(
        "host room values in range",
        lambda: published(
            {**bucket(3), "hostRoom": [{"milliCpu": 8000, "memory": 2**34, "nodes": 1}]}
        ),
        {
            f"{PUBLISHED}.freeDevices[0].hostRoom[0].milliCpu": -1,
            f"{PUBLISHED}.freeDevices[0].hostRoom[0].memory": 2**51,
        },
        (
            FieldError(f"{PUBLISHED}.freeDevices[0].hostRoom[0].milliCpu", "must be at least 0"),
            FieldError(
                f"{PUBLISHED}.freeDevices[0].hostRoom[0].memory",
                f"must be at most {2**50}",
            ),
        ),
    ),
    Case(
        "at most 8 host room points",
        lambda: published(
            {
                **bucket(3, nodes=9),
                "hostRoom": [{"milliCpu": i, "memory": 0, "nodes": 1} for i in range(9)],
            }
        ),
        {},
        (FieldError(f"{PUBLISHED}.freeDevices[0].hostRoom", "must have at most 8 items"),),
    ),
    Case(
        "free count not negative",
        lambda: published(bucket(3)),
        {f"{PUBLISHED}.freeDevices[0].free[gpu.nvidia.com]": -1},
        (FieldError(f"{PUBLISHED}.freeDevices[0].free[gpu.nvidia.com]", "must be at least 0"),),
    ),
    Case(
        "no duplicate free vectors",
        lambda: published(bucket(3), bucket(4), bucket(3, nodes=2)),
        {},
        (
            FieldError(
                f"{PUBLISHED}.freeDevices[2]",
                'duplicate free vector "gpu.nvidia.com=3" (also at index 0)',
            ),
        ),
    ),
    Case(
        "zero counts do not make a vector distinct",
        lambda: pool_observation(bucket(0)),
        {"status.freeDevices[1]": {"free": {}, "nodes": 2}},
        (
            FieldError(
                "status.freeDevices[1]", 'duplicate free vector "nothing free" (also at index 0)'
            ),
        ),
    ),
    # schema: negative, wrong type, missing, unknown
    Case(
        "wrong type: string for an integer",
        model_deployment,
        {"spec.replicas": "3"},
        (FieldError("spec.replicas", "must be an integer"),),
    ),
    Case(
        "wrong type: boolean for an integer",
        inference_class,
        {f"{DEVICE}.count": True},
        (FieldError(f"{DEVICE}.count", "must be an integer"),),
    ),
    Case(
        "wrong type: integer for a string",
        inference_cluster,
        {"metadata.labels[tier]": 1},
        (FieldError("metadata.labels.tier", "must be a string"),),
    ),
    Case(
        "wrong type: list for a mapping",
        model_deployment,
        {"spec.template.spec": []},
        (FieldError("spec.template.spec", "must be a mapping"),),
    ),
    Case(
        "wrong type: timestamp",
        replica_observation,
        {"status.observedAt": "yesterday"},
        (FieldError("status.observedAt", "must be an RFC 3339 timestamp"),),
    ),
    Case(
        "timestamp needs a zone",
        replica_observation,
        {"status.observedAt": "2026-11-29T10:00:00"},
        (FieldError("status.observedAt", "must be an RFC 3339 timestamp with a time zone"),),
    ),
    Case(
        "enum",
        inference_cluster,
        {"spec.taints[0].effect": "PreferNoSchedule"},
        (FieldError("spec.taints[0].effect", "must be one of 'NoSchedule' or 'NoExecute'"),),
    ),
    Case(
        "missing field",
        inference_cluster,
        {f"{POOL}.className": DELETE},
        (FieldError(f"{POOL}.className", "is required"),),
    ),
    Case(
        "missing metadata.name",
        model_deployment,
        {"metadata.name": DELETE},
        (FieldError("metadata.name", "is required"),),
    ),
    Case(
        "unknown field",
        model_deployment,
        {"spec.template.spec.engine": []},
        (FieldError("spec.template.spec.engine", "unknown field"),),
    ),
    Case(
        "unknown metadata field",
        model_deployment,
        {"metadata.lables": {}},
        (FieldError("metadata.lables", "unknown field"),),
    ),
    Case(
        "replica deviceRequests absent, never empty",
        model_replica,
        {"spec.engines[0].members[0].deviceRequests": []},
        (FieldError("spec.engines[0].members[0].deviceRequests", "must have at least 1 items"),),
    ),
    Case(
        "observation counts not negative",
        replica_observation,
        {
            "status.pools[0].members": [
                {"engine": "e", "role": "Standalone", "livePods": -1, "allocatedPods": 0}
            ]
        },
        (FieldError("status.pools[0].members[0].livePods", "must be at least 0"),),
    ),
    # every error at once: schema and rules, across the object
    Case(
        "every error at once",
        model_deployment,
        {
            "spec.replicas": -2,
            "spec.template.spec.tolerations[0].value": "x",
            f"{REQUEST}.selectors[0].cel": "(",
            "spec.template.metadata.labels[gpufleet.io/x]": "y",
        },
        (
            FieldError("spec.replicas", "must be at least 0"),
            FieldError(
                "spec.template.metadata.labels[gpufleet.io/x]",
                "the gpufleet.io/ prefix is reserved",
            ),
            FieldError(
                "spec.template.spec.tolerations[0].value", "must be empty when operator is Exists"
            ),
        ),
        {"cel_error_at": f"{REQUEST}.selectors[0].cel"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_rejects_with_path_and_message(case: Case) -> None:
    body = edited(case.base(), case.edits)
    with pytest.raises(ValidationFailed) as raised:
        parse_object(body)
    errors = raised.value.errors
    cel_path = case.extra.get("cel_error_at")
    if cel_path is not None:
        cel_errors = [e for e in errors if e.path == cel_path]
        assert len(cel_errors) == 1 and cel_errors[0].message.startswith("does not compile: ")
        errors = tuple(e for e in errors if e.path != cel_path)
    assert sorted(errors, key=str) == sorted(case.errors, key=str)


def test_shape_rules_are_reported_with_the_field_errors_of_the_same_members() -> None:
    """pydantic skips an engine's rules while its members have invalid fields; validation
    reports them anyway, in the same pass, and never twice."""
    body = edited(
        model_deployment(),
        {f"{MEMBER}.role": "Worker", f"{MEMBER}.nodeSelector.devices[0].count": 0},
    )
    with pytest.raises(ValidationFailed) as raised:
        parse_object(body)
    assert sorted(raised.value.errors, key=str) == sorted(
        (
            FieldError(f"{MEMBER}.nodeSelector.devices[0].count", "must be at least 1"),
            FieldError(f"{MEMBER}.worker", "is required for a Worker member"),
            FieldError(
                f"{ENGINE}.members",
                "must be exactly one Standalone member, or one Leader and one Worker (got Worker)",
            ),
        ),
        key=str,
    )


def test_a_shape_rule_the_main_pass_reports_is_not_repeated() -> None:
    body = edited(model_deployment(), {f"{MEMBER}.role": "Leader", "spec.replicas": -1})
    with pytest.raises(ValidationFailed) as raised:
        parse_object(body)
    paths = [e.path for e in raised.value.errors]
    assert sorted(paths) == sorted(set(paths))
    assert f"{ENGINE}.members" in paths


VALID = [
    inference_class,
    inference_cluster,
    lambda: published(bucket(3), bucket(4)),
    model_deployment,
    prefill_decode,
    lambda: model_deployment("gang", "ml-team", engine("engine", *gang())),
    model_replica,
    lambda: pool_observation(bucket(3), bucket(0)),
    replica_observation,
]


@pytest.mark.parametrize("build", VALID, ids=lambda b: "valid")
def test_builders_are_valid(build: Callable[[], dict[str, Any]]) -> None:
    body = build()
    assert parse_object(body).to_manifest()["metadata"] == body["metadata"]


def test_error_names_the_object() -> None:
    body = edited(model_deployment("llama", "ml"), {"spec.replicas": 1001})
    with pytest.raises(ValidationFailed) as raised:
        parse_object(body, source="deploy.yaml#3")
    failure = raised.value
    assert (failure.kind, failure.name, failure.source) == (
        "ModelDeployment",
        "ml/llama",
        "deploy.yaml#3",
    )
    assert failure.lines() == ["ModelDeployment ml/llama: spec.replicas: must be at most 1000"]


def test_scenario_42_invalid_cel_names_the_selector() -> None:
    body = edited(model_deployment(), {f"{REQUEST}.selectors[0].cel": 'device.driver == "x" &&'})
    with pytest.raises(ValidationFailed) as raised:
        validate(body)
    (error,) = raised.value.errors
    assert error.path == f"{REQUEST}.selectors[0].cel"
    assert error.message.startswith("does not compile: ERROR: <input>:1:")
    assert "Syntax error" in error.message


def _stored_before_the_rule(body: dict[str, Any]) -> InferenceCluster:
    """A cluster stored when pool names were not yet DNS labels (HEAD: any string <= 40)."""
    names = frozenset(p["name"] for p in body["spec"]["nodePools"])
    stored = parse_object(body, legacy_pool_names=names)
    assert isinstance(stored, InferenceCluster)
    return stored


LEGACY = edited(inference_cluster(), {f"{POOL}.name": "GPU_pool"})
POOL_NAME_ERROR = (FieldError(f"{POOL}.name", DNS_LABEL_RULE),)


def test_scenario_57_new_pool_named_gpu_pool_is_rejected() -> None:
    with pytest.raises(ValidationFailed) as raised:
        validate(LEGACY)
    assert raised.value.errors == POOL_NAME_ERROR


def test_scenario_57_existing_legacy_name_still_updates() -> None:
    old = _stored_before_the_rule(LEGACY)
    new = edited(LEGACY, {f"{POOL}.nodeCount": 3})
    updated = validate(new, old)
    assert isinstance(updated, InferenceCluster)
    assert (updated.spec.node_pools[0].name, updated.spec.node_pools[0].node_count) == (
        "GPU_pool",
        3,
    )


def test_scenario_57_renaming_to_another_legacy_name_is_rejected() -> None:
    old = _stored_before_the_rule(LEGACY)
    with pytest.raises(ValidationFailed) as raised:
        validate(edited(LEGACY, {f"{POOL}.name": "Other_pool"}), old)
    assert raised.value.errors == POOL_NAME_ERROR


def test_scenario_57_bounds_do_not_ratchet() -> None:
    old = _stored_before_the_rule(LEGACY)
    with pytest.raises(ValidationFailed) as raised:
        validate(edited(LEGACY, {f"{POOL}.nodeCount": -1}), old)
    assert raised.value.errors == (FieldError(f"{POOL}.nodeCount", "must be at least 0"),)


def test_validate_accepts_a_typed_object() -> None:
    obj = parse_object(prefill_decode())
    assert validate(obj) == obj


def test_histogram_over_256_buckets_is_valid_and_loads_quickly() -> None:
    buckets = [{"free": {"gpu.nvidia.com": i}, "nodes": 1} for i in range(10_000)]
    body = published(*buckets)
    started = time.perf_counter()
    cluster = parse_object(body)
    elapsed_s = time.perf_counter() - started
    assert isinstance(cluster, InferenceCluster)
    assert cluster.status is not None
    assert len(cluster.status.gpu_pools[0].observation.free_devices or ()) == 10_000  # type: ignore[union-attr]
    assert elapsed_s < 2.0
