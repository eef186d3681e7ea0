"""docs/operations.md's "Walkthrough", run as written, against two emulated API servers.

The test reads the walkthrough's `sh` block from the document and runs each command line: a
`gpufleet ...` command through the real CLI (typer's CliRunner, `$KUBECONFIG` naming contexts
`hub` and `gke-us-central`), and the few `kubectl` forms the block uses (`apply [--server-side] -f FILE|-`,
`create namespace`, `label nodes -l`) as kubectl does them, over HTTP. A command it does not
know fails the test, so the docs cannot gain a step this test skips.

Then it runs what the manifests installed: the controller Deployment's args and the agent
Deployment's args, parsed by the CLI's own commands (so the defaults a real install gets are
the ones under test: nothing here turns `--manage-ready` on or sets a gateway), the agent
talking to the hub with the kubeconfig `gpufleet join` put into the Secret its Deployment
mounts. The workload cluster's own components are emulated over HTTP (`MemberComponents`: the
DRA driver's slices, the Deployment and resourceclaim controllers, kube-scheduler with DRA
allocation, the kubelet), as the real ones behave in the simple case. Done when the replica's
pod is Running on the member with its claim allocated and the ModelDeployment has 1 ready;
then the document's "Uninstalling" block runs as written (`kubectl delete --ignore-not-found
-f -`, `delete namespace`) and nothing of gpufleet is left on either cluster.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kmockplus import Served, serve
from kube_helpers import FAST
from lightkube.config.kubeconfig import KubeConfig
from rbac import Rbac, ServiceAccount
from typer.main import get_command
from typer.testing import CliRunner

from gpufleet.agent.runner import AgentConfig
from gpufleet.cli.agent import AgentDaemon, load_policy
from gpufleet.cli.controller import ControllerDaemon
from gpufleet.cli.main import app
from gpufleet.controller.config import ControllerConfig
from gpufleet.kube.daemon import LoopConfig
from gpufleet.kube.leader import LeaderConfig
from gpufleet.kube.resources import plural
from gpufleet.kube.store import KubeStore
from gpufleet.store.port import (
    DEPLOYMENT,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    Kind,
    Obj,
)

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
HUB, MEMBER = "hub", "gke-us-central"
DRIVER = "gpu.nvidia.com"
GPUS_PER_NODE = 4
SECRET = Kind("v1", "Secret")
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
runner = CliRunner()


def walkthrough(heading: str = "Walkthrough") -> list[list[list[str]]]:
    """The command lines of a section's `sh` block, each a pipeline of argv lists."""
    text = OPERATIONS.read_text()
    section = text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found, f"docs/operations.md's {heading} has no sh block"
    lines = found.group(1).replace("\\\n", " ").splitlines()
    return [[shlex.split(part) for part in line.split("|")] for line in lines if line.strip()]


