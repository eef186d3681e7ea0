"""The agent stamps its version in its reports (`status.agent.version`) when it knows it, for
the hub's version-skew check (controller/skew.py); without one its stamp is as before."""

from __future__ import annotations

from test_runner import World, node, pool_status, slice_

from gpufleet.agent.runner import AgentConfig
from gpufleet.api import parse_object
from gpufleet.kube.install import VERSION
from gpufleet.store.port import POOL_OBSERVATION


def test_a_versioned_agent_stamps_its_version_in_every_report() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.agent(AgentConfig(version="0.3.1")).step(w.at(0))
    status = pool_status(w, "l4")
    assert status["agent"]["version"] == "0.3.1"
    (obs,) = w.hub.list(POOL_OBSERVATION)
    parsed = parse_object(obs)  # valid against the API models (and so the CRD schema)
    assert parsed.status is not None and parsed.status.agent.version == "0.3.1"


def test_an_agent_without_a_version_stamps_as_before() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.agent().step(w.at(0))
    assert "version" not in pool_status(w, "l4")["agent"]


def test_the_package_version_is_a_valid_report_version() -> None:
    w = World()
    w.add(node("n0"), slice_("n0"))
    w.agent(AgentConfig(version=VERSION)).step(w.at(0))
    (obs,) = w.hub.list(POOL_OBSERVATION)
    assert parse_object(obs).status.agent.version == VERSION  # type: ignore[union-attr]
