"""The daemon loop over HTTP (when a step runs, who runs it), its endpoints, its logs, and
`gpufleet controller` as a process that releases its Lease on SIGTERM."""

from __future__ import annotations

import io
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kmockplus import Served
from prometheus_client import CollectorRegistry
from rbac import Rbac, ServiceAccount

from gpufleet.kube import install, logs
from gpufleet.kube.daemon import DaemonLoop, LoopConfig, Trigger, Watch, endpoints
from gpufleet.kube.fleet_metrics import fleet_capacity
from gpufleet.kube.health import parse_address
from gpufleet.kube.leader import LeaderConfig, LeaderElector
from gpufleet.kube.metrics import CONTENT_TYPE_LATEST, ControllerMetrics, render
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import LEASE, MODEL_REPLICA, POD, Obj

pytestmark = pytest.mark.timeout(30)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
LOOP = LoopConfig(debounce_s=0.5, resync_period_s=60.0, error_backoff_s=5.0)
LEASE_CONFIG = LeaderConfig("gpufleet-controller", "gpufleet-system", 15, 10.0, 2.0)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def replica(name: str) -> Obj:
    return {
        "apiVersion": "gpufleet.io/v1alpha1",
        "kind": "ModelReplica",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {},
    }


def pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"}}


@dataclass
class Recorder:
    """A reconcile function that records its calls and does what the test says next."""

    calls: list[tuple[int | None, Trigger, datetime]] = field(default_factory=list)
    run_again_in_s: float | None = None
    fail: bool = False

    def start(self, epoch: int | None) -> Callable[[datetime, Trigger], datetime | None]:
        def reconcile(now: datetime, trigger: Trigger) -> datetime | None:
            self.calls.append((epoch, trigger, now))
            if self.fail:
                raise RuntimeError("boom")
            if self.run_again_in_s is None:
                return None
            return now + timedelta(seconds=self.run_again_in_s)

        return reconcile

    @property
    def triggers(self) -> list[Trigger]:
        return [trigger for _, trigger, _ in self.calls]


def until_fed(store: KubeStore, cursor: int, timeout_s: float = 5.0) -> None:
    """Wait (bounded) until the store's feed moved past `cursor`."""
    assert store.wait_for_changes(cursor, timeout_s), "the informer delivered nothing"


@pytest.fixture
def loop(make_store: Callable[..., KubeStore]) -> tuple[DaemonLoop, Clock, Recorder, KubeStore]:
    store, clock, recorder = make_store(), Clock(), Recorder()
    daemon = DaemonLoop(
        "test",
        [Watch(store, MODEL_REPLICA), Watch(store, POD, triggers=False)],
        recorder.start,
        clock,
        LOOP,
    )
    return daemon, clock, recorder, store


def test_a_change_steps_at_once_and_a_burst_costs_one_more_step_after_the_debounce(
    loop: tuple[DaemonLoop, Clock, Recorder, KubeStore],
) -> None:
    daemon, clock, recorder, store = loop
    assert daemon.tick() is Trigger.START and recorder.calls == [(None, Trigger.START, T0)]
    assert daemon.tick() is None

    clock.advance(5)  # a quiet spell
    cursor = store.cursor
    store.create(replica("r0"))
    until_fed(store, cursor)
    assert daemon.tick() is Trigger.CHANGE  # at once: no debounce after a quiet spell

    cursor = store.cursor
    for i in range(1, 4):
        store.create(replica(f"r{i}"))
    until_fed(store, cursor)
    clock.advance(0.1)
    assert daemon.tick() is None  # within debounce_s of the last step: the burst waits
    time.sleep(0.2)  # the rest of the burst arrives
    clock.advance(0.3)
    assert daemon.tick() is None
    assert daemon.seconds_to_next() == pytest.approx(0.1)
    clock.advance(0.1)
    assert daemon.tick() is Trigger.CHANGE
    assert daemon.tick() is None
    assert recorder.triggers == [Trigger.START, Trigger.CHANGE, Trigger.CHANGE]