def kind_of_doc(doc: Obj) -> Kind:
    return Kind(doc["apiVersion"], doc["kind"], namespaced="namespace" in doc["metadata"])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Shell:
    """Runs the walkthrough's commands: gpufleet through its CLI, kubectl over HTTP."""

    kubeconfig: Path
    stores: dict[str, KubeStore]  # by kubeconfig context
    urls: dict[str, str]
    ran: list[str] = field(default_factory=list)

    def run(self, pipeline: list[list[str]]) -> None:
        self.ran.append(" | ".join(shlex.join(argv) for argv in pipeline))
        piped = ""
        for argv in pipeline:
            piped = self.exec(argv, piped)

    def exec(self, argv: list[str], stdin: str) -> str:
        if argv[0] == "gpufleet":
            if argv[1:2] == ["join"]:
                # The emulated API servers speak plain http (a real hub is https): the one
                # flag the documented command needs here and nowhere else.
                argv = [*argv, "--allow-insecure-hub"]
            result = runner.invoke(
                app, argv[1:], input=stdin, env={"KUBECONFIG": str(self.kubeconfig)}
            )
            assert result.exit_code == 0, f"{shlex.join(argv)}: {result.output}"
            return result.stdout
        if argv[0] == "kubectl":
            self.kubectl(argv[1:], stdin)
            return ""
        pytest.fail(f"the walkthrough runs {argv[0]!r}, which this test cannot run")

    def kubectl(self, args: list[str], stdin: str) -> None:
        context = HUB  # the kubeconfig's current context
        if args[:1] == ["--context"]:
            context, args = args[1], args[2:]
        store = self.stores[context]
        if args[:2] == ["apply", "--server-side"]:
            args = ["apply", *args[2:]]  # as a create-or-replace here: the objects are whole
        if args[:2] == ["apply", "-f"] and len(args) == 3:
            text = stdin if args[2] == "-" else (ROOT / args[2]).read_text()
            for doc in yaml.safe_load_all(text):
                if doc:
                    apply(self.urls[context], doc)
        elif args[:3] == ["delete", "--ignore-not-found", "-f"] and len(args) == 4:
            text = stdin if args[3] == "-" else (ROOT / args[3]).read_text()
            for doc in yaml.safe_load_all(text):
                if doc:
                    delete(self.urls[context], doc)
        elif args[:2] == ["delete", "namespace"] and len(args) == 3:
            status, _ = http(self.urls[context], "DELETE", f"/api/v1/namespaces/{args[2]}")
            assert status in (200, 202), f"kubectl delete namespace {args[2]}: {status}"
        elif args[:2] == ["create", "namespace"] and len(args) == 3:
            store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args[2]}})
        elif args[:3] == ["label", "nodes", "-l"] and len(args) == 5:
            key, _, value = args[4].partition("=")
            selector = dict([args[3].split("=", 1)])
            nodes = store.list(NODE, None, selector)
            assert nodes, f"kubectl label: no nodes match {args[3]}"
            for node in nodes:
                node["metadata"].setdefault("labels", {})[key] = value
                store.update(node)
        else:
            pytest.fail(f"the walkthrough runs kubectl {shlex.join(args)}: not emulated here")


def apply(url: str, doc: Obj) -> None:
    """`kubectl apply` of one object, over HTTP: create it, or replace what is there (any
    kind, as kubectl maps a kind to its resource)."""
    group_version = doc["apiVersion"]
    meta = doc["metadata"]
    path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    if meta.get("namespace"):
        path += f"/namespaces/{meta['namespace']}"
    path += f"/{plural(doc['kind'])}"
    status, _ = http(url, "POST", path, doc)
    if status == 409:
        _, current = http(url, "GET", f"{path}/{meta['name']}")
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        status, _ = http(url, "PUT", f"{path}/{meta['name']}", doc)
    assert status in (200, 201), f"kubectl apply {doc['kind']}/{meta['name']}: {status}"


def delete(url: str, doc: Obj) -> None:
    """`kubectl delete --ignore-not-found` of one object, over HTTP."""
    group_version, meta = doc["apiVersion"], doc["metadata"]
    path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    if meta.get("namespace"):
        path += f"/namespaces/{meta['namespace']}"
    status, _ = http(url, "DELETE", f"{path}/{plural(doc['kind'])}/{meta['name']}")
    assert status in (200, 202, 404), f"kubectl delete {doc['kind']}/{meta['name']}: {status}"


def http(url: str, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# --- the workload cluster's own components -------------------------------------------------


def gke_node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "cloud.google.com/gke-nodepool": "l4-pool",
            },
        },
        "spec": {},
    }


