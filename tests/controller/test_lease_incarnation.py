"""Reports are fenced per Lease incarnation (issue 17, point 2): a recreated agent Lease (a new
uid, its epoch back at 0) takes over once the old incarnation has been silent for
`expire_after_s`; within one incarnation the highest epoch wins as before; an epoch no Lease
can reach is refused by validation. Each test here failed on main, where a cluster fenced at
epoch 3 rejected a new Lease's epoch-0 reports forever, even after a controller restart."""

from __future__ import annotations

from typing import Any

from controller_builders import (
    SIM,
    at,
    brief,
    cluster,
    condition_of,
    deployment,
    gpu_class,
    hub,
    pool_obs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.controller import Controller, observation_namespace
from gpufleet.controller.fence import Fence, choose_fence
from gpufleet.controller.status import AgentReport, judge
from gpufleet.store import MemoryStore, Obj
from gpufleet.store.port import EVENT, INFERENCE_CLUSTER, MODEL_REPLICA, POOL_OBSERVATION

OLD, NEW = "0b1c7e5e-old-lease", "9f3a2d4c-new-lease"
NS = observation_namespace("a")


def _status(uid: str | None, epoch: int, seconds: float, gpus: int = 1) -> Obj:
    status: Obj = pool_obs(free=((gpus, 1),), epoch=epoch, observed_at=at(seconds))["status"]
    if uid is not None:
        status["agent"]["leaseUID"] = uid
    return status


def _report(store: MemoryStore, uid: str | None, epoch: int, seconds: float, gpus: int = 1) -> None:
    """The agent of Lease `uid` writes its pool report, stamped `seconds`."""
    store.patch_status(POOL_OBSERVATION, "l4", NS, _status(uid, epoch, seconds, gpus))


def _agent(store: MemoryStore) -> Any:
    return store.get(INFERENCE_CLUSTER, "a")["status"]["agent"]  # type: ignore[index]


def _free(store: MemoryStore) -> int:
    pools: Any = store.get(INFERENCE_CLUSTER, "a")["status"]["gpuPools"]  # type: ignore[index]
    return int(pools[0]["observation"]["freeDevices"][0]["free"]["gpu.nvidia.com"])


def _messages(store: MemoryStore) -> list[str]:
    return [e["message"] for e in store.list(EVENT) if e["reason"] == "StaleAgentReport"]


def _fenced_store() -> tuple[MemoryStore, Controller]:
    """A cluster fenced to the old Lease at epoch 3, last heard at 0 s."""
    obs = pool_obs(free=((3, 1),), epoch=3)
    obs["status"]["agent"]["leaseUID"] = OLD
    store = hub(gpu_class(), cluster(), obs)
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    assert (_agent(store)["leaseUID"], _agent(store)["leaseEpoch"]) == (OLD, 3)
    return store, controller


def test_a_recreated_lease_takes_over_once_the_old_incarnation_is_silent() -> None:
    store, controller = _fenced_store()
    _report(store, NEW, 0, 10, gpus=2)  # reinstalled: a new Lease, epoch 0
    result = controller.step(at(10))
    # Ignored while the old incarnation may be alive: what was published stays.
    assert (_agent(store)["leaseUID"], _free(store)) == (OLD, 3)
    assert result.rejected_reports
    (message,) = _messages(store)
    assert "OtherLeaseIncarnation" in message and NEW in message and "silent for 5m" in message
    for t in (100, 200, 300):
        controller.step(at(t))
        assert _agent(store)["leaseUID"] == OLD
    # Silent for more than expire_after_s (300 s) since it was last heard at 0: taken over,
    # without any new report (the contested fence is judged again as time passes).
    controller.step(at(301))
    assert (_agent(store)["leaseUID"], _agent(store)["leaseEpoch"], _free(store)) == (NEW, 0, 2)
    assert condition_of(store.get(INFERENCE_CLUSTER, "a"), "Ready") is not None


def test_a_stale_old_incarnation_report_after_takeover_is_rejected() -> None:
    store, controller = _fenced_store()
    _report(store, NEW, 0, 10, gpus=2)
    controller.step(at(10))
    _report(store, NEW, 0, 299, gpus=2)  # the new agent heartbeats
    controller.step(at(301))
    assert _agent(store)["leaseUID"] == NEW
    # The old agent, back from a partition, writes again (even at a higher epoch): the new
    # incarnation is alive, so it is ignored, and the new one stays fenced.
    _report(store, OLD, 7, 302, gpus=4)
    result = controller.step(at(302))
    assert (_agent(store)["leaseUID"], _free(store)) == (NEW, 2)
    assert any("OtherLeaseIncarnation" in m for m in result.rejected_reports)
    _report(store, NEW, 0, 310, gpus=1)
    controller.step(at(310))
    assert (_agent(store)["leaseUID"], _free(store)) == (NEW, 1)


def test_within_one_incarnation_the_highest_epoch_still_wins() -> None:
    store, controller = _fenced_store()
    _report(store, OLD, 2, 5, gpus=4)  # a deposed leader of the same Lease
    controller.step(at(5))
    assert (_agent(store)["leaseEpoch"], _free(store)) == (3, 3)
    assert "StaleLeaseEpoch" in _messages(store)[0]
    controller.step(at(400))  # silence does not matter within one incarnation
    assert _agent(store)["leaseEpoch"] == 3
    _report(store, OLD, 4, 401, gpus=1)  # the next leader: at once
    controller.step(at(401))
    assert (_agent(store)["leaseEpoch"], _free(store)) == (4, 1)


def test_a_restarted_controller_reads_the_fence_and_lets_the_new_lease_take_over() -> None:
    store, _ = _fenced_store()
    _report(store, NEW, 0, 10, gpus=2)
    restarted = Controller(store, SIM, "ctl")  # knows the fence only from the status
    restarted.step(at(100))
    assert _agent(store)["leaseUID"] == OLD
    restarted.step(at(301))
    assert (_agent(store)["leaseUID"], _free(store)) == (NEW, 2)
    # Another restart: the new fence is read back from the status; the old Lease stays out.
    _report(store, OLD, 3, 305, gpus=4)
    again = Controller(store, SIM, "ctl")
    again.step(at(306))
    assert (_agent(store)["leaseUID"], _free(store)) == (NEW, 2)


def test_a_huge_epoch_is_refused_with_the_rule_and_locks_nothing_out() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(epoch=2**63 - 1))
    controller = Controller(store, SIM, "ctl")
    result = controller.step(at(0))
    assert any("leaseEpoch" in e and "2147483647" in e for e in result.errors), result.errors
    assert "agent" not in (store.get(INFERENCE_CLUSTER, "a") or {}).get("status", {})
    _report(store, OLD, 1, 5)  # a real agent's report is accepted
    controller.step(at(5))
    assert (_agent(store)["leaseUID"], _agent(store)["leaseEpoch"]) == (OLD, 1)
    store.create(deployment())
    controller.step(at(6))
    assert len(list(store.list(MODEL_REPLICA))) == 1