def test_run_wakes_on_a_change_in_any_store_it_watches(
    make_store: Callable[..., KubeStore],
) -> None:
    first, second = make_store(), make_store()
    recorder = Recorder()
    stepped = threading.Event()

    def start(epoch: int | None) -> Callable[[datetime, Trigger], datetime | None]:
        inner = recorder.start(epoch)

        def reconcile(now: datetime, trigger: Trigger) -> datetime | None:
            stepped.set()
            return inner(now, trigger)

        return reconcile

    # No timeout would ever end a wait: only a wake-up from a store can run the step.
    never = LoopConfig(debounce_s=0.0, resync_period_s=3600.0, max_wait_s=3600.0)
    daemon = DaemonLoop(
        "test",
        [Watch(first, MODEL_REPLICA), Watch(second, POD)],
        start,
        lambda: datetime.now(UTC),
        never,
    )
    stop = threading.Event()
    runner = threading.Thread(target=daemon.run, args=(stop,), daemon=True)
    runner.start()
    try:
        assert stepped.wait(10) and recorder.triggers == [Trigger.START]
        for store, obj in ((second, pod("p")), (first, replica("r"))):
            stepped.clear()
            store.create(obj)
            assert stepped.wait(10), f"no step after a change in {obj['kind']}"
        assert recorder.triggers == [Trigger.START, Trigger.CHANGE, Trigger.CHANGE]
    finally:
        stop.set()
        first.create(replica("wake"))  # the stop flag is looked at on a wake-up
        runner.join(10)
    assert not runner.is_alive()


def test_changes_of_a_non_triggering_watch_do_not_step(
    loop: tuple[DaemonLoop, Clock, Recorder, KubeStore],
) -> None:
    daemon, clock, recorder, store = loop
    daemon.tick()
    cursor = store.cursor
    store.create(pod("p"))
    until_fed(store, cursor)
    clock.advance(1)
    assert daemon.tick() is None
    assert recorder.triggers == [Trigger.START]


def test_requested_resync_and_retry_after_a_failure(
    loop: tuple[DaemonLoop, Clock, Recorder, KubeStore],
) -> None:
    daemon, clock, recorder, store = loop
    recorder.run_again_in_s = 2.0
    assert daemon.tick() is Trigger.START
    recorder.run_again_in_s = None
    clock.advance(1.9)
    assert daemon.tick() is None
    clock.advance(0.1)
    assert daemon.tick() is Trigger.REQUESTED
    clock.advance(LOOP.resync_period_s - 0.1)
    assert daemon.tick() is None
    clock.advance(0.1)
    assert daemon.tick() is Trigger.RESYNC

    recorder.fail = True
    clock.advance(LOOP.resync_period_s)
    assert daemon.tick() is Trigger.RESYNC
    assert (daemon.last_error, daemon.failures) == ("RuntimeError: boom", 1)
    cursor = store.cursor
    store.create(replica("during-backoff"))
    until_fed(store, cursor)
    clock.advance(LOOP.error_backoff_s - 0.1)
    assert daemon.tick() is None  # a change does not cut the backoff short
    recorder.fail = False
    clock.advance(0.1)
    assert daemon.tick() is Trigger.RETRY
    assert daemon.last_error is None
    clock.advance(LOOP.debounce_s)
    assert daemon.tick() is None  # the retry covered the change


