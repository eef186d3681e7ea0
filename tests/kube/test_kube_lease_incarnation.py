"""The agent's Lease incarnation (issue 17, point 2): the elector knows the uid of the Lease
it leads, a Lease deleted and created again is a new incarnation at epoch 0, and an agent
without leader election reports the fixed incarnation `standalone`. Against the emulated API
server, which assigns uids as a real one does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gpufleet.cli.agent import AgentDaemon
from gpufleet.kube.leader import LeaderConfig, LeaderElector
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import LEASE

CONFIG = LeaderConfig(
    lease_name="gpufleet-agent",
    namespace="gpufleet-system",
    lease_duration_s=15,
    renew_deadline_s=10,
    retry_period_s=2,
)
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_the_elector_knows_its_leases_uid_and_a_recreated_lease_is_a_new_one(
    make_store: Callable[..., KubeStore],
) -> None:
    clock = Clock()
    elector = LeaderElector(make_store(), "agent-a", CONFIG, clock)
    assert elector.lease_uid is None
    assert elector.step() is True
    stored = elector.store.get(LEASE, CONFIG.lease_name, CONFIG.namespace)
    assert stored is not None
    first = stored["metadata"]["uid"]
    assert (elector.epoch, elector.lease_uid) == (0, first)
    clock.now += timedelta(seconds=2)
    assert elector.step() is True and elector.lease_uid == first  # renewed: the same one

    # The agent's namespace is deleted (a reinstall): the Lease is created again.
    elector.store.delete(LEASE, CONFIG.lease_name, CONFIG.namespace)
    clock.now += timedelta(seconds=2)
    assert elector.step() is True
    assert elector.epoch == 0 and elector.lease_uid not in (None, first)

    elector.release()
    assert (elector.epoch, elector.lease_uid) == (None, None)


def test_an_agent_without_leader_election_reports_the_standalone_incarnation(
    make_store: Callable[..., KubeStore],
) -> None:
    daemon = AgentDaemon("a", make_store(), make_store(), "agent-a", Clock(), leader=None)
    daemon._start(None)
    assert daemon.agent is not None
    assert (daemon.agent.lease_uid, daemon.agent.lease_epoch) == ("standalone", 0)
