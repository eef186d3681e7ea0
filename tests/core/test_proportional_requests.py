"""Issue 26 §2: proportional requests. A member asking for them is sized on the pool it lands
on: its devices' share of a node's shareable room (allocatable less DaemonSet requests), the
template's explicit requests winning; the fit's units and the placed member carry the same
figures (what the hub writes into the replica's `hostRequests` and the agent into the pod)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.compile import engine_on_class
from gpufleet.core.model import Device, DeviceRequest, DriverName, Engine, Member, PoolName
from gpufleet.core.pod_requests import proportional_requests

GPU = DriverName("gpu.nvidia.com")
NODE = (Device("gpu", GPU, device_class_name="gpu.nvidia.com", count=8),)
SHARE = (46_000, 184 * 2**30)


def engine(count: int, proportional: bool = True, cpu: int = 0, copies: int = 1) -> Engine:
    member = Member(
        requests=(DeviceRequest("gpu", count),), milli_cpu=cpu, proportional=proportional
    )
    return Engine("e", (member,), copies)


def test_a_share_of_the_node_in_proportion_to_its_devices() -> None:
    assert proportional_requests(SHARE, 1, 8, (0, 0)) == (5750, 23 * 2**30)
    assert proportional_requests(SHARE, 8, 8, (0, 0)) == SHARE
    # Explicit requests win, resource by resource.
    assert proportional_requests(SHARE, 4, 8, (2000, 0)) == (2000, 92 * 2**30)
    # Nothing to divide by: the explicit figures.
    assert proportional_requests(SHARE, 1, 0, (7, 9)) == (7, 9)


@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=8),
    st.integers(0, 10**7),
    st.integers(0, 2**40),
)
def test_pods_filling_a_node_never_ask_more_than_it_shares(
    counts: list[int], cpu: int, memory: int
) -> None:
    """The promise that makes proportional pods fit where their devices fit."""
    fitting: list[int] = []
    for c in counts:
        if sum(fitting) + c <= 8:
            fitting.append(c)
    asked = [proportional_requests((cpu, memory), c, 8, (0, 0)) for c in fitting]
    assert sum(a[0] for a in asked) <= cpu
    assert sum(a[1] for a in asked) <= memory


def test_the_fit_and_the_placed_member_carry_the_same_figures() -> None:
    shape = engine_on_class(engine(2, copies=4), NODE)
    units = shape.units_on(True, SHARE)
    assert {pod[-2:] for unit in units for pod in unit} == {(11_500, 46 * 2**30)}
    sized = shape.sized(SHARE, PoolName("h100"))
    assert sized is not None
    (member,) = sized.members
    assert (member.milli_cpu, member.memory, member.proportional) == (11_500, 46 * 2**30, True)
    assert member.pool == "h100"


def test_without_a_shareable_room_or_the_option_nothing_is_sized() -> None:
    shape = engine_on_class(engine(2, cpu=3000), NODE)
    assert shape.sized(None, PoolName("h100")) is None
    assert {pod[-2:] for unit in shape.units_on(True) for pod in unit} == {(3000, 0)}
    plain = engine_on_class(engine(2, proportional=False), NODE)
    assert plain.sized(SHARE, PoolName("h100")) is None
    assert plain.units_on(True, SHARE) == plain.units_on(True)