def test_only_the_leader_steps_and_a_release_hands_over_at_once(
    make_store: Callable[..., KubeStore],
) -> None:
    loops: list[tuple[DaemonLoop, Clock, Recorder]] = []
    for identity in ("one", "two"):
        store, clock, recorder = make_store(), Clock(), Recorder()
        elector = LeaderElector(store, identity, LEASE_CONFIG, clock)
        loops.append(
            (
                DaemonLoop(
                    "test", [Watch(store, MODEL_REPLICA)], recorder.start, clock, LOOP, elector
                ),
                clock,
                recorder,
            )
        )
    (one, clock_one, rec_one), (two, clock_two, rec_two) = loops
    assert one.tick() is Trigger.START and one.epoch == 0
    for _ in range(5):
        clock_one.advance(2)
        clock_two.advance(2)
        one.tick()
        assert two.tick() is None
    assert rec_one.triggers == [Trigger.START]  # nothing changed since: one step
    assert rec_two.calls == [] and not two.is_leading()
    assert ("leader-election", True, "standing by, leader one") in [
        (c.name, c.is_ok, c.detail) for c in two.readiness()
    ]

    one.shutdown()
    assert not one.is_leading()
    clock_two.advance(2)
    assert two.tick() is Trigger.START
    assert rec_two.calls[0][:2] == (1, Trigger.START)
    lease = two.watches[0].store.get(LEASE, LEASE_CONFIG.lease_name, LEASE_CONFIG.namespace)
    assert lease is not None and lease["spec"]["holderIdentity"] == "two"


# --- endpoints --------------------------------------------------------------------------------


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_healthz_readyz_and_metrics_over_http(make_store: Callable[..., KubeStore]) -> None:
    store, clock = make_store(), Clock()
    elector = LeaderElector(store, "ctl-0", LEASE_CONFIG, clock)
    registry = CollectorRegistry()
    observed: list[Obj] = []  # the InferenceClusters the fleet collector reads at scrape time
    metrics = ControllerMetrics(registry, clock, lambda now: fleet_capacity(observed, [], [], now))
    daemon = DaemonLoop(
        "controller",
        [Watch(store, MODEL_REPLICA)],
        Recorder().start,
        clock,
        LOOP,
        elector,
        metrics.loop,
    )
    servers = endpoints(
        daemon,
        lambda: (200, CONTENT_TYPE_LATEST, render(registry)),
        metrics_address="127.0.0.1:0",
        health_address="127.0.0.1:0",
    )
    try:
        assert len(servers) == 1  # one address: one server for all three paths
        base = f"http://127.0.0.1:{servers[0].port}"
        assert get(f"{base}/healthz")[::2] == (200, "ok\n")
        code, _, body = get(f"{base}/readyz")
        assert code == 503
        assert body.splitlines() == [
            "[-]informers failed",
            "[-]leader-election failed (not campaigned yet)",
            "readyz check failed",
        ]

        daemon.tick()
        code, _, body = get(f"{base}/readyz")
        assert (code, body.splitlines()[:2]) == (
            200,
            ["[+]informers ok", "[+]leader-election ok (leading, epoch 0)"],
        )

        metrics.record_step({"a": 2}, {"InsufficientGPU": 1}, 3, 0.02, 1)
        observed.append(
            {
                "metadata": {"name": "a"},
                "status": {
                    "gpuPools": [
                        {
                            "name": "l4",
                            "nodes": 1,
                            "observation": {
                                "observedAt": (T0 - timedelta(seconds=4)).isoformat(),
                                "observedNodes": 1,
                            },
                        }
                    ]
                },
            }
        )
        code, content_type, body = get(f"{base}/metrics")
        assert code == 200 and content_type == CONTENT_TYPE_LATEST
        samples = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in body.splitlines()
            if line and not line.startswith("#") and "_created" not in line
        }
        assert samples['gpufleet_leader{component="controller"}'] == 1
        assert samples['gpufleet_lease_epoch{component="controller"}'] == 0
        assert samples['gpufleet_reconciles_total{component="controller",trigger="start"}'] == 1
        assert samples['gpufleet_placements_total{cluster="a"}'] == 2
        assert samples['gpufleet_refusals_total{reason="InsufficientGPU"}'] == 1
        assert samples["gpufleet_unplaced_replicas"] == 3
        assert samples["gpufleet_decision_duration_seconds_count"] == 1
        assert samples["gpufleet_rejected_reports_total"] == 1
        assert samples['gpufleet_observation_age_seconds{cluster="a",pool="l4"}'] == 4
        clock.advance(10)  # the age is computed at scrape time
        assert (
            'gpufleet_observation_age_seconds{cluster="a",pool="l4"} 14.0'
            in get(f"{base}/metrics")[2]
        )
        metrics.record_step({}, {"InsufficientGPU": 2}, 0, None, 0)  # a counter: adds up
        assert 'gpufleet_refusals_total{reason="InsufficientGPU"} 3.0' in get(f"{base}/metrics")[2]
        assert get(f"{base}/nope")[0] == 404
    finally:
        for server in servers:
            server.close()


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":8080", ("", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0", None),
        ("[::1]:9", ("::1", 9)),
    ],
)
def test_parse_address(address: str, parsed: tuple[str, int] | None) -> None:
    assert parse_address(address) == parsed


