"""The Pod Security Standards rules beyond the host flags, and the fields only the fleet sets.

`gpufleet.agent.policy.check` calls `check_spec` on every pod template, whatever the labels of
the namespace it lands in (Pod Security Admission may not be enforcing there, or enforce a
lower level). Each rule is a `ViolationCode`, compared with the upstream Pod Security Standards
(kubernetes.io/docs/concepts/security/pod-security-standards, as of Kubernetes 1.34):

Baseline (checked at either `level`):

- AppArmor: `securityContext.appArmorProfile.type` (pod, containers) is `RuntimeDefault` or
  `Localhost`, and the `container.apparmor.security.beta.kubernetes.io/*` annotations
  `runtime/default` or `localhost/*` (`AppArmorProfile`);
- SELinux: `seLinuxOptions.type` is empty, `container_t`, `container_init_t`, `container_kvm_t`
  or `container_engine_t`, and `user` and `role` are empty (`SELinuxOptions`);
- `/proc` mount: `procMount` is `Default` (`ProcMount`);
- seccomp: no `seccompProfile.type: Unconfined` (pod, containers), nor the deprecated
  annotations with `unconfined` (`SeccompProfile`);
- sysctls: only the safe set `SAFE_SYSCTLS` (`UnsafeSysctl`);
- probes and lifecycle hooks: no `host` in `httpGet` or `tcpSocket` (`HostProbe`).

Restricted (checked at `level: restricted`, the default):

- volume types: only `RESTRICTED_VOLUME_TYPES` (`VolumeTypeNotAllowed`); an inline `csi`
  volume only of a driver the policy names (`allow.csiDrivers`, none by default): stricter
  than upstream, since a CSI driver (a secrets store, say) decides what it mounts;
- `allowPrivilegeEscalation` is false (`PrivilegeEscalation`);
- `runAsNonRoot` is not false and `runAsUser` is not 0, pod or container (`RunAsRoot`);
- seccomp is `RuntimeDefault` or `Localhost` (`SeccompProfile`, above);
- capabilities: `drop` includes `ALL` (`CapabilitiesNotDropped`); `add` only
  `NET_BIND_SERVICE` (`CapabilityNotAllowed`, checked by `policy`).

Where restricted *requires* a value and the template leaves it unset (`runAsNonRoot`,
`seccompProfile`, `allowPrivilegeEscalation`, `capabilities.drop`), the template passes and the
agent sets the value on the pods it makes (`harden`), as a mutating admission would: every pod
the fleet makes at `level: restricted` passes the upstream restricted check; what a template
sets against a rule is refused. Windows pods get no exemptions (GPU serving pods are Linux).

Fields only the fleet may set (either level):

- `priorityClassName` other than the allowed ones, and `priority` (`PriorityNotAllowed`): a
  class that preempts other tenants' pods is the operator's to grant;
- `nodeName` (`NodeNameSet`) and a `schedulerName` other than `default-scheduler`
  (`SchedulerNameSet`): the fleet pins pods to their pool and the scheduler decides the node;
- tolerations not covered by the allowed ones (`TolerationNotAllowed`; default: the GPU
  operator's `nvidia.com/gpu:NoSchedule`, which the fleet adds anyway);
- `runtimeClassName` other than the allowed ones (`RuntimeClassNotAllowed`);
- extended resources (`nvidia.com/gpu`, any name but cpu, memory, ephemeral-storage and
  hugepages-*) in a container's or the pod's `resources` (`ExtendedResource`), and the
  template's own `resourceClaims` or `resources.claims` (`ResourceClaimSet`): devices come
  from the fleet's DRA claim only, which the fleet counted and placed.

What a pod may reference in its namespace (either level): a Secret (secret and projected
volumes, `env[].valueFrom.secretKeyRef`, `envFrom[].secretRef`, `imagePullSecrets`, a CSI
volume's `nodePublishSecretRef`) only by a name in `allow.secrets` (`SecretNotAllowed`), and a
PersistentVolumeClaim (`persistentVolumeClaim` volumes, an ephemeral volume's `dataSource` /
`dataSourceRef`) only by a name in `allow.persistentVolumeClaims`
(`PersistentVolumeClaimNotAllowed`); both lists are empty by default ("*": any). A hub user
who may create a ModelDeployment in namespace N is not thereby allowed every Secret and volume
of namespace N on every workload cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpufleet.agent.violations import (
    Violation,
    ViolationCode,
    as_map,
    malformed,
    shown,
    string,
    sub_list,
    sub_map,
)

if TYPE_CHECKING:
    from gpufleet.agent.policy import ClusterPolicy

V = ViolationCode

RESTRICTED: Final = "restricted"
BASELINE: Final = "baseline"
LEVELS: Final = (BASELINE, RESTRICTED)

#: The safe sysctls of Pod Security's baseline (Kubernetes 1.32 and later).
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUME_TYPES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Resource names a container may request: anything else is a device or extended resource.
STANDARD_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
DEFAULT_SCHEDULER: Final = "default-scheduler"
APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ANNOTATIONS: Final = (
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/",
)
#: In a list of allowed names: any name.
ANY: Final = "*"

_CONTAINER_KINDS: Final = ("initContainers", "containers", "ephemeralContainers")
_PROBES: Final = ("livenessProbe", "readinessProbe", "startupProbe")


@dataclass(frozen=True, slots=True)
class TolerationRule:
    """A toleration a template may carry, and every narrower one (`covers`)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    #: Empty: every effect.
    effect: str = ""

    def covers(self, key: str, operator: str, value: str, effect: str) -> bool:
        """Whether every taint the toleration (key, operator, value, effect) tolerates is
        tolerated by this rule."""
        if not key:  # tolerates every key
            if self.key or self.operator != "Exists":
                return False
        elif (self.key and self.key != key) or (not self.key and self.operator != "Exists"):
            return False
        if self.operator != "Exists" and (operator == "Exists" or value != self.value):
            return False
        return not self.effect or self.effect == effect