def node_slice(name: str) -> Obj:
    """What the DRA driver publishes for a node: one pool per node, its GPUs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": name,
            "devices": [{"name": f"gpu-{i}"} for i in range(GPUS_PER_NODE)],
        },
    }


def hostnames(term_list: list[Obj]) -> list[str]:
    return [
        value
        for term in term_list
        for expression in term.get("matchExpressions") or []
        if expression.get("key") == "kubernetes.io/hostname" and expression["operator"] == "In"
        for value in expression.get("values") or []
    ]


@dataclass
class MemberComponents:
    """The workload cluster's controllers, scheduler and kubelet, one pass at a time: what a
    real cluster does for a Deployment of pods claiming devices from a ResourceClaimTemplate
    (the agent's materialization), in the simple case (no rollouts, no preemption)."""

    store: KubeStore

    def step(self) -> None:
        self.deployment_controller()
        self.claim_controller()
        self.scheduler()
        self.kubelet()

    def deployment_controller(self) -> None:
        for dep in self.store.list(DEPLOYMENT, None):
            meta = dep["metadata"]
            if meta["namespace"] == "gpufleet-system":
                continue  # gpufleet's own agent: this test runs it in-process
            template = dep["spec"]["template"]
            for i in range(dep["spec"].get("replicas", 1)):
                name = f"{meta['name']}-{i}"
                if self.store.get(POD, name, meta["namespace"]) is not None:
                    continue
                owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"]}
                owner |= {"uid": meta["uid"], "controller": True}
                labels = dict(template["metadata"].get("labels") or {})
                pod_meta = {"name": name, "namespace": meta["namespace"], "labels": labels}
                pod_meta["ownerReferences"] = [owner]
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta}
                self.store.create({**pod, "spec": template["spec"]})

    def claim_controller(self) -> None:
        for pod in self.store.list(POD, None):
            meta, spec = pod["metadata"], pod["spec"]
            if (pod.get("status") or {}).get("resourceClaimStatuses"):
                continue
            statuses = []
            for entry in spec.get("resourceClaims") or []:
                name = f"{meta['name']}-{entry['name']}"
                source = self.store.get(
                    RESOURCE_CLAIM_TEMPLATE, entry["resourceClaimTemplateName"], meta["namespace"]
                )
                assert source is not None, f"pod {meta['name']}: no claim template"
                owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"]}
                owner |= {"uid": meta["uid"], "controller": True}
                claim_meta = {"name": name, "namespace": meta["namespace"]}
                claim_meta |= {"ownerReferences": [owner]}
                claim_meta |= {"labels": dict(source["spec"]["metadata"].get("labels") or {})}
                claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
                self.store.create({**claim, "metadata": claim_meta, "spec": source["spec"]["spec"]})
                statuses.append({"name": entry["name"], "resourceClaimName": name})
            if statuses:
                self.store.patch_status(
                    POD, meta["name"], meta["namespace"], {"resourceClaimStatuses": statuses}
                )

    def taken(self) -> set[tuple[str, str]]:
        return {
            (r["pool"], r["device"])
            for claim in self.store.list(RESOURCE_CLAIM, None)
            for r in (
                ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
            ).get("results")
            or []
        }

    def scheduler(self) -> None:
        """Bind each unbound pod whose claims exist: the steered node first (the agent's node
        affinity, required or preferred), else any node, that has the devices; allocate."""
        nodes = sorted(n["metadata"]["name"] for n in self.store.list(NODE, None))
        for pod in self.store.list(POD, None):
            meta, spec = pod["metadata"], pod["spec"]
            claimed = (pod.get("status") or {}).get("resourceClaimStatuses")
            if spec.get("nodeName") or not claimed:
                continue
            claims = [
                self.store.get(RESOURCE_CLAIM, c["resourceClaimName"], meta["namespace"])
                for c in claimed
            ]
            wanted = [
                (claim, request)
                for claim in claims
                if claim is not None
                for request in claim["spec"]["devices"]["requests"]
            ]
            affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
            required = hostnames(
                (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
                    "nodeSelectorTerms"
                )
                or []
            )
            preferred = hostnames(
                [
                    p["preference"]
                    for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
                ]
            )
            order = required or [*preferred, *(n for n in nodes if n not in preferred)]
            taken = self.taken()
            for node in order:
                free = [f"gpu-{i}" for i in range(GPUS_PER_NODE) if (node, f"gpu-{i}") not in taken]
                if len(free) < sum(r["exactly"]["count"] for _, r in wanted):
                    continue
                for claim, request in wanted:
                    results = [
                        {"request": request["name"], "driver": DRIVER, "pool": node, "device": d}
                        for d in free[: request["exactly"]["count"]]
                    ]
                    free = free[request["exactly"]["count"] :]
                    status = {
                        "allocation": {"devices": {"results": results}},
                        "reservedFor": [
                            {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
                        ],
                    }
                    cmeta = claim["metadata"]
                    self.store.patch_status(
                        RESOURCE_CLAIM, cmeta["name"], cmeta["namespace"], status
                    )
                pod["spec"]["nodeName"] = node
                self.store.update(pod)
                break

    def kubelet(self) -> None:
        for pod in self.store.list(POD, None):
            status = pod.get("status") or {}
            if pod["spec"].get("nodeName") and status.get("phase") != "Running":
                conditions = [
                    {"type": t, "status": "True", "lastTransitionTime": "2026-12-02T10:00:00Z"}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ]
                meta = pod["metadata"]
                self.store.patch_status(
                    POD,
                    meta["name"],
                    meta["namespace"],
                    {**status, "phase": "Running", "conditions": conditions},
                )


# --- the daemons as installed ----------------------------------------------------------------


def container_args(store: KubeStore, name: str) -> list[str]:
    deployment = store.get(DEPLOYMENT, name, "gpufleet-system")
    assert deployment is not None, f"the install created no Deployment gpufleet-system/{name}"
    pod_name = f"{name}-0"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a.replace("$(POD_NAME)", pod_name) for a in args]