def test_parse_address_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address("localhost")


def test_json_log_lines_carry_the_extra_fields() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logs.configure("info", "json", stream)
    try:
        logging.getLogger("gpufleet.test").info(
            "step: %d writes", 3, extra={"component": "controller", "epoch": 2}
        )
        logging.getLogger("gpufleet.test").debug("not shown")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "step: 3 writes" and record["level"] == "info"
    assert (record["component"], record["epoch"], record["logger"]) == (
        "controller",
        2,
        "gpufleet.test",
    )
    assert record["time"].endswith("Z")


# --- the process ------------------------------------------------------------------------------


@pytest.fixture
def kubeconfig(api: Served, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: emu\n  cluster: {{server: '{api.url}'}}\n"
        "users:\n- name: me\n  user: {token: test}\n"
        "contexts:\n- name: emu\n  context: {cluster: emu, user: me}\n"
        "current-context: emu\n"
    )
    return path


@pytest.fixture
def controller_process(
    kubeconfig: Path,
) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    gpufleet = Path(sys.executable).parent / "gpufleet"
    process = subprocess.Popen(
        [
            str(gpufleet),
            "controller",
            f"--kubeconfig={kubeconfig}",
            "--lease-identity=ctl-proc",
            "--health-address=127.0.0.1:0",
            "--metrics-address=127.0.0.1:0",
            "--lease-duration=3",
            "--renew-deadline=2",
            "--retry-period=0.5",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "KUBECONFIG": "/nonexistent"},
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(5)


def next_record(
    lines: queue.Queue[str], match: Callable[[dict[str, object]], bool]
) -> dict[str, object]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        record = json.loads(line)  # every line is JSON
        if match(record):
            return record  # type: ignore[no-any-return]
    pytest.fail("the controller never logged the expected line")


def test_the_controller_process_serves_probes_and_releases_its_lease_on_sigterm(
    controller_process: tuple[subprocess.Popen[str], queue.Queue[str]],
    store: KubeStore,
    api: Served,
) -> None:
    process, lines = controller_process
    serving = next_record(lines, lambda r: "/readyz" in str(r.get("paths")))
    base = f"http://127.0.0.1:{serving['port']}"
    assert get(f"{base}/healthz")[0] == 200
    next_record(lines, lambda r: "started leading" in str(r.get("message")))
    code, _, body = get(f"{base}/readyz")
    assert code == 200 and "[+]leader-election ok (leading, epoch 0)" in body
    assert 'gpufleet_leader{component="controller"} 1.0' in get(f"{base}/metrics")[2]
    lease = store.get(LEASE, "gpufleet-controller", "gpufleet-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == "ctl-proc"

    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    lease = store.get(LEASE, "gpufleet-controller", "gpufleet-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""  # handed over
    # Everything the process sent (token "test") is allowed by `gpufleet install hub`'s RBAC.
    seen = list(api.api.requests_seen)
    assert any(r.user == "test" and r.resource == "leases" for r in seen)
    controller = ServiceAccount("gpufleet-system", "gpufleet-controller")
    assert Rbac(install.hub()).denied(seen, {"test": controller}) == []
