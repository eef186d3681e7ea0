"""Namespaces take turns in the fill (issue 30.3): one namespace's many deployments cannot
take every free GPU before another namespace's first deployment is tried. Within a
namespace, key order; among namespaces, the one holding fewer replicas first."""

from __future__ import annotations

from builders import NOW, cluster, deployment, replica_from
from gpufleet.core.model import Deployment, Snapshot
from gpufleet.core.schedule import schedule

#: One pool of two 1-GPU nodes (whole-node accounting): room for 2 one-GPU replicas.
TWO_GPUS = (cluster("east").pool(nodes=2, gpus=1).build(),)
NOISY = tuple(deployment(f"aaa-noisy/stuck-{i:02d}").engine(gpus=1).build() for i in range(24))
HONEST = deployment("tenant/llm").engine(gpus=1).build()


def _placed(deployments: tuple[Deployment, ...], snap: Snapshot | None = None) -> list[str]:
    snap = snap or Snapshot(deployments=deployments, clusters=TWO_GPUS)
    decision = schedule(snap, NOW)
    return sorted(str(d.key) for d in decision.deployments for _ in d.created)


def test_both_namespaces_get_placements_when_capacity_allows_two() -> None:
    placed = _placed((*NOISY, HONEST))
    # In key order aaa-noisy's first two would take both GPUs and tenant/llm none.
    assert len(placed) == 2
    assert {p.split("/")[0] for p in placed} == {"aaa-noisy", "tenant"}
    assert "tenant/llm" in placed and "aaa-noisy/stuck-00" in placed


def test_the_namespace_holding_fewer_replicas_goes_first() -> None:
    """aaa-noisy already holds one of the two GPUs: the one left goes to tenant/llm, not to
    aaa-noisy's next deployment, though aaa-noisy sorts first."""
    first = schedule(Snapshot(deployments=NOISY[:1], clusters=TWO_GPUS), NOW)
    held = tuple(replica_from(p) for d in first.deployments for p in d.created)
    snap = Snapshot(deployments=(*NOISY, HONEST), clusters=TWO_GPUS, replicas=held)
    assert _placed((), snap) == ["tenant/llm"]


def test_one_namespace_keeps_key_order() -> None:
    assert _placed(NOISY) == ["aaa-noisy/stuck-00", "aaa-noisy/stuck-01"]


def test_the_order_does_not_depend_on_the_input_order() -> None:
    assert _placed((*NOISY, HONEST)) == _placed((HONEST, *reversed(NOISY)))
