"""The assume ledger's tables per kind and its heap of times (ledger.py) equal the plain
computation: every entry in force is one recorded within `ttl_s` that the view has not caught
up with, found by scanning everything recorded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.controller.ledger import AssumeLedger
from gpufleet.store.port import INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA, Kind

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _obj(name: str, version: int, namespace: str = "ns") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(version)}}


@dataclass(frozen=True)
class Write:
    at_s: float
    kind: Kind
    name: str
    version: int
    is_delete: bool = False


def _plain(writes: list[Write], now_s: float, ttl_s: float) -> dict[tuple[Kind, str], int]:
    """The last write of each object within `ttl_s` of `now_s`: the entries in force."""
    last: dict[tuple[Kind, str], Write] = {}
    for w in writes:
        last[(w.kind, w.name)] = w
    return {k: w.version for k, w in last.items() if now_s - w.at_s <= ttl_s}


def _record(ledger: AssumeLedger, w: Write) -> None:
    at = T0 + timedelta(seconds=w.at_s)
    if w.is_delete:
        ledger.assume_deleted(w.kind, _obj(w.name, w.version), at)
    else:
        ledger.assume_written(w.kind, _obj(w.name, w.version), at)


KINDS = (INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA)


@pytest.mark.parametrize("ttl_s", [0.0, 2.0, 5.0], ids=["ttl0", "ttl2", "ttl5"])
def test_expire_keeps_exactly_the_writes_within_the_ttl(ttl_s: float) -> None:
    writes = [
        Write(float(t), KINDS[(t * 7 + i) % 3], f"o{(t * 3 + i) % 5}", t * 10 + i, i == 2)
        for t in range(10)
        for i in range(3)
    ]
    ledger = AssumeLedger(ttl_s)
    for step in range(12):
        for w in [w for w in writes if w.at_s == step]:
            _record(ledger, w)
        ledger.expire(T0 + timedelta(seconds=step))
        expected = _plain([w for w in writes if w.at_s <= step], step, ttl_s)
        assert len(ledger) == len(expected)
        for kind, name in expected:
            assert ledger.is_assumed(kind, "ns", name)


def test_overrides_forget_caught_up_entries_and_keep_the_rest() -> None:
    ledger = AssumeLedger(60)
    ledger.assume_written(MODEL_REPLICA, _obj("a", 5), T0)
    ledger.assume_written(MODEL_REPLICA, _obj("b", 5), T0)
    ledger.assume_deleted(MODEL_REPLICA, _obj("c", 5), T0)
    ledger.assume_written(MODEL_DEPLOYMENT, _obj("a", 5), T0)
    shown = {("ns", "a"): _obj("a", 6), ("ns", "b"): _obj("b", 4), ("ns", "c"): _obj("c", 5)}
    overrides = ledger.overrides(MODEL_REPLICA, shown)
    assert overrides == {("ns", "b"): _obj("b", 5), ("ns", "c"): None}
    assert not ledger.is_assumed(MODEL_REPLICA, "ns", "a")  # the view caught up
    assert ledger.is_assumed(MODEL_DEPLOYMENT, "ns", "a")  # another kind's entry stays
    assert ledger.missing(MODEL_DEPLOYMENT, {}) == [("ns", "a")]
    assert len(ledger) == 3
    shown[("ns", "b")] = _obj("b", 5)
    del shown[("ns", "c")]
    assert ledger.overrides(MODEL_REPLICA, shown) == {}
    assert len(ledger) == 1


def test_a_rewrite_outlives_the_time_of_the_write_it_replaced() -> None:
    """The heap still holds the first write's time: popping it must not forget the second."""
    ledger = AssumeLedger(10)
    ledger.assume_written(MODEL_REPLICA, _obj("a", 1), T0)
    ledger.assume_written(MODEL_REPLICA, _obj("a", 2), T0 + timedelta(seconds=8))
    ledger.expire(T0 + timedelta(seconds=11))
    assert ledger.is_assumed(MODEL_REPLICA, "ns", "a")
    ledger.expire(T0 + timedelta(seconds=19))
    assert not ledger.is_assumed(MODEL_REPLICA, "ns", "a")
