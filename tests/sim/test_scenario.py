"""Scenario files: parsing into dataclasses, and every problem reported with its field path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from gpufleet.core.model import NodeChoice
from gpufleet.sim.scenario.load import (
    Accounting,
    ActionKind,
    NodeRef,
    ScenarioInvalid,
    builtin_names,
    load_scenario,
    parse_duration,
    parse_scenario,
    parse_scenario_text,
)

DEPLOYMENT = {
    "apiVersion": "gpufleet.io/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "llama", "namespace": "ml"},
    "spec": {
        "replicas": 1,
        "template": {
            "spec": {
                "engines": [
                    {
                        "name": "engine",
                        "members": [
                            {
                                "role": "Standalone",
                                "nodeSelector": {
                                    "devices": [
                                        {
                                            "name": "gpu",
                                            "count": 1,
                                            "selectors": [{"cel": "device.driver != ''"}],
                                        }
                                    ]
                                },
                                "template": {"spec": {"containers": [{"name": "e"}]}},
                            }
                        ],
                    }
                ]
            }
        },
    },
}


def base(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "end": "5m",
        "classes": {
            "l4-4x": {
                "devices": [
                    {
                        "name": "gpu",
                        "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 4,
                    }
                ]
            }
        },
        "fleet": {
            "clusters": [
                {
                    "name": "a",
                    "labels": {"gpufleet.io/region": "east"},
                    "behaviour": {"nodeChoice": "Pack", "reportDelay": "3s"},
                    "pools": [{"name": "l4", "class": "l4-4x", "nodeCount": 2}],
                }
            ]
        },
        "manifests": [DEPLOYMENT],
    }
    data.update(overrides)
    return data


@dataclass(frozen=True)
class DurationCase:
    id: str
    text: object
    seconds: float


@pytest.mark.parametrize(
    "case",
    [
        DurationCase("number", 90, 90.0),
        DurationCase("seconds", "45s", 45.0),
        DurationCase("minutes", "30m", 1800.0),
        DurationCase("hours", "2h", 7200.0),
        DurationCase("compound", "1h30m", 5400.0),
        DurationCase("plain-string", "12", 12.0),
        DurationCase("days", "1d", 86400.0),
    ],
    ids=lambda c: c.id,
)
def test_parse_duration(case: DurationCase) -> None:
    assert parse_duration(case.text) == case.seconds


@pytest.mark.parametrize("text", ["soon", "5x", "-3", True, "1h 30m"])
def test_parse_duration_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_valid_scenario_parses_into_the_fleet_and_defaults() -> None:
    s = parse_scenario(
        base(
            timeline=[
                {"at": "1m", "action": "cordon", "cluster": "a", "pool": "l4", "index": 1},
                {"at": 30, "action": "scale", "deployment": "llama", "replicas": 3},
                {"at": "2m", "action": "taint", "cluster": "a", "key": "maintenance"},
            ],
            checks=[{"at": "5m", "expect": {"placements": {"llama": {"count": 1}}}}],
        )
    )
    assert s.end_s == 300
    assert s.controller.accounting is Accounting.FREE_GPU
    cluster = s.fleet.clusters[0]
    assert cluster.behaviour.node_choice is NodeChoice.PACK
    assert cluster.behaviour.report_delay_s == 3.0
    assert cluster.pools[0].node_count == 2
    assert cluster.pools[0].devices[0].count == 4
    assert s.manifests[0]["metadata"]["namespace"] == "ml"
    # Sorted by time; deployments resolved to namespace/name.
    assert [a.kind for a in s.timeline] == [ActionKind.SCALE, ActionKind.CORDON, ActionKind.TAINT]
    assert s.timeline[0].deployment == "ml/llama"
    assert s.timeline[1].target == NodeRef(pool="l4", index=1)
    assert s.timeline[2].target is None  # a cluster-level taint
    assert s.checks[0].placements["ml/llama"].count == 1


def test_every_problem_is_reported_with_its_path() -> None:
    bad_deployment = yaml.safe_load(yaml.safe_dump(DEPLOYMENT))
    bad_deployment["spec"]["replicas"] = -1
    data = base(
        manifests=[bad_deployment],
        timeline=[
            {"at": "1m", "action": "cordonn", "cluster": "a", "node": "l4-0"},
            {"at": "1m", "action": "cordon", "cluster": "zz", "node": "l4-0"},
            {"at": "9m", "action": "heal", "cluster": "a"},
        ],
        checks=[{"at": "1m", "expect": {"freeGPUs": {"a/h100": 1}, "bogus": 1}}],
    )
    data["fleet"]["clusters"][0]["pools"][0]["class"] = "missing"
    data["fleet"]["clusters"][0]["behaviour"]["nodeChoice"] = "Random"
    with pytest.raises(ScenarioInvalid) as error:
        parse_scenario(data)
    problems = error.value.problems
    expected = [
        "fleet.clusters[0].behaviour.nodeChoice: must be one of Spread, Pack",
        "fleet.clusters[0].pools[0].class: unknown class 'missing' (classes: l4-4x)",
        "manifests[0].spec.replicas: must be at least 0",
        "timeline[0].action: unknown action 'cordonn' (expected one of apply, delete, scale, "
        "cordon, uncordon, drain, taint, untaint, failNode, recoverNode, addNode, removeNode, "
        "killAgent, startAgent, reinstallAgent, partition, heal, addForeignClaim, addHostPod, "
        "removeForeignClaim, deleteCluster, labelCluster)",
        "timeline[1].cluster: unknown cluster 'zz' (clusters: a)",
        "timeline[2].at: is after the end (5m00s)",
        "checks[0].expect.bogus: unknown field (expected one of placements, pending, "
        "podsRunning, freeGPUs, observedFreeGPUs, allocatedGPUs, histogram, nodes, poolState, "
        "conditions, pods, modelPodsScheduled, readyReplicas, hubFreeGPUs, updatedReplicas, minPodsRunning)",
        "checks[0].expect.freeGPUs.a/h100: cluster a has no pool 'h100'",
    ]
    for line in expected:
        assert line in problems, f"missing {line!r} in {problems}"
    assert str(error.value).startswith("invalid scenario (")


def test_an_unknown_deployment_in_the_timeline_names_the_known_ones() -> None:
    with pytest.raises(ScenarioInvalid) as error:
        parse_scenario(base(timeline=[{"at": 1, "action": "delete", "deployment": "nope"}]))
    assert error.value.problems == (
        "timeline[0].deployment: unknown deployment 'nope' (deployments: ml/llama)",
    )


def test_malformed_yaml_and_duplicate_keys_are_errors() -> None:
    with pytest.raises(ScenarioInvalid, match="malformed YAML at line 1"):
        parse_scenario_text("name: [", "x.yaml")
    with pytest.raises(ScenarioInvalid, match="duplicate key 'name'"):
        parse_scenario_text("name: a\nname: b\n")


def test_an_unknown_scenario_lists_the_builtins(tmp_path: Any) -> None:
    with pytest.raises(ScenarioInvalid, match="quickstart"):
        load_scenario(str(tmp_path / "nope.yaml"))


def test_builtins_are_listed_and_parse() -> None:
    names = builtin_names()
    assert "quickstart" in names and "eks-validation" in names
    for name in names:
        assert load_scenario(name).name == name


@pytest.mark.parametrize(
    "text", [10**30, "1000000000000000000s", "31d", float("inf"), float("nan"), "9" * 400]
)
def test_parse_duration_rejects_what_no_run_can_hold(text: object) -> None:
    with pytest.raises(ValueError, match=r"at most 30d|not a duration"):
        parse_duration(text)


@dataclass(frozen=True)
class InvalidCase:
    id: str
    overrides: dict[str, Any]
    #: (field path, a substring of its message); the problems must be exactly these.
    problems: tuple[tuple[str, str], ...]


def with_behaviour(**behaviour: Any) -> dict[str, Any]:
    data = base()
    data["fleet"]["clusters"][0]["behaviour"].update(behaviour)
    return data


def with_pool(**pool: Any) -> dict[str, Any]:
    data = base()
    data["fleet"]["clusters"][0]["pools"][0].update(pool)
    return data


def invalid_manifest() -> dict[str, Any]:
    bad = yaml.safe_load(yaml.safe_dump(DEPLOYMENT))
    bad["spec"]["template"]["spec"]["engines"] = []
    return base(
        manifests=[bad],
        timeline=[{"at": 60, "action": "scale", "deployment": "llama", "replicas": 2}],
        checks=[{"at": 90, "expect": {"podsRunning": {"llama": 1}}}],
    )


@pytest.mark.parametrize(
    "case",
    [
        InvalidCase(
            "tick-overflows",
            with_behaviour(tick="1000000000000000000s"),
            (("fleet.clusters[0].behaviour.tick", "at most 30d"),),
        ),
        InvalidCase(
            "tick-too-short",
            with_behaviour(tick="0.0000001s"),
            (("fleet.clusters[0].behaviour.tick", "at least 1ms"),),
        ),
        InvalidCase(
            "end-beyond-bound",
            base(end="1000000000h", sampleInterval="0.000001s"),
            (("end", "at most 30d"), ("sampleInterval", "at least 1ms")),
        ),
        InvalidCase(
            "too-many-samples",
            base(end="30d", sampleInterval="1s"),
            (("sampleInterval", "2,592,000 samples"),),
        ),
        InvalidCase(
            "too-many-steps",
            {**with_behaviour(tick="1ms"), "end": "3h"},
            (("end", "steps (cluster ticks, agent reports"),),
        ),
        InvalidCase(
            "scale-beyond-the-api-bound",
            base(
                timeline=[{"at": 60, "action": "scale", "deployment": "llama", "replicas": 10**9}]
            ),
            (("timeline[0].replicas", "at most 1000"),),
        ),
        InvalidCase(
            "an-invalid-manifest-is-reported-once",
            invalid_manifest(),
            (("manifests[0].spec.template.spec.engines", "at least 1"),),
        ),
        InvalidCase(
            "a-non-dns-pool-with-an-inline-class-is-reported-at-its-name",
            with_pool(
                name="L4_pool",
                **{
                    "class": {
                        "devices": [
                            {
                                "name": "gpu",
                                "driver": "gpu.nvidia.com",
                                "deviceClassName": "gpu.nvidia.com",
                                "count": 4,
                            }
                        ]
                    }
                },
            ),
            (("fleet.clusters[0].pools[0].name", "must be a DNS label"),),
        ),
        InvalidCase(
            "a-negative-node-count-once",
            with_pool(nodeCount=-1),
            (("fleet.clusters[0].pools[0].nodeCount", "at least 0"),),
        ),
        InvalidCase(
            "a-zero-max-once",
            with_pool(maxNodeCount=0),
            (("fleet.clusters[0].pools[0].maxNodeCount", "at least 1"),),
        ),
        InvalidCase(
            "more-nodes-than-max-once",
            with_pool(nodeCount=5, maxNodeCount=2),
            (("fleet.clusters[0].pools[0].nodeCount", "at most maxNodeCount"),),
        ),
        InvalidCase(
            "window-after-the-end",
            base(checks=[{"always": {"from": "1m", "to": "6m"}, "expect": {"pending": 0}}]),
            (("checks[0].always.to", "after the end"),),
        ),
        InvalidCase(
            "at-and-always",
            base(checks=[{"at": 1, "always": {"from": "1m"}, "expect": {"pending": 0}}]),
            (("checks[0]", "not both"),),
        ),
        InvalidCase(
            "within-past-the-end",
            base(checks=[{"at": "4m", "within": "2m", "expect": {"pending": 0}}]),
            (("checks[0].within", "ends after the end"),),
        ),
        InvalidCase(
            "new-check-values",
            base(
                checks=[
                    {
                        "at": 1,
                        "expect": {
                            "pods": {"llama": {"runing": 1}},
                            "modelPodsScheduled": {"llama": {"status": "Yes"}},
                            "readyReplicas": {"llama": -1},
                            "hubFreeGPUs": {"a/l4": "exact"},
                        },
                    }
                ]
            ),
            (
                ("checks[0].expect.pods.llama.runing", "unknown field"),
                ("checks[0].expect.modelPodsScheduled.llama.status", "quoted in YAML"),
                ("checks[0].expect.readyReplicas.llama", "at least 0"),
                ("checks[0].expect.hubFreeGPUs.a/l4", "actual, atMostActual"),
            ),
        ),
        InvalidCase(
            "a-bad-cluster-label",
            base(
                timeline=[{"at": 1, "action": "labelCluster", "cluster": "a", "labels": {"x": 1}}]
            ),
            (("timeline[0].labels.x", "must be a string, or null"),),
        ),
        InvalidCase(
            "placements-clusters-not-a-count",
            base(checks=[{"at": 1, "expect": {"placements": {"llama": {"clusters": {"a": "x"}}}}}]),
            (("checks[0].expect.placements.llama.clusters.a", "must be an integer"),),
        ),
    ],
    ids=lambda c: c.id,
)
def test_invalid_inputs_are_reported_once_at_their_field(case: InvalidCase) -> None:
    with pytest.raises(ScenarioInvalid) as error:
        parse_scenario(case.overrides)
    problems = error.value.problems
    assert len(problems) == len(case.problems), problems
    for (path, words), problem in zip(case.problems, problems, strict=True):
        assert problem.startswith(f"{path}: "), problems
        assert words in problem, problems


def test_one_problem_is_one_problem() -> None:
    with pytest.raises(ScenarioInvalid, match=r"\(1 problem\)"):
        parse_scenario(with_behaviour(tick=0))


def test_interval_checks_and_new_actions_parse() -> None:
    s = parse_scenario(
        base(
            timeline=[
                {"at": 10, "action": "untaint", "cluster": "a", "key": "maintenance"},
                {
                    "at": 20,
                    "action": "labelCluster",
                    "cluster": "a",
                    "labels": {"x": "1", "y": None},
                },
                {"at": 30, "action": "deleteCluster", "cluster": "a"},
            ],
            checks=[
                {"always": {"from": "1m", "to": "2m"}, "every": "30s", "expect": {"pending": 0}},
                {"at": "1m", "within": "20s", "expect": {"hubFreeGPUs": {"a/l4": "actual"}}},
            ],
        )
    )
    untaint, label, delete = s.timeline
    assert (untaint.effect, label.labels, delete.kind) == (
        "",
        {"x": "1", "y": None},
        ActionKind.DELETE_CLUSTER,
    )
    always, within = s.checks
    assert always.instants() == [60.0, 90.0, 120.0]
    assert within.instants()[0] == 61.0 and within.instants()[-1] == 80.0
    assert (always.covers(60.0), within.covers(60.0), within.covers(80.0)) == (True, False, True)


def test_aliases_of_aliases_are_bounded_once_expanded() -> None:
    lines = ["name: laugh", "end: 1m", "x-0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"x-{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    with pytest.raises(ScenarioInvalid, match="once YAML aliases are expanded"):
        parse_scenario_text("\n".join(lines))
