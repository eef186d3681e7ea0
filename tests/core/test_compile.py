"""`compile_deployment` (core/compile.py).

- per class and engine: the units are those a real pool ledger of the class accounts for the
  engine stamped there (`PoolLedger` reads the devices as the compiled class does);
- the shared `engines` dictionary (equal engines matched once) changes nothing (as `FRESH`
  against the reuse: tests/core/test_derive_properties.py);
- `covers` and `on_shape` / `can_host` say what a cluster of those classes can take.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import (
    IS_NIC,
    arch,
    cluster,
    deployment,
    gpu,
    gpus,
    leader,
    nic,
    observed,
    req,
    standalone,
    worker,
)
from gpufleet.core.accounting import engine_units
from gpufleet.core.capacity import PoolLedger
from gpufleet.core.compile import EngineOnClass, PoolClass, compile_deployment
from gpufleet.core.fit import order_units
from gpufleet.core.matching import match_member
from gpufleet.core.model import (
    ClusterName,
    Deployment,
    Device,
    Engine,
    HostRoom,
    PoolName,
    ReplicaEngine,
    ReplicaMember,
    SchedulingConfig,
)

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("GPUFLEET_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

CLASSES = (
    PoolClass(1, (gpu(8, arch="Hopper"),)),
    PoolClass(2, (gpu(4, arch="Ada"),)),
    PoolClass(3, (gpu(8, arch="Ampere"), nic(8))),
    PoolClass(4, (nic(4),)),
    PoolClass(5, (gpu(8, driver="other.example.com"), gpu(8, arch="Hopper"))),
)


@st.composite
def demands(draw: st.DrawFn) -> Deployment:
    d = deployment("ml/d")
    for e in range(draw(st.integers(1, 2))):
        shape = draw(st.sampled_from(["one", "pd", "gang", "nic", "arch"]))
        n = draw(st.sampled_from([1, 2, 4, 8]))
        copies = draw(st.integers(1, 3))
        if shape == "one":
            d = d.engine(f"e{e}", gpus=n, copies=copies)
        elif shape == "arch":
            d = d.engine(f"e{e}", gpus=n, copies=copies, cel=(arch("Ada"),))
        elif shape == "nic":
            member = standalone((*gpus(n), req(1, IS_NIC, name="nic")))
            d = d.engine(f"e{e}", copies=copies, members=(member,))
        elif shape == "pd":
            d = d.pd(n, draw(st.sampled_from([1, 2, 4])))
        else:
            workers = draw(st.integers(1, 2))
            d = d.engine(
                f"e{e}",
                copies=copies,
                members=(
                    leader(gpus(draw(st.sampled_from([0, 4]))) if draw(st.booleans()) else ()),
                    worker(gpus(n), nodes=workers),
                ),
            )
    built = d.build()
    # Some members request CPU and memory (the host units carry them).
    if draw(st.booleans()):
        cpu, memory = draw(st.sampled_from([(0, 0), (4000, 2**34), (250, 0), (0, 2**30)]))
        built = replace(
            built,
            engines=tuple(
                replace(
                    e, members=tuple(replace(m, milli_cpu=cpu, memory=memory) for m in e.members)
                )
                for e in built.engines
            ),
        )
    return built


def _on_ledger(
    engine: Engine, devices: tuple[Device, ...], on_class: EngineOnClass
) -> tuple[object, object]:
    """The engine's units on a real pool ledger of the class, stamped with its matches; and on
    the same pool with its nodes' CPU and memory reported (its vectors end in them)."""
    built = cluster("c").pool("p", nodes=2, devices=devices, observation=observed({8: 2})).build()
    ledger = PoolLedger(ClusterName("c"), built.pools[0], 1, SchedulingConfig())
    plain = built.pools[0].observation
    assert plain is not None and plain.buckets is not None
    hosted = replace(
        plain,
        buckets=tuple(replace(b, host=(HostRoom(8000, 2**36, b.nodes),)) for b in plain.buckets),
    )
    host_ledger = PoolLedger(
        ClusterName("c"), replace(built.pools[0], observation=hosted), 1, SchedulingConfig()
    )
    assert host_ledger.host and not ledger.host
    stamp = ReplicaEngine(
        engine.name,
        tuple(
            ReplicaMember(
                m.role, PoolName("p"), m.worker_nodes, match.resolved, m.milli_cpu, m.memory
            )
            for m, match in zip(engine.members, on_class.matches, strict=True)
        ),
        engine.copies,
        engine.phase,
    )
    return (
        tuple(order_units(engine_units(stamp, PoolName("p"), ledger))),
        tuple(order_units(engine_units(stamp, PoolName("p"), host_ledger))),
    )


@SETTINGS
@given(demands())
def test_a_class_accounts_as_a_pool_of_it(d: Deployment) -> None:
    compiled = compile_deployment(d, CLASSES)
    assert set(compiled.classes) == {c.id for c in CLASSES}
    for pool_class in CLASSES:
        for engine, on_class in zip(d.engines, compiled.classes[pool_class.id], strict=True):
            assert on_class.matches == tuple(
                match_member(m, pool_class.devices) for m in engine.members
            )
            units, host_units = _on_ledger(engine, pool_class.devices, on_class)
            assert on_class.units == units
            # Host units as a pool whose agent reports CPU and memory reads them.
            assert on_class.units_on(True) == host_units


@SETTINGS
@given(st.lists(demands(), min_size=1, max_size=4))
def test_shared_engines_change_nothing(ds: list[Deployment]) -> None:
    engines: dict[tuple[Engine, int], EngineOnClass] = {}
    for d in ds:
        assert compile_deployment(d, CLASSES, engines=engines) == compile_deployment(d, CLASSES)
    assert engines  # it was filled


def test_covers_and_shapes() -> None:
    d = deployment("ml/ada").engine(gpus=4, cel=(arch("Ada"),)).build()
    compiled = compile_deployment(d, CLASSES[:2])
    assert compiled.covers((1, 2)) and not compiled.covers((1, 3))
    (on_shape,) = compiled.on_shape((1, 2))
    assert on_shape.usable == (False, True)
    assert on_shape.claimable == (True,)
    assert compiled.can_host((2,)) and compiled.can_host((1, 2))
    assert not compiled.can_host((1,))
