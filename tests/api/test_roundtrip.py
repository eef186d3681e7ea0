"""Property: a manifest that validates still validates after a dump and reload, and dumps the same."""

from datetime import UTC
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders_api import API_VERSION, HOPPER, MEMORY_24GI
from gpufleet.api import parse_object

dns_labels = st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
label_values = st.from_regex(r"[A-Za-z0-9]{0,8}", fullmatch=True)
labels = st.dictionaries(
    st.sampled_from(["team", "tier", "example.com/app"]), label_values, max_size=3
)
timestamps = st.datetimes(timezones=st.just(UTC)).map(
    lambda t: t.replace(microsecond=0).isoformat().replace("+00:00", "Z")
)


def request(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "name": st.just(name),
            "selectors": st.lists(
                st.sampled_from([{"cel": HOPPER}, {"cel": MEMORY_24GI}]), min_size=1, max_size=3
            ),
        },
        optional={"count": st.integers(1, 64)},
    )


def member(role: str) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        "nodeSelector": st.fixed_dictionaries({"devices": st.tuples(request("gpu")).map(list)}),
        "template": st.just({"spec": {"containers": [{"name": "engine", "image": "vllm"}]}}),
    }
    if role == "Worker":
        fields["worker"] = st.fixed_dictionaries({"nodes": st.integers(1, 63)})
    return st.fixed_dictionaries({"role": st.just(role), **fields})


members = st.one_of(
    st.tuples(member("Standalone")).map(list),
    st.tuples(member("Leader"), member("Worker")).map(list),
)


def engine(name: str, phase: str | None) -> st.SearchStrategy[dict[str, Any]]:
    optional: dict[str, st.SearchStrategy[Any]] = {"copies": st.integers(1, 64)}
    fixed: dict[str, st.SearchStrategy[Any]] = {"name": st.just(name), "members": members}
    if phase:
        fixed["phase"] = st.just(phase)
    return st.fixed_dictionaries(fixed, optional=optional)


template_specs = st.one_of(
    st.fixed_dictionaries(
        {
            "engines": st.lists(dns_labels, min_size=1, max_size=3, unique=True).flatmap(
                lambda names: st.tuples(*(engine(n, None) for n in names)).map(list)
            )
        },
        optional={
            "clusterSelector": st.fixed_dictionaries({"matchLabels": labels}),
            "serving": st.just({"mode": "Unified"}),
            "tolerations": st.lists(
                st.fixed_dictionaries(
                    {"key": dns_labels, "operator": st.just("Equal"), "value": label_values},
                    optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"])},
                ),
                max_size=2,
            ),
        },
    ),
    st.fixed_dictionaries(
        {
            "serving": st.just({"mode": "PrefillDecode"}),
            "engines": st.tuples(engine("prefill", "Prefill"), engine("decode", "Decode")).map(
                list
            ),
        }
    ),
)

model_deployments = st.fixed_dictionaries(
    {
        "apiVersion": st.just(API_VERSION),
        "kind": st.just("ModelDeployment"),
        "metadata": st.fixed_dictionaries(
            {"name": dns_labels, "namespace": dns_labels},
            optional={"labels": labels, "generation": st.integers(0, 10)},
        ),
        "spec": st.fixed_dictionaries(
            {
                "template": st.fixed_dictionaries(
                    {"spec": template_specs},
                    optional={"metadata": st.fixed_dictionaries({"labels": labels})},
                )
            },
            optional={"replicas": st.integers(0, 1000)},
        ),
    }
)


def pool(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.integers(0, 100).flatmap(
        lambda minimum: st.integers(minimum, 200).flatmap(
            lambda maximum: st.fixed_dictionaries(
                {
                    "name": st.just(name),
                    "className": dns_labels,
                    "nodeCount": st.integers(0, maximum),
                    "minNodeCount": st.just(minimum),
                    "maxNodeCount": st.just(max(maximum, 1)),
                }
            )
        )
    )


histograms = st.lists(st.integers(0, 8), unique=True, max_size=300).flatmap(
    lambda frees: st.tuples(
        *(
            st.fixed_dictionaries(
                {"free": st.just({"gpu.nvidia.com": f}), "nodes": st.integers(1, 50)}
            )
            for f in frees
        )
    ).map(list)
)

observations = st.fixed_dictionaries(
    {"observedAt": timestamps, "observedNodes": st.integers(0, 10_000)},
    optional={
        "freeDevices": histograms,
        "lastAllocationTime": timestamps,
        "state": st.sampled_from(["Fresh", "Stale", "Expired"]),
        "ageSeconds": st.integers(0, 10_000),
        "excludedNodes": st.dictionaries(
            st.sampled_from(["Cordoned", "NotReady", "NoSlices"]), st.integers(0, 9)
        ),
    },
)

inference_clusters = st.lists(dns_labels, min_size=1, max_size=8, unique=True).flatmap(
    lambda names: st.fixed_dictionaries(
        {
            "apiVersion": st.just(API_VERSION),
            "kind": st.just("InferenceCluster"),
            "metadata": st.fixed_dictionaries({"name": dns_labels}, optional={"labels": labels}),
            "spec": st.fixed_dictionaries(
                {"nodePools": st.tuples(*(pool(n) for n in names)).map(list)},
                optional={
                    "taints": st.lists(
                        st.fixed_dictionaries(
                            {
                                "key": dns_labels,
                                "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
                            }
                        ),
                        max_size=2,
                        unique_by=lambda t: (t["key"], t["effect"]),
                    )
                },
            ),
        },
        optional={
            "status": st.fixed_dictionaries(
                {},
                optional={
                    "conditions": st.just([{"type": "Ready", "status": "True"}]),
                    "gateway": st.fixed_dictionaries({"address": st.just("10.0.0.1")}),
                    "gpuPools": st.tuples(
                        *(
                            st.fixed_dictionaries(
                                {"name": st.just(n), "nodes": st.integers(0, 10_000)},
                                optional={"observation": observations},
                            )
                            for n in names
                        )
                    ).map(list),
                },
            )
        },
    )
)


def assert_round_trips(body: dict[str, Any]) -> None:
    obj = parse_object(body)
    dumped = obj.to_manifest()
    assert dumped == body  # nothing added, nothing lost: the input's fields come back as given
    reloaded = parse_object(dumped)
    assert reloaded == obj
    assert reloaded.to_manifest() == dumped


@settings(max_examples=60, deadline=None)
@given(model_deployments)
def test_model_deployment_round_trips(body: dict[str, Any]) -> None:
    assert_round_trips(body)


@settings(max_examples=60, deadline=None)
@given(inference_clusters)
def test_inference_cluster_round_trips(body: dict[str, Any]) -> None:
    assert_round_trips(body)
