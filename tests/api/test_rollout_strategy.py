"""`spec.strategy.rollingUpdate` and the template revision a rollout is keyed by."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from builders_api import edited, model_deployment
from gpufleet.api import ValidationFailed, parse_object
from gpufleet.api.convert import deployment_from_manifest, template_revision
from gpufleet.api.kinds import ModelDeployment
from gpufleet.core.model import RolloutStrategy


def _parsed(body: dict[str, Any]) -> ModelDeployment:
    obj = parse_object(body)
    assert isinstance(obj, ModelDeployment)
    return obj


def test_the_default_is_make_before_break() -> None:
    core = deployment_from_manifest(_parsed(model_deployment()))
    assert core.strategy == RolloutStrategy(max_surge=1, max_unavailable=0)
    assert len(core.revision) == 10


def test_both_zero_is_refused_naming_the_field() -> None:
    body = edited(model_deployment(), {"spec.strategy": {"rollingUpdate": {"maxSurge": 0}}})
    with pytest.raises(ValidationFailed) as failure:
        parse_object(body)
    assert [(e.path, e.message) for e in failure.value.errors] == [
        (
            "spec.strategy.rollingUpdate.maxUnavailable",
            "must be at least 1 when maxSurge is 0",
        )
    ]


def _revision(body: dict[str, Any]) -> str:
    return template_revision(_parsed(body))


@pytest.mark.parametrize(
    ("edit", "is_rollout"),
    [
        ({"spec.replicas": 5}, False),
        ({"spec.template.spec.clusterSelector": None}, False),
        ({"spec.template.spec.tolerations": []}, False),
        ({"spec.strategy": {"rollingUpdate": {"maxUnavailable": 1}}}, False),
        ({"spec.template.spec.engines[0].copies": 2}, True),
        ({"spec.template.metadata.labels": {"team": "ads"}}, True),
        ({"spec.template.spec.engines[0].members[0].template.spec": {"x": 1}}, True),
        ({"spec.template.spec.engines[0].members[0].hostRequests": "Template"}, False),
        ({"spec.template.spec.engines[0].members[0].hostRequests": "Proportional"}, True),
    ],
    ids=str,
)
def test_what_makes_a_new_revision(edit: dict[str, object], is_rollout: bool) -> None:
    base = model_deployment()
    assert (_revision(edited(copy.deepcopy(base), edit)) != _revision(base)) is is_rollout


def test_a_spelt_out_default_is_the_same_revision() -> None:
    base = model_deployment()
    explicit = edited(copy.deepcopy(base), {"spec.template.spec.serving": {"mode": "Unified"}})
    assert _revision(explicit) == _revision(base)


def test_the_revision_of_a_deployment_without_host_requests_is_as_before_the_field() -> None:
    """Upgrading to a hub that knows `hostRequests` rolls no deployment: the revision of the
    base fixture, as the hub computed it before the field existed (issue 26 §2)."""
    assert _revision(model_deployment()) == PRE_HOST_REQUESTS_REVISION


PRE_HOST_REQUESTS_REVISION = "286408d136"