def parsed(args: list[str]) -> dict[str, Any]:
    """The container's args as `gpufleet` parses them (its defaults included)."""
    command = get_command(app).get_command(None, args[0])  # type: ignore[attr-defined]
    context = command.make_context(args[0], list(args[1:]))
    return dict(context.params)


def leader(p: dict[str, Any]) -> LeaderConfig | None:
    if not p["leader_elect"]:
        return None
    return LeaderConfig(
        p["lease_name"],
        p["lease_namespace"],
        p["lease_duration"],
        p["renew_deadline"],
        p["retry_period"],
    )


@dataclass
class Installed:
    controller: ControllerDaemon
    agent: AgentDaemon
    clocks: list[Clock]

    def tick(self) -> None:
        for clock in self.clocks:
            clock.now += timedelta(seconds=0.25)
        for loop in (self.controller.loop, self.agent.loop):
            loop.tick()
        assert self.controller.loop.failures == 0, self.controller.loop.last_error
        assert self.agent.loop.failures == 0, self.agent.loop.last_error
        for errors in (
            self.controller.last_result.errors if self.controller.last_result else (),
            self.agent.last_outcome.errors if self.agent.last_outcome else (),
        ):
            assert not errors, f"a step reported errors: {errors}"


@pytest.fixture
def servers() -> Iterator[tuple[Served, Served]]:
    with serve(strict_namespaces=True) as hub, serve(strict_namespaces=True) as member:
        yield hub, member


