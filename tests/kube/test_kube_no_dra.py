"""An agent on a workload cluster without DRA (no `resource.k8s.io/v1`, as before Kubernetes
1.34) stays up and unready with one clear message, as docs/operations.md ("Requirements")
says: /healthz 200, /readyz 503 naming what is missing (resource.k8s.io/v1) and the Kubernetes
version that serves it, not the API server's 404 text, a warning per failed list in its log, and no report to the hub; it recovers without a restart once the
group is served."""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kmockplus import Served, serve
from kube_helpers import FAST

from gpufleet.cli.agent import AgentDaemon
from gpufleet.kube.daemon import LoopConfig, endpoints
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import POOL_OBSERVATION

pytestmark = pytest.mark.timeout(60)

#: The one clear error, as docs/operations.md ("Requirements") quotes it.
MISSING_DRA = (
    "this API server does not serve resource.k8s.io/v1 (ResourceSlice); gpufleet needs "
    "Dynamic Resource Allocation (DRA) resource.k8s.io/v1: Kubernetes 1.34 or later, "
    "with DRA enabled"
)


@pytest.fixture
def clusters() -> Iterator[tuple[Served, Served]]:
    with serve() as hub, serve() as member:
        member.api.missing_groups = frozenset({"resource.k8s.io"})
        yield hub, member


def test_the_docs_quote_the_clear_error() -> None:
    docs = Path(__file__).parents[2] / "docs" / "operations.md"
    assert MISSING_DRA in " ".join(docs.read_text().split())


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_an_agent_without_dra_stays_up_unready_and_says_why(
    clusters: tuple[Served, Served], caplog: pytest.LogCaptureFixture
) -> None:
    hub_api, member_api = clusters
    local, hub = KubeStore.from_url(member_api.url, FAST), KubeStore.from_url(hub_api.url, FAST)
    agent = AgentDaemon(
        "a",
        local,
        hub,
        "agent-0",
        lambda: datetime.now(UTC),
        leader=None,
        loop_config=LoopConfig(debounce_s=0.01, resync_period_s=1.0),
    )
    servers = endpoints(agent.loop, agent.metrics_response, "0", "127.0.0.1:0")
    try:
        base = f"http://127.0.0.1:{servers[0].port}"
        caplog.set_level(logging.WARNING)
        deadline = time.monotonic() + 20
        while "resourceslices" not in caplog.text.lower() and time.monotonic() < deadline:
            agent.loop.tick()  # never raises: the loop waits for its informers
            time.sleep(0.05)
        assert agent.loop.is_alive()
        assert get(f"{base}/healthz") == (200, "ok\n")
        code, body = get(f"{base}/readyz")
        assert code == 503
        (informers,) = [line for line in body.splitlines() if "informers" in line]
        assert informers == f"[-]informers failed (sync: watch ResourceSlice: {MISSING_DRA})"
        warnings = [r for r in caplog.records if "ResourceSlice" in r.getMessage()]
        assert warnings and all(r.levelno == logging.WARNING for r in warnings)
        for record in warnings:  # what is missing and what serves it, never the bare 404
            assert "could not find the requested resource" not in record.getMessage()
            assert "Traceback" not in record.getMessage() and record.exc_info is None
        assert any(MISSING_DRA in r.getMessage() for r in warnings)
        assert hub_api.api.stored("gpufleet.io", "v1alpha1", "poolobservations") == []
        assert hub.list(POOL_OBSERVATION, None) == []
        # The cluster is upgraded (DRA served): the same process becomes ready, no restart.
        member_api.api.missing_groups = frozenset()
        deadline = time.monotonic() + 20
        while get(f"{base}/readyz")[0] != 200 and time.monotonic() < deadline:
            agent.loop.tick()
            time.sleep(0.05)
        code, body = get(f"{base}/readyz")
        assert code == 200, body
    finally:
        for server in servers:
            server.close()
        local.close()
        hub.close()