def test_the_highest_int32_epoch_is_valid() -> None:
    store = hub(gpu_class(), cluster(), pool_obs(epoch=2**31 - 1))
    result = Controller(store, SIM, "ctl").step(at(0))
    assert result.errors == []
    assert _agent(store)["leaseEpoch"] == 2**31 - 1


def test_a_fence_without_an_incarnation_is_taken_over_by_a_higher_epoch_at_once() -> None:
    """A status written before incarnations (no leaseUID): an upgraded agent, reporting its
    Lease's uid at a higher epoch, is accepted at once, as a higher epoch always was."""
    status = {
        "agent": {"identity": "agent-a-3", "leaseEpoch": 3, "observedAt": "2026-11-29T10:00:00Z"}
    }
    store = hub(gpu_class(), cluster(status=status), pool_obs(epoch=4))
    store.patch_status(POOL_OBSERVATION, "l4", NS, _status(OLD, 4, 1))
    Controller(store, SIM, "ctl").step(at(1))
    assert (_agent(store)["leaseUID"], _agent(store)["leaseEpoch"]) == (OLD, 4)


def test_a_restarted_standalone_agent_is_the_same_incarnation() -> None:
    """`--no-leader-elect`: incarnation `standalone`, epoch 0, accepted at once after a restart."""
    store = hub(gpu_class(), cluster(), pool_obs(epoch=0))
    store.patch_status(POOL_OBSERVATION, "l4", NS, _status("standalone", 0, 0))
    controller = Controller(store, SIM, "ctl")
    controller.step(at(0))
    _report(store, "standalone", 0, 30, gpus=2)  # restarted
    controller.step(at(30))
    assert (_agent(store)["leaseUID"], _free(store)) == ("standalone", 2)
    assert brief(condition_of(store.get(INFERENCE_CLUSTER, "a"), "Ready")) == (
        "True",
        "AgentReporting",
    )


# --- the pure fence -----------------------------------------------------------------------


def _r(uid: str, epoch: int, seconds: float, name: str = "l4") -> AgentReport:
    return AgentReport("PoolObservation", name, "ns", f"agent-{epoch}", epoch, at(seconds), {}, uid)