def test_the_documented_walkthrough_runs_a_replica_on_the_member(
    servers: tuple[Served, Served], tmp_path: Path
) -> None:
    hub_api, member_api = servers
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": n, "cluster": {"server": s.url}}
                    for n, s in ((HUB, hub_api), (MEMBER, member_api))
                ],
                "users": [{"name": "admin", "user": {}}],
                "contexts": [
                    {"name": n, "context": {"cluster": n, "user": "admin"}} for n in (HUB, MEMBER)
                ],
                "current-context": HUB,
            }
        )
    )
    opened: list[KubeStore] = []

    def store(config: KubeConfig | None = None, url: str = "") -> KubeStore:
        made = KubeStore(config, FAST) if config is not None else KubeStore.from_url(url, FAST)
        opened.append(made)
        return made

    try:
        hub, member = store(url=hub_api.url), store(url=member_api.url)
        # The workload cluster as it is before gpufleet: two GKE nodes with the DRA driver.
        for name in ("gke-l4-a", "gke-l4-b"):
            member.create(gke_node(name))
            member.patch_status(
                NODE, name, None, {"conditions": [{"type": "Ready", "status": "True"}]}
            )
            member.create(node_slice(name))

        shell = Shell(
            kubeconfig, {HUB: hub, MEMBER: member}, {HUB: hub_api.url, MEMBER: member_api.url}
        )
        commands = walkthrough()
        assert [c[0][:3] for c in commands][:1] == [["gpufleet", "install", "hub"]]
        for pipeline in commands:
            shell.run(pipeline)

        # What the manifests run, with the CLI's defaults.
        c = parsed(container_args(hub, "gpufleet-controller"))
        assert c["manage_ready"] is True and c["gateway_address"] == ""
        controller_clock = Clock()
        controller = ControllerDaemon(
            store(url=hub_api.url),
            c["lease_identity"],
            controller_clock,
            leader=leader(c),
            loop_config=LoopConfig(debounce_s=c["debounce"], resync_period_s=c["resync_period"]),
            config=ControllerConfig(
                stale_after_s=c["stale_after"],
                expire_after_s=c["expire_after"],
                stuck_after_s=c["stuck_after"],
                manages_ready=c["manage_ready"],
                default_gateway_address=c["gateway_address"],
            ),
        )
        a = parsed(container_args(member, "gpufleet-agent"))
        assert a["cluster"] == MEMBER
        # The Secret the agent Deployment mounts at --hub-kubeconfig's directory.
        agent_deployment = member.get(DEPLOYMENT, "gpufleet-agent", "gpufleet-system")
        assert agent_deployment is not None
        (volume,) = agent_deployment["spec"]["template"]["spec"]["volumes"]
        secret = member.get(SECRET, volume["secret"]["secretName"], "gpufleet-system")
        assert secret is not None, "gpufleet join wrote no Secret for the agent"
        mounted = tmp_path / Path(str(a["hub_kubeconfig"])).name
        mounted.write_bytes(base64.b64decode(secret["data"][mounted.name]))
        agent_clock = Clock()
        agent = AgentDaemon(
            a["cluster"],
            store(url=member_api.url),
            store(KubeConfig.from_file(mounted)),
            a["lease_identity"],
            agent_clock,
            leader=leader(a),
            loop_config=LoopConfig(debounce_s=a["debounce"], resync_period_s=a["resync_period"]),
            config=AgentConfig(
                heartbeat_interval_s=a["heartbeat_interval"],
                min_push_interval_s=a["min_push_interval"],
                policy=load_policy(a["policy_file"]),
                steering=a["steering"],
            ),
        )
        installed = Installed(controller, agent, [controller_clock, agent_clock])
        components = MemberComponents(member)

        def ready() -> bool:
            mdep = hub.get(MODEL_DEPLOYMENT, "llama-3-8b", "ml-team")
            replicas = ((mdep or {}).get("status") or {}).get("replicas") or {}
            return replicas.get("ready") == 1

        deadline = time.monotonic() + 30
        while not ready():
            if time.monotonic() > deadline:
                cluster = hub.get(INFERENCE_CLUSTER, MEMBER)
                mdep = hub.get(MODEL_DEPLOYMENT, "llama-3-8b", "ml-team")
                pytest.fail(
                    "the deployment never became ready: cluster status "
                    f"{(cluster or {}).get('status')}, deployment status {(mdep or {}).get('status')}"
                )
            installed.tick()
            components.step()
            time.sleep(0.02)  # let the informers deliver

        cluster = hub.get(INFERENCE_CLUSTER, MEMBER)
        assert cluster is not None
        ready_condition = next(c for c in cluster["status"]["conditions"] if c["type"] == "Ready")
        assert (ready_condition["status"], ready_condition["reason"]) == ("True", "AgentReporting")
        assert "gateway" not in cluster["status"]
        (pod,) = member.list(POD, "ml-team")
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] in {"gke-l4-a", "gke-l4-b"}
        (claim,) = member.list(RESOURCE_CLAIM, "ml-team")
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [r["pool"] for r in results] == [pod["spec"]["nodeName"]] * 2
        assert member.list(RESOURCE_SLICE, None)

        # Every request the agent made on the hub with the token `gpufleet join` issued it is
        # one the RBAC the walkthrough installed there allows (as the API server stores it).
        rbac_kinds = ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
        stored = [
            o for k in rbac_kinds for o in hub_api.api.stored("rbac.authorization.k8s.io", "v1", k)
        ]
        issued = {t: ServiceAccount(*who) for t, who in hub_api.api.tokens.items()}
        seen = list(hub_api.api.requests_seen)
        assert issued and {r.user for r in seen} & issued.keys(), "the agent used no token"
        assert Rbac(stored).denied(seen, issued) == []

        # docs/operations.md's "Uninstalling", as written: nothing of gpufleet is left.
        for pipeline in walkthrough("Uninstalling"):
            shell.run(pipeline)
        assert member.get(DEPLOYMENT, "gpufleet-agent", "gpufleet-system") is None
        assert member.get(SECRET, "gpufleet-hub", "gpufleet-system") is None
        assert hub.get(DEPLOYMENT, "gpufleet-controller", "gpufleet-system") is None
        crds = Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", namespaced=False)
        assert [
            c for c in hub.list(crds, None) if c["metadata"]["name"].endswith("gpufleet.io")
        ] == []
        namespaces = Kind("v1", "Namespace", namespaced=False)
        left = {n["metadata"]["name"] for n in hub.list(namespaces, None)}
        assert not left & {"gpufleet-system", "gpufleet-cluster-gke-us-central", "ml-team"}
    finally:
        for s in opened:
            s.close()
