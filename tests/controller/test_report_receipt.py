"""Freshness is judged by when the hub received a report (issue 17, point 4): a report ages
from the earlier of its own stamp and the controller's clock when it first saw that version
(`Receipts`, `AgentReport.aged_from`). An agent whose clock runs ahead, within the skew
tolerance, goes Stale and Expired on the hub's schedule once it is silent."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from controller_builders import SIM, at, brief, cluster, condition_of, gpu_class, hub, pool_obs
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.controller import Controller, observation_namespace
from gpufleet.controller.loop import StepResult
from gpufleet.controller.status import AgentReport
from gpufleet.store import MemoryStore, format_time
from gpufleet.store.port import INFERENCE_CLUSTER, POOL_OBSERVATION


def _restamp(store: MemoryStore, observed_at: datetime) -> None:
    """The agent heartbeats: its pool report again, stamped `observed_at`."""
    current: Any = store.get(POOL_OBSERVATION, "l4", observation_namespace("a"))
    status = {**current["status"], "observedAt": format_time(observed_at)}
    store.patch_status(POOL_OBSERVATION, "l4", observation_namespace("a"), status)


def _state(store: MemoryStore) -> tuple[str, str]:
    """(the pool's published freshness state, the Ready condition's reason)."""
    obj: Any = store.get(INFERENCE_CLUSTER, "a")
    ready = brief(condition_of(obj, "Ready"))
    return obj["status"]["gpuPools"][0]["observation"]["state"], ready[1]


def test_an_agent_25s_ahead_goes_stale_after_stale_after_s_of_silence_from_receipt() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(25)))  # 25 s ahead
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    assert _state(store) == ("Fresh", "AgentReporting")
    controller.step(at(60))
    assert _state(store) == ("Fresh", "AgentReporting")
    # On main it stayed Fresh until 85 s (its stamp + stale_after_s).
    controller.step(at(61))
    assert _state(store) == ("Stale", "AgentReporting")
    controller.step(at(301))
    assert _state(store) == ("Expired", "AgentExpired")


def test_each_new_version_is_received_again() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(25)))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    _restamp(store, at(65))  # a heartbeat, 25 s ahead, received at 40
    controller.step(at(40))
    controller.step(at(100))
    assert _state(store) == ("Fresh", "AgentReporting")
    controller.step(at(101))
    assert _state(store) == ("Stale", "AgentReporting")


def test_an_honest_agent_ages_from_its_stamp() -> None:
    """A report is never younger than its stamp: one received late ages from when it was
    stamped (as before)."""
    store = hub(gpu_class(), cluster())
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    store.create(pool_obs(observed_at=at(0)))  # delivered 30 s late
    controller.step(at(30))
    controller.step(at(61))
    assert _state(store) == ("Stale", "AgentReporting")


def test_a_restarted_controller_ages_a_listed_report_from_its_stamp_or_the_listing() -> None:
    """Receipts are not persisted: a new controller receives what it lists at that listing.
    An honest report ages from its stamp; one stamped ahead from the listing (at most
    `max_clock_skew_s` later than its true receipt, as later stamps are not accepted)."""
    store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(25)))
    Controller(store, SIM, "ctl").step(at(0))
    restarted = Controller(store, SIM, "ctl")
    restarted.step(at(10))
    restarted.step(at(70))
    assert _state(store) == ("Fresh", "AgentReporting")
    restarted.step(at(71))
    assert _state(store) == ("Stale", "AgentReporting")

    honest = hub(gpu_class(), cluster(), pool_obs(observed_at=at(0)))
    Controller(honest, SIM, "ctl").step(at(0))
    again = Controller(honest, SIM, "ctl")
    again.step(at(50))
    again.step(at(61))
    assert _state(honest) == ("Stale", "AgentReporting")


class _Forgetful(Controller):
    """Everything forgotten every step but the state correctness needs (as in
    tests/sim/test_controller_memory.py): the receipts are part of it."""

    def step(self, now: datetime) -> StepResult:
        fresh = Controller(self.hub, self.config, self.identity)
        kept = {"hub", "config", "identity", "timer", "ledger", "recorder"}
        for name, value in vars(fresh).items():
            if name == "statuses":  # its correctness state: the epochs and the receipts
                value.epochs, value.receipts = self.statuses.epochs, self.statuses.receipts
            if name not in kept:
                setattr(self, name, value)
        self.applier.writer = self  # (the fresh applier writes through this controller)
        return super().step(now)


def test_a_forgetful_controller_judges_a_skewed_agent_the_same() -> None:
    stores = []
    for make in (Controller, _Forgetful):
        store = hub(gpu_class(), cluster(), pool_obs(observed_at=at(25)))
        controller = make(store, SIM, "ctl")
        for t in (0, 20, 40, 61, 62, 200, 301):
            if t == 40:
                _restamp(store, at(64))
            controller.step(at(t))
        obj: Any = store.get(INFERENCE_CLUSTER, "a")
        stores.append((obj["status"], _state(store)))
    assert stores[0] == stores[1]
    assert stores[0][1] == ("Stale", "AgentReporting")


@given(
    st.builds(
        AgentReport,
        st.sampled_from(("PoolObservation", "ReplicaObservation")),
        st.text(max_size=3),
        st.text(max_size=3),
        st.text(max_size=3),
        st.integers(0, 3),
        st.datetimes(timezones=st.just(UTC)),
        st.just({"status": {}}),
        st.text(max_size=3),
        st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
    ),
    st.datetimes(timezones=st.just(UTC)),
)
def test_a_received_report_is_the_report_with_its_receipt_replaced(
    report: AgentReport, received_at: datetime
) -> None:
    """`received` builds the report field by field (cheaper than `dataclasses.replace`): it
    must be what `replace` gives, every field included."""
    got = report.received(received_at)
    want = dataclasses.replace(report, received_at=received_at)
    assert got == want
    assert got.aged_from == want.aged_from
    assert [getattr(got, f.name) for f in dataclasses.fields(got)] == [
        getattr(want, f.name) for f in dataclasses.fields(want)
    ]