_reports = st.lists(
    st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.integers(0, 5), st.integers(0, 900)),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    reports=_reports,
    known=st.none() | st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.integers(0, 5)),
    heard=st.none() | st.integers(0, 900),
    now=st.integers(0, 1500),
)
def test_one_incarnation_is_accepted_and_a_live_one_is_never_displaced(
    reports: list[tuple[str, int, int]],
    known: tuple[str, int] | None,
    heard: int | None,
    now: int,
) -> None:
    judged = [_r(u, e, t, f"p{i}") for i, (u, e, t) in enumerate(reports)]
    fence = Fence(*known) if known is not None else None
    heard_at = at(heard) if heard is not None else None
    trust = judge(judged, fence, now=at(now), heard_at=heard_at, silence_s=300)
    # Every accepted report is of one incarnation and one epoch: the fence's.
    assert {(r.lease_uid, r.lease_epoch) for r in trust.accepted} <= {(trust.uid, trust.epoch)}
    assert len(trust.accepted) + len(trust.rejected) == len(judged)
    if fence is None or trust.fence is None:
        return
    # The fenced incarnation is heard from at its highest epoch only: a report of an older
    # epoch of it is fenced out, so it does not keep the incarnation alive.
    top = max([fence.epoch, *(e for u, e, _ in reports if u == fence.uid)])
    mine = [at(t) for u, e, t in reports if u == fence.uid and e == top]
    last = max([t for t in (heard_at, *mine) if t is not None], default=None)
    if trust.uid != fence.uid:
        # Taken over: only once the fenced incarnation was silent, by one heard after it.
        assert last is None or (at(now) - last).total_seconds() > 300
        taker = [at(t) for u, e, t in reports if u == trust.uid]
        assert last is None or max(taker) > last
    else:
        assert trust.epoch is not None
        if trust.epoch < top:
            # Back to a lower epoch only once the top one was silent, to one heard after it
            # and still alive.
            assert last is None or (at(now) - last).total_seconds() > 300
            fallback = [at(t) for u, e, t in reports if u == fence.uid and e == trust.epoch]
            assert last is None or max(fallback) > last
            assert (at(now) - max(fallback)).total_seconds() <= 300


def test_choose_fence_without_a_clock_never_takes_over_a_known_fence() -> None:
    fence, contested = choose_fence([_r("u2", 0, 100)], Fence("u1", 3), at(0))
    assert (fence, contested) == (Fence("u1", 3), True)
    fence, contested = choose_fence(
        [_r("u2", 0, 100)], Fence("u1", 3), at(0), now=at(301), silence_s=300
    )
    assert (fence, contested) == (Fence("u2", 0), False)


def test_an_incarnation_heard_before_the_fenced_one_never_contests_it() -> None:
    """After a takeover, the old incarnation's leftover reports wait for nothing."""
    trust = judge(
        [_r("old", 3, 0, "a"), _r("new", 0, 400, "b")],
        Fence("new", 0),
        now=at(2000),
        heard_at=at(400),
        silence_s=300,
    )
    assert (trust.uid, trust.is_contested, [r.name for r in trust.rejected]) == (
        "new",
        False,
        ["a"],
    )


def test_a_forged_epoch_recovers_once_it_is_silent_while_the_honest_one_reports() -> None:
    """Issue 30, 4: a report at epoch 2,147,483,647 with the current Lease uid (written with
    the cluster's own hub credentials) kept the honest agent refused for good, even after it
    was deleted and the controller restarted. Now the forged epoch holds the fence only until
    it has been silent for expire_after_s (300 s) while the honest epoch keeps reporting."""
    store, controller = _fenced_store()  # the honest agent: OLD at epoch 3, heard at 0
    forged = pool_obs(free=((8, 1),), epoch=2**31 - 1, observed_at=at(10))
    forged["metadata"]["name"] = "forged"
    forged["status"]["agent"]["leaseUID"] = OLD
    store.create(forged)
    controller.step(at(10))
    assert _agent(store)["leaseEpoch"] == 2**31 - 1
    store.delete(POOL_OBSERVATION, "forged", NS)
    restarted = Controller(store, SIM, "ctl")  # knows the forged fence from the status only
    for t in range(20, 320, 20):  # the honest agent heartbeats; refused while the forgery is
        _report(store, OLD, 3, t, gpus=2)  # "alive" (heard within 300 s)
        restarted.step(at(t))
        assert _agent(store)["leaseEpoch"] == 2**31 - 1, t
    _report(store, OLD, 3, 320, gpus=2)
    restarted.step(at(320))  # forged epoch silent for 310 s, the honest one heard now
    assert (_agent(store)["leaseEpoch"], _free(store)) == (3, 2)
    _report(store, OLD, 3, 330, gpus=1)
    again = Controller(store, SIM, "ctl")  # the recovered fence is read back as it is
    again.step(at(330))
    assert (_agent(store)["leaseEpoch"], _free(store)) == (3, 1)


def test_a_lower_epoch_that_is_silent_too_takes_nothing_back() -> None:
    fence, contested = choose_fence(
        [_r("u1", 5, 0), _r("u1", 4, 10)], Fence("u1", 5), at(0), now=at(400), silence_s=300
    )
    assert (fence, contested) == (Fence("u1", 5), False)
    fence, contested = choose_fence(
        [_r("u1", 5, 0), _r("u1", 4, 200)], Fence("u1", 5), at(0), now=at(250), silence_s=300
    )
    assert (fence, contested) == (Fence("u1", 5), True)  # judged again as time passes
    fence, _ = choose_fence(
        [_r("u1", 5, 0), _r("u1", 4, 200)], Fence("u1", 5), at(0), now=at(301), silence_s=300
    )
    assert fence == Fence("u1", 4)
