"""`KeptTruth` (each cluster's ground truth, kept up to date from one read to the next by the
revisions of what it reads) against its oracle `pool_truth`, the plain count over every node's
published devices, after any sequence of changes: nodes added, removed, failed and cordoned,
slices published (also a second slice naming another node's DRA pool, so that one device is
published on two nodes), other tenants' claims made and released, and time passing. Reads
happen between changes (so the kept truth moves) or only now and then (so several changes
land between two reads)."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_builders import cluster, pool

from gpufleet.sim.emulated.cluster import WorkloadCluster
from gpufleet.sim.emulated.engine import EventLoop
from gpufleet.sim.run.state import KeptTruth, pool_truth
from gpufleet.store.port import NODE, RESOURCE_SLICE

_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "remove", "claim", "release", "fail", "recover", "cordon", "dup", "run"]
        ),
        st.integers(0, 7),
        st.integers(1, 4),
        st.booleans(),
    ),
    max_size=30,
)


def _duplicate_slice(c: WorkloadCluster, node: str, other: str, seq: int) -> None:
    """A slice on `node` naming `other`'s DRA pool: `other`'s devices published twice."""
    found = [s for s in c.store.peek(RESOURCE_SLICE) if s["spec"].get("nodeName") == other]
    if not found:
        return
    spec = dict(found[0]["spec"], nodeName=node)
    c.store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"dup-{seq}"},
            "spec": spec,
        }
    )


def _apply(c: WorkloadCluster, claims: list[str], op: tuple[str, int, int, bool], seq: int) -> None:
    what, i, count, flag = op
    names = sorted(n["metadata"]["name"] for n in c.store.peek(NODE))
    node = names[i % len(names)] if names else ""
    if what == "add":
        c.add_node("l4" if flag else "h100")
    elif what == "run":
        c.loop.run_for(count * 3.0)
    elif not names:
        return
    elif what == "remove":
        c.remove_node(node)
    elif what == "claim":
        with contextlib.suppress(ValueError):  # too few free devices there (or none yet)
            claims.append(c.add_foreign_claim(node, count))
    elif what == "release" and claims:
        c.remove_foreign_claim(claims.pop(i % len(claims)))
    elif what == "fail":
        c.fail_node(node)
    elif what == "recover":
        c.recover_node(node)
    elif what == "cordon":
        c.cordon(node, flag)
    elif what == "dup":
        _duplicate_slice(c, node, names[(i + 1) % len(names)], seq)


@settings(max_examples=150, deadline=None)
@given(_OPS, st.integers(1, 3))
def test_kept_truth_equals_pool_truth_after_any_changes(
    ops: list[tuple[str, int, int, bool]], read_every: int
) -> None:
    loop = EventLoop()
    c = WorkloadCluster(
        cluster("a", pool("l4", nodes=2, gpus=4), pool("h100", nodes=1, gpus=8)), loop
    )
    c.start()
    kept = KeptTruth(c)
    claims: list[str] = []
    assert kept.read() == pool_truth(c)
    for seq, op in enumerate(ops):
        _apply(c, claims, op, seq)
        if seq % read_every == 0:
            assert kept.read() == pool_truth(c), f"after {ops[: seq + 1]}"
    assert kept.read() == pool_truth(c) == KeptTruth(c).read()


def test_a_fresh_count_lists_the_histogram_as_pool_truth_does() -> None:
    """The key order too (a run's final summary, counted afresh, prints it)."""
    loop = EventLoop()
    c = WorkloadCluster(cluster("a", pool("l4", nodes=3, gpus=4)), loop)
    c.add_foreign_claim("l4-1", 3)
    c.add_foreign_claim("l4-2", 1)
    expected: dict[str, Any] = {p: list(t.histogram.items()) for p, t in pool_truth(c).items()}
    assert expected == {"l4": [(4, 1), (1, 1), (3, 1)]}
    assert {p: list(t.histogram.items()) for p, t in KeptTruth(c).read().items()} == expected


def test_a_device_published_on_two_nodes_moves_both() -> None:
    """A slice on h100-0 names l4-0's DRA pool: a claim on l4-0's devices takes a device of
    both nodes (a case the random sequences above reach only now and then)."""
    loop = EventLoop()
    c = WorkloadCluster(cluster("a", pool("l4", nodes=2, gpus=4), pool("h100", nodes=1)), loop)
    kept = KeptTruth(c)
    _apply(c, [], ("dup", 0, 1, True), 0)
    assert kept.read() == pool_truth(c)
    c.add_foreign_claim("l4-0", 3)
    truth = kept.read()
    assert truth == pool_truth(c)
    assert (truth["l4"].allocated, truth["h100"].allocated) == (3, 3)