GPU_TOLERATION_RULE: Final = TolerationRule("nvidia.com/gpu", "Exists", "", "NoSchedule")


def check_spec(
    template: Mapping[str, Any], spec: Mapping[str, Any], policy: ClusterPolicy, at: str
) -> list[Violation]:
    """The violations of the rules of this module by one pod template; `at` ends in `spec.`."""
    out: list[Violation] = []
    restricted = policy.level == RESTRICTED
    meta = sub_map(template, "metadata", f"{at[:-5]}metadata", out)
    where = f"{at[:-5]}metadata.annotations"
    _check_annotations(sub_map(meta, "annotations", where, out), where, out)
    context = spec.get("securityContext")
    pod_context = context if isinstance(context, Mapping) else {}  # malformed: policy says so
    _check_context(pod_context, f"{at}securityContext", out, restricted, pod=True)
    _check_sysctls(pod_context, f"{at}securityContext.sysctls", out)
    _check_fleet_fields(spec, policy, at, out)
    _check_volumes(spec, policy, at, out, restricted)
    for where, container in _containers(spec, at):
        _check_container(container, policy, where, out, restricted)
    return out


def _containers(spec: Mapping[str, Any], at: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every well-formed container with its path (`policy` reports the malformed ones)."""
    for kind in _CONTAINER_KINDS:
        found = spec.get(kind)
        if isinstance(found, list | tuple):
            for k, container in enumerate(found):
                if isinstance(container, Mapping):
                    yield f"{at}{kind}[{k}]", container


def _check_annotations(annotations: Mapping[str, Any], at: str, out: list[Violation]) -> None:
    for key, value in annotations.items():
        if not isinstance(key, str):
            continue
        text = value if isinstance(value, str) else ""
        path = f"{at}[{key!r}]"
        if key.startswith(APPARMOR_ANNOTATION) and not (
            text == "runtime/default" or text.startswith("localhost/")
        ):
            out.append(Violation(path, V.APP_ARMOR, f"AppArmor profile {shown(text)}"))
        is_seccomp = key == SECCOMP_ANNOTATIONS[0] or key.startswith(SECCOMP_ANNOTATIONS[1])
        if is_seccomp and text.lower() == "unconfined":
            out.append(Violation(path, V.SECCOMP, "seccomp unconfined"))


def _check_context(
    context: Mapping[str, Any], at: str, out: list[Violation], restricted: bool, *, pod: bool
) -> None:
    """The security-context rules that apply at pod and container level alike."""
    seccomp = sub_map(context, "seccompProfile", f"{at}.seccompProfile", out)
    kind = string(seccomp, "type", f"{at}.seccompProfile.type", out)
    if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
        out.append(
            Violation(f"{at}.seccompProfile.type", V.SECCOMP, f"seccomp profile {shown(kind)}")
        )
    apparmor = sub_map(context, "appArmorProfile", f"{at}.appArmorProfile", out)
    kind = string(apparmor, "type", f"{at}.appArmorProfile.type", out)
    if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
        out.append(
            Violation(f"{at}.appArmorProfile.type", V.APP_ARMOR, f"AppArmor profile {shown(kind)}")
        )
    selinux = sub_map(context, "seLinuxOptions", f"{at}.seLinuxOptions", out)
    kind = string(selinux, "type", f"{at}.seLinuxOptions.type", out)
    if kind is not None and kind not in SELINUX_TYPES:
        out.append(
            Violation(f"{at}.seLinuxOptions.type", V.SE_LINUX, f"SELinux type {shown(kind)}")
        )
    for name in ("user", "role"):
        value = string(selinux, name, f"{at}.seLinuxOptions.{name}", out)
        if value:
            out.append(Violation(f"{at}.seLinuxOptions.{name}", V.SE_LINUX, f"sets SELinux {name}"))
    if not pod:
        mount = string(context, "procMount", f"{at}.procMount", out)
        if mount is not None and mount != "Default":
            out.append(Violation(f"{at}.procMount", V.PROC_MOUNT, f"/proc mount {shown(mount)}"))
    if restricted:
        _check_non_root(context, at, out)


def _check_non_root(context: Mapping[str, Any], at: str, out: list[Violation]) -> None:
    non_root = context.get("runAsNonRoot")
    if non_root is not None and not isinstance(non_root, bool):
        out.append(malformed(f"{at}.runAsNonRoot", "a boolean"))
    elif non_root is False:
        out.append(Violation(f"{at}.runAsNonRoot", V.RUN_AS_ROOT, "runAsNonRoot is false"))
    user = context.get("runAsUser")
    if user is not None and (isinstance(user, bool) or not isinstance(user, int)):
        out.append(malformed(f"{at}.runAsUser", "an integer"))
    elif user == 0:
        out.append(Violation(f"{at}.runAsUser", V.RUN_AS_ROOT, "runs as user 0 (root)"))


def _check_sysctls(context: Mapping[str, Any], at: str, out: list[Violation]) -> None:
    for i, sysctl in enumerate(sub_list(context, "sysctls", at, out)):
        name = string(as_map(sysctl), "name", f"{at}[{i}].name", out)
        if not isinstance(sysctl, Mapping) or name is None:
            if not isinstance(sysctl, Mapping):
                out.append(malformed(f"{at}[{i}]", "a map"))
            continue
        if name not in SAFE_SYSCTLS:
            out.append(Violation(f"{at}[{i}].name", V.SYSCTL, f"sysctl {shown(name)} is not safe"))


def _allowed(name: str, allowed: Sequence[str]) -> bool:
    return ANY in allowed or name in allowed


def _check_fleet_fields(
    spec: Mapping[str, Any], policy: ClusterPolicy, at: str, out: list[Violation]
) -> None:
    klass = string(spec, "priorityClassName", f"{at}priorityClassName", out)
    if klass and not _allowed(klass, policy.allowed_priority_classes):
        out.append(
            Violation(
                f"{at}priorityClassName",
                V.PRIORITY_NOT_ALLOWED,
                f"priority class {shown(klass)} is not allowed "
                f"(allowed: {', '.join(policy.allowed_priority_classes) or 'none'})",
            )
        )
    if spec.get("priority") is not None:
        out.append(
            Violation(f"{at}priority", V.PRIORITY_NOT_ALLOWED, "priority is set from the class")
        )
    if string(spec, "nodeName", f"{at}nodeName", out):
        out.append(Violation(f"{at}nodeName", V.NODE_NAME, "binds the pod to a node by name"))
    scheduler = string(spec, "schedulerName", f"{at}schedulerName", out)
    if scheduler and scheduler != DEFAULT_SCHEDULER:
        out.append(
            Violation(f"{at}schedulerName", V.SCHEDULER_NAME, f"scheduler {shown(scheduler)}")
        )
    runtime = string(spec, "runtimeClassName", f"{at}runtimeClassName", out)
    if runtime and not _allowed(runtime, policy.allowed_runtime_classes):
        out.append(
            Violation(
                f"{at}runtimeClassName",
                V.RUNTIME_CLASS_NOT_ALLOWED,
                f"runtime class {shown(runtime)} is not allowed",
            )
        )
    if sub_list(spec, "resourceClaims", f"{at}resourceClaims", out):
        out.append(
            Violation(f"{at}resourceClaims", V.RESOURCE_CLAIM, "the fleet sets the pod's claims")
        )
    _check_resources(sub_map(spec, "resources", f"{at}resources", out), f"{at}resources", out)
    _check_tolerations(spec, policy, f"{at}tolerations", out)
    for i, ref in enumerate(sub_list(spec, "imagePullSecrets", f"{at}imagePullSecrets", out)):
        _secret(as_map(ref).get("name"), policy, f"{at}imagePullSecrets[{i}].name", out)


def _check_tolerations(
    spec: Mapping[str, Any], policy: ClusterPolicy, at: str, out: list[Violation]
) -> None:
    for i, toleration in enumerate(sub_list(spec, "tolerations", at, out)):
        if not isinstance(toleration, Mapping):
            out.append(malformed(f"{at}[{i}]", "a map"))
            continue
        fields = [string(toleration, k, f"{at}[{i}].{k}", out) for k in _TOLERATION_KEYS]
        key, operator, value, effect = (f or "" for f in fields)
        operator = operator or "Equal"
        if not any(r.covers(key, operator, value, effect) for r in policy.allowed_tolerations):
            shown_key = shown(key) if key else "every taint"
            out.append(
                Violation(
                    f"{at}[{i}]",
                    V.TOLERATION_NOT_ALLOWED,
                    f"tolerates {shown_key} {effect or 'any effect'}, beyond the pool's",
                )
            )


_TOLERATION_KEYS: Final = ("key", "operator", "value", "effect")


def _check_resources(resources: Mapping[str, Any], at: str, out: list[Violation]) -> None:
    for part in ("limits", "requests"):
        amounts = sub_map(resources, part, f"{at}.{part}", out)
        for name in amounts:
            text = name if isinstance(name, str) else ""
            if text in STANDARD_RESOURCES or text.startswith("hugepages-"):
                continue
            out.append(
                Violation(
                    f"{at}.{part}[{text!r}]",
                    V.EXTENDED_RESOURCE,
                    f"requests {shown(text)}: devices come from the fleet's claim",
                )
            )


def _secret(name: object, policy: ClusterPolicy, path: str, out: list[Violation]) -> None:
    _reference(name, policy.allowed_secrets, "Secret", V.SECRET_NOT_ALLOWED, path, out)


def _claim(name: object, policy: ClusterPolicy, path: str, out: list[Violation]) -> None:
    allowed = policy.allowed_claims
    _reference(name, allowed, "PersistentVolumeClaim", V.CLAIM_NOT_ALLOWED, path, out)


def _reference(
    name: object,
    allowed: Sequence[str],
    kind: str,
    code: ViolationCode,
    path: str,
    out: list[Violation],
) -> None:
    if name is None:
        return
    if not isinstance(name, str):
        out.append(malformed(path, "a string"))
    elif not _allowed(name, allowed):
        out.append(
            Violation(
                path,
                code,
                f"{kind} {shown(name)} is not allowed (allowed: {', '.join(allowed) or 'none'})",
            )
        )


def _check_volumes(
    spec: Mapping[str, Any], policy: ClusterPolicy, at: str, out: list[Violation], restricted: bool
) -> None:
    volumes = spec.get("volumes")
    if not isinstance(volumes, list | tuple):
        return  # absent, or malformed (`policy` says so)
    for i, volume in enumerate(volumes):
        if not isinstance(volume, Mapping):
            continue
        where = f"{at}volumes[{i}]"
        if restricted:
            _check_volume_type(volume, policy, where, out)
        _secret(as_map(volume.get("secret")).get("secretName"), policy, f"{where}.secret", out)
        csi = as_map(volume.get("csi"))
        secret_ref = as_map(csi.get("nodePublishSecretRef")).get("name")
        _secret(secret_ref, policy, f"{where}.csi.nodePublishSecretRef.name", out)
        projected = as_map(volume.get("projected"))
        for j, source in enumerate(sub_list(projected, "sources", f"{where}.projected", out)):
            name = as_map(as_map(source).get("secret")).get("name")
            _secret(name, policy, f"{where}.projected.sources[{j}].secret.name", out)
        claim = as_map(volume.get("persistentVolumeClaim")).get("claimName")
        _claim(claim, policy, f"{where}.persistentVolumeClaim.claimName", out)
        template = as_map(as_map(volume.get("ephemeral")).get("volumeClaimTemplate"))
        for source in ("dataSource", "dataSourceRef"):
            name = as_map(as_map(template.get("spec")).get(source)).get("name")
            _claim(name, policy, f"{where}.ephemeral.volumeClaimTemplate.spec.{source}", out)


def _check_volume_type(
    volume: Mapping[str, Any], policy: ClusterPolicy, where: str, out: list[Violation]
) -> None:
    for kind in volume:
        if kind == "name" or kind == "hostPath":  # hostPath: its own rule (`HostPath`)
            continue
        text = kind if isinstance(kind, str) else repr(kind)
        if kind not in RESTRICTED_VOLUME_TYPES:
            out.append(Violation(f"{where}.{text}", V.VOLUME_TYPE, f"volume type {shown(text)}"))
        elif kind == "csi":
            driver = as_map(volume.get("csi")).get("driver")
            if not isinstance(driver, str) or driver not in policy.allowed_csi_drivers:
                named = shown(driver) if isinstance(driver, str) else "unnamed"
                out.append(
                    Violation(
                        f"{where}.csi.driver",
                        V.VOLUME_TYPE,
                        f"CSI driver {named} is not allowed "
                        f"(allowed: {', '.join(policy.allowed_csi_drivers) or 'none'})",
                    )
                )


def _check_container(
    container: Mapping[str, Any],
    policy: ClusterPolicy,
    at: str,
    out: list[Violation],
    restricted: bool,
) -> None:
    context = container.get("securityContext")
    context = context if isinstance(context, Mapping) else {}  # malformed: `policy` says so
    where = f"{at}.securityContext"
    _check_context(context, where, out, restricted, pod=False)
    if restricted:
        escalation = context.get("allowPrivilegeEscalation")
        if escalation is not None and not isinstance(escalation, bool):
            out.append(malformed(f"{where}.allowPrivilegeEscalation", "a boolean"))
        elif escalation is True:
            out.append(
                Violation(
                    f"{where}.allowPrivilegeEscalation",
                    V.PRIVILEGE_ESCALATION,
                    "allows privilege escalation",
                )
            )
        capabilities = as_map(context.get("capabilities"))
        drop = capabilities.get("drop")
        if isinstance(drop, list | tuple) and "ALL" not in drop:
            out.append(
                Violation(
                    f"{where}.capabilities.drop",
                    V.CAPABILITIES_NOT_DROPPED,
                    "must drop ALL capabilities",
                )
            )
        elif drop is not None and not isinstance(drop, list | tuple):
            out.append(malformed(f"{where}.capabilities.drop", "a list"))
    for name in (*_PROBES, "lifecycle"):
        _check_probe_hosts(container, name, f"{at}.{name}", out)
    _check_resources(
        sub_map(container, "resources", f"{at}.resources", out), f"{at}.resources", out
    )
    claims = as_map(container.get("resources")).get("claims")
    if claims:
        out.append(
            Violation(f"{at}.resources.claims", V.RESOURCE_CLAIM, "the fleet sets the claims")
        )
    for i, env in enumerate(sub_list(container, "env", f"{at}.env", out)):
        ref = as_map(as_map(as_map(env).get("valueFrom")).get("secretKeyRef")).get("name")
        _secret(ref, policy, f"{at}.env[{i}].valueFrom.secretKeyRef.name", out)
    for i, env in enumerate(sub_list(container, "envFrom", f"{at}.envFrom", out)):
        ref = as_map(as_map(env).get("secretRef")).get("name")
        _secret(ref, policy, f"{at}.envFrom[{i}].secretRef.name", out)


def _check_probe_hosts(
    container: Mapping[str, Any], name: str, at: str, out: list[Violation]
) -> None:
    found = sub_map(container, name, at, out)
    handlers = (
        [(f"{at}.{hook}", as_map(found.get(hook))) for hook in ("postStart", "preStop")]
        if name == "lifecycle"
        else [(at, found)]
    )
    for where, handler in handlers:
        for kind in ("httpGet", "tcpSocket"):
            host = string(as_map(handler.get(kind)), "host", f"{where}.{kind}.host", out)
            if host:
                out.append(
                    Violation(f"{where}.{kind}.host", V.HOST_PROBE, f"probes host {shown(host)}")
                )


# --- the values restricted requires, set where the template leaves them unset -------------


def harden(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` (a pod spec the materializer made, its own copy) with what `level: restricted`
    requires and the template left unset: pod `runAsNonRoot: true` and `seccompProfile:
    RuntimeDefault`, and per container `allowPrivilegeEscalation: false` and `capabilities.drop:
    [ALL]`. What is set is kept (the policy refused what breaks a rule)."""
    context = dict(as_map(spec.get("securityContext")))
    _default(context, "runAsNonRoot", True)
    _default(context, "seccompProfile", {"type": "RuntimeDefault"})
    spec["securityContext"] = context
    for kind in ("initContainers", "containers"):
        found = spec.get(kind)
        if not isinstance(found, list):
            continue
        spec[kind] = [_harden_container(c) if isinstance(c, Mapping) else c for c in found]
    return spec


def _harden_container(container: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(container)
    context = dict(as_map(container.get("securityContext")))
    if context.get("privileged") is not True:
        _default(context, "allowPrivilegeEscalation", False)
    capabilities = dict(as_map(context.get("capabilities")))
    _default(capabilities, "drop", ["ALL"])
    context["capabilities"] = capabilities
    out["securityContext"] = context
    return out


def _default(obj: dict[str, Any], key: str, value: object) -> None:
    """Set `key` when unset; null is unset, as the API server reads it."""
    if obj.get(key) is None:
        obj[key] = value
