"""A workload cluster's policy for tenant pod templates: what the agent refuses to run (pure).

Pod templates come from ModelDeployments on the hub and are copied into every workload cluster
the fleet places them on. Without a check, a hub user allowed to create a ModelDeployment in
namespace N could run privileged pods, mount host paths or use any service account of N on
every cluster. So each agent holds a `ClusterPolicy` and checks every ModelReplica against it
*before* materializing anything of it (`check_replica`); a refused replica gets no
ResourceClaimTemplate and no workload, and its ReplicaObservation says why
(`refusal_condition`).

What is checked, per pod template (`check`), each rule a `ViolationCode` with the field path:

- the replica's namespace is one the cluster serves (`NamespaceNotServed`);
- `hostNetwork`, `hostPID`, `hostIPC` (`HostNamespace`);
- `securityContext.privileged` of every container, init container and ephemeral container
  (`Privileged`), and `securityContext.windowsOptions.hostProcess` at pod or container level
  (`HostProcess`);
- `capabilities.add` beyond the allowed set: Pod Security's `restricted` set (only
  `NET_BIND_SERVICE`) by default, its `baseline` set at `level: baseline`
  (`CapabilityNotAllowed`; names compared upper-cased without a `CAP_` prefix, so
  `cap_sys_admin` is `SYS_ADMIN`);
- `hostPath` volumes (`HostPath`) and container `hostPort`s (`HostPort`);
- the pod's service account (`serviceAccountName`, or the deprecated `serviceAccount`; empty
  means `default`) against the allowed names (`ServiceAccountNotAllowed`);
- the rest of Pod Security's `baseline` and `restricted` rules, the fields only the fleet may
  set (priority, nodeName, tolerations beyond the pool's, runtime class, extra devices) and
  which Secrets and PersistentVolumeClaims a pod may reference: `gpufleet.agent.pod_security`.

The default policy is at least Pod Security's `restricted` level, checked on every template
whatever the labels of its namespace (Pod Security Admission may not be enforcing there), and
allows only the `default` service account: secure by default, each relaxation explicit. The
agent also sets Pod Security Admission's labels on the namespaces it creates
(`namespace_labels`), as a second line.

Templates are hostile input: `check` never raises. A field the rules read that has the wrong
type (a string where a bool belongs, a list that is a map) is a violation (`MalformedField`):
the agent refuses what it cannot read rather than guessing (fails closed). The walk reads only
the fields above, so its cost is linear in the number of containers, volumes and ports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpufleet.agent.pod_security import (
    ANY,
    BASELINE,
    GPU_TOLERATION_RULE,
    LEVELS,
    RESTRICTED,
    TolerationRule,
    check_spec,
)
from gpufleet.agent.violations import Violation as Violation
from gpufleet.agent.violations import ViolationCode as ViolationCode
from gpufleet.agent.violations import as_map as _map
from gpufleet.agent.violations import flag as _flag
from gpufleet.agent.violations import malformed as _malformed
from gpufleet.agent.violations import shown as _shown

#: Pod Security Admission's `baseline` level allows adding exactly these capabilities.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: Pod Security Admission's `restricted` level allows adding only this one.
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
#: The agent's own namespace (`gpufleet.kube.install.SYSTEM_NAMESPACE`; a test keeps the two
#: equal: the agent layer must not import kube for a constant).
AGENT_NAMESPACE: Final = "gpufleet-system"
#: Namespaces never served by default: the cluster's own and the agent's.
DEFAULT_EXCLUDED_NAMESPACES: Final = (
    AGENT_NAMESPACE,
    "kube-node-lease",
    "kube-public",
    "kube-system",
)
#: The service account a pod without one runs as.
DEFAULT_SERVICE_ACCOUNT: Final = "default"
#: In `allowed_service_accounts`: every service account of the namespace.
ANY_SERVICE_ACCOUNT: Final = "*"

#: The Pod Security Admission levels, least to most restrictive.
PSA_LEVELS: Final = ("privileged", "baseline", "restricted")
PSA_LABEL_PREFIX: Final = "pod-security.kubernetes.io/"

#: Bounds on a policy document (hostile or clumsy input fails with the field and the bound).
MAX_LIST_ENTRIES: Final = 256
MAX_NAME_CHARS: Final = 253
#: How many violations a refusal's message names (the rest are counted).
MAX_VIOLATIONS_IN_MESSAGE: Final = 8

#: The condition a refused replica's ReplicaObservation carries.
POLICY_ALLOWED: Final = "PolicyAllowed"
REASON_POLICY_DENIED: Final = "PolicyDenied"


@dataclass(frozen=True, slots=True)
class PodSecurityLabels:
    """The Pod Security Admission labels put on namespaces the agent creates; None: unset."""

    enforce: str | None = "baseline"
    warn: str | None = "restricted"
    audit: str | None = "restricted"
    #: `latest` or a Kubernetes minor version such as `v1.33` (the `<mode>-version` labels).
    version: str = "latest"


@dataclass(frozen=True, slots=True)
class ClusterPolicy:
    """What one workload cluster lets tenant pod templates do. The default is secure."""

    #: The namespaces served; empty: every namespace not in `excluded_namespaces`.
    namespaces: tuple[str, ...] = ()
    #: Never served, even when listed in `namespaces`.
    excluded_namespaces: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    allow_privileged: bool = False
    allow_host_network: bool = False
    allow_host_pid: bool = False
    allow_host_ipc: bool = False
    allow_host_process: bool = False
    allow_host_path: bool = False
    allow_host_ports: bool = False
    #: `restricted` (Pod Security's restricted rules, the default) or `baseline` (without
    #: them); see `gpufleet.agent.pod_security`.
    level: str = RESTRICTED
    #: Capabilities allowed in `capabilities.add` (normalized: upper case, no `CAP_`).
    allowed_capabilities: frozenset[str] = RESTRICTED_CAPABILITIES
    #: Service account names allowed; `*` allows any.
    allowed_service_accounts: tuple[str, ...] = (DEFAULT_SERVICE_ACCOUNT,)
    #: Names a template may use (`*`: any); empty: none.
    allowed_priority_classes: tuple[str, ...] = ()
    allowed_runtime_classes: tuple[str, ...] = ()
    allowed_secrets: tuple[str, ...] = ()
    allowed_claims: tuple[str, ...] = ()
    allowed_csi_drivers: tuple[str, ...] = ()
    #: The tolerations a template may carry (and every narrower one): the pool's.
    allowed_tolerations: tuple[TolerationRule, ...] = (GPU_TOLERATION_RULE,)
    pod_security: PodSecurityLabels = field(default_factory=PodSecurityLabels)

    def serves(self, namespace: str) -> bool:
        if namespace in self.excluded_namespaces:
            return False
        return not self.namespaces or namespace in self.namespaces


class PolicyInvalid(ValueError):
    """A policy document breaks a rule; `field` is its path, `rule` what it must be."""

    def __init__(self, field_path: str, rule: str) -> None:
        super().__init__(f"{field_path}: {rule}")
        self.field = field_path
        self.rule = rule


# --- checking ------------------------------------------------------------------------------


def check(
    pod_template: object, namespace: str, policy: ClusterPolicy, path: str = ""
) -> list[Violation]:
    """Every violation of `policy` by one pod template (`{metadata, spec}`) of `namespace`,
    sorted by path; paths start with `path` (a prefix ending in `.`, or empty). Never raises."""
    out: list[Violation] = []
    if not policy.serves(namespace):
        out.append(_namespace_violation(namespace, policy))
    out.extend(_check_template(pod_template, policy, path))
    return sorted(out)


def check_replica(replica: object, policy: ClusterPolicy) -> list[Violation]:
    """Every violation of `policy` by a ModelReplica's pod templates (and its namespace),
    sorted by path from the replica (`spec.engines[0].members[1].template.spec...`)."""
    out: list[Violation] = []
    meta = _map(_map(replica).get("metadata"))
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not policy.serves(namespace):
        out.append(_namespace_violation(namespace, policy))
    for where, template in _templates(replica, out):
        out.extend(_check_template(template, policy, f"{where}.template."))
    return sorted(out)


def summary(violations: Sequence[Violation]) -> str:
    """`3 violations of the cluster policy: <path>: <message> (<Code>); ...`, the first few."""
    shown = "; ".join(
        f"{v.path}: {v.message} ({v.code})" for v in violations[:MAX_VIOLATIONS_IN_MESSAGE]
    )
    more = len(violations) - MAX_VIOLATIONS_IN_MESSAGE
    noun = "violation" if len(violations) == 1 else "violations"
    tail = f"; and {more} more" if more > 0 else ""
    return f"{len(violations)} {noun} of the cluster policy: {shown}{tail}"


def refusal_condition(violations: Sequence[Violation]) -> dict[str, str]:
    """The `PolicyAllowed=False` condition body of a refused replica's observation."""
    return {
        "type": POLICY_ALLOWED,
        "status": "False",
        "reason": REASON_POLICY_DENIED,
        "message": summary(violations),
    }


def namespace_labels(policy: ClusterPolicy) -> dict[str, str]:
    """The Pod Security Admission labels for a namespace the agent creates."""
    psa = policy.pod_security
    out: dict[str, str] = {}
    for mode, level in (("enforce", psa.enforce), ("warn", psa.warn), ("audit", psa.audit)):
        if level is not None:
            out[f"{PSA_LABEL_PREFIX}{mode}"] = level
            out[f"{PSA_LABEL_PREFIX}{mode}-version"] = psa.version
    return out


def namespace_body(name: str, policy: ClusterPolicy) -> dict[str, Any]:
    """The Namespace the agent creates for a replica: labelled for Pod Security Admission."""
    meta: dict[str, Any] = {"name": name}
    found = namespace_labels(policy)
    if found:
        meta["labels"] = found
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _namespace_violation(namespace: object, policy: ClusterPolicy) -> Violation:
    if not isinstance(namespace, str):
        return Violation("metadata.namespace", ViolationCode.MALFORMED_FIELD, "not a string")
    why = "excluded" if namespace in policy.excluded_namespaces else "not in the served list"
    return Violation(
        "metadata.namespace",
        ViolationCode.NAMESPACE_NOT_SERVED,
        f"namespace {namespace!r} is not served by this cluster ({why})",
    )


def _templates(replica: object, out: list[Violation]) -> Iterator[tuple[str, object]]:
    """Each member's pod template with its path; a malformed engine or member list is a
    violation (its templates cannot be checked)."""
    engines = _map(replica).get("spec")
    engines = _map(engines).get("engines")
    if engines is None:
        return
    if not isinstance(engines, list | tuple):
        out.append(_malformed("spec.engines", "a list"))
        return
    for i, engine in enumerate(engines):
        members = _map(engine).get("members")
        if members is None:
            continue
        if not isinstance(members, list | tuple):
            out.append(_malformed(f"spec.engines[{i}].members", "a list"))
            continue
        for j, member in enumerate(members):
            template = _map(member).get("template")
            if template is not None:
                yield f"spec.engines[{i}].members[{j}]", template


def _check_template(template: object, policy: ClusterPolicy, path: str) -> list[Violation]:
    if template is None:
        return []  # no template: the materializer makes a pod of nothing but its own fields
    if not isinstance(template, Mapping):
        return [_malformed(path.rstrip(".") or "template", "a map")]
    spec = template.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, Mapping):
        return [_malformed(f"{path}spec", "a map")]
    at = f"{path}spec."
    out = _check_pod_flags(spec, policy, at)
    out.extend(_check_service_account(spec, policy, at))
    out.extend(_check_volumes(spec.get("volumes"), policy, f"{at}volumes"))
    out.extend(check_spec(template, spec, policy, at))
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(kind)
        if containers is None:
            continue
        if not isinstance(containers, list | tuple):
            out.append(_malformed(f"{at}{kind}", "a list"))
            continue
        for k, container in enumerate(containers):
            out.extend(_check_container(container, policy, f"{at}{kind}[{k}]"))
    return out


_HOST_NAMESPACE_FIELDS: Final = (
    ("hostNetwork", "allow_host_network", "uses the node's network namespace"),
    ("hostPID", "allow_host_pid", "uses the node's process namespace"),
    ("hostIPC", "allow_host_ipc", "uses the node's IPC namespace"),
)


def _check_pod_flags(spec: Mapping[str, Any], policy: ClusterPolicy, at: str) -> list[Violation]:
    out: list[Violation] = []
    for name, allowed, what in _HOST_NAMESPACE_FIELDS:
        flag = _flag(spec.get(name), f"{at}{name}", out)
        if flag and not getattr(policy, allowed):
            out.append(Violation(f"{at}{name}", ViolationCode.HOST_NAMESPACE, what))
    context = spec.get("securityContext")
    if context is not None and not isinstance(context, Mapping):
        out.append(_malformed(f"{at}securityContext", "a map"))
    elif context is not None:
        out.extend(_check_host_process(context, policy, f"{at}securityContext"))
    return out


def _check_service_account(
    spec: Mapping[str, Any], policy: ClusterPolicy, at: str
) -> list[Violation]:
    allowed = policy.allowed_service_accounts
    if ANY_SERVICE_ACCOUNT in allowed:
        return []
    out: list[Violation] = []
    for name in ("serviceAccountName", "serviceAccount"):
        value = spec.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            out.append(_malformed(f"{at}{name}", "a string"))
            continue
        account = value or DEFAULT_SERVICE_ACCOUNT
        if account not in allowed:
            out.append(
                Violation(
                    f"{at}{name}",
                    ViolationCode.SERVICE_ACCOUNT_NOT_ALLOWED,
                    f"service account {_shown(account)} is not allowed "
                    f"(allowed: {', '.join(sorted(allowed)) or 'none'})",
                )
            )
    is_unset = spec.get("serviceAccountName") is None and spec.get("serviceAccount") is None
    if is_unset and DEFAULT_SERVICE_ACCOUNT not in allowed:
        out.append(
            Violation(
                f"{at}serviceAccountName",
                ViolationCode.SERVICE_ACCOUNT_NOT_ALLOWED,
                "unset (service account 'default') and 'default' is not allowed",
            )
        )
    return out


def _check_volumes(volumes: object, policy: ClusterPolicy, at: str) -> list[Violation]:
    if volumes is None:
        return []
    if not isinstance(volumes, list | tuple):
        return [_malformed(at, "a list")]
    out: list[Violation] = []
    for i, volume in enumerate(volumes):
        if not isinstance(volume, Mapping):
            out.append(_malformed(f"{at}[{i}]", "a map"))
        elif volume.get("hostPath") is not None and not policy.allow_host_path:
            host = _map(volume.get("hostPath")).get("path")
            shown = f" {_shown(host)}" if isinstance(host, str) else ""
            out.append(
                Violation(
                    f"{at}[{i}].hostPath",
                    ViolationCode.HOST_PATH,
                    f"mounts the node's path{shown}",
                )
            )
    return out


def _check_container(container: object, policy: ClusterPolicy, at: str) -> list[Violation]:
    if not isinstance(container, Mapping):
        return [_malformed(at, "a map")]
    out = _check_ports(container.get("ports"), policy, f"{at}.ports")
    context = container.get("securityContext")
    if context is None:
        return out
    if not isinstance(context, Mapping):
        out.append(_malformed(f"{at}.securityContext", "a map"))
        return out
    where = f"{at}.securityContext"
    if _flag(context.get("privileged"), f"{where}.privileged", out) and not (
        policy.allow_privileged
    ):
        out.append(
            Violation(f"{where}.privileged", ViolationCode.PRIVILEGED, "a privileged container")
        )
    out.extend(_check_host_process(context, policy, where))
    out.extend(_check_capabilities(context.get("capabilities"), policy, f"{where}.capabilities"))
    return out


def _check_host_process(
    context: Mapping[str, Any], policy: ClusterPolicy, where: str
) -> list[Violation]:
    options = context.get("windowsOptions")
    if options is None:
        return []
    if not isinstance(options, Mapping):
        return [_malformed(f"{where}.windowsOptions", "a map")]
    out: list[Violation] = []
    at = f"{where}.windowsOptions.hostProcess"
    if _flag(options.get("hostProcess"), at, out) and not policy.allow_host_process:
        out.append(Violation(at, ViolationCode.HOST_PROCESS, "a Windows host process"))
    return out


def _check_capabilities(capabilities: object, policy: ClusterPolicy, at: str) -> list[Violation]:
    if capabilities is None:
        return []
    if not isinstance(capabilities, Mapping):
        return [_malformed(at, "a map")]
    added = capabilities.get("add")
    if added is None:
        return []
    if not isinstance(added, list | tuple):
        return [_malformed(f"{at}.add", "a list")]
    out: list[Violation] = []
    for i, name in enumerate(added):
        if not isinstance(name, str):
            out.append(_malformed(f"{at}.add[{i}]", "a string"))
        elif normalize_capability(name) not in policy.allowed_capabilities:
            out.append(
                Violation(
                    f"{at}.add[{i}]",
                    ViolationCode.CAPABILITY_NOT_ALLOWED,
                    f"adds capability {_shown(name)}, not in the allowed set",
                )
            )
    return out


def _check_ports(ports: object, policy: ClusterPolicy, at: str) -> list[Violation]:
    if ports is None:
        return []
    if not isinstance(ports, list | tuple):
        return [_malformed(at, "a list")]
    out: list[Violation] = []
    for i, port in enumerate(ports):
        if not isinstance(port, Mapping):
            out.append(_malformed(f"{at}[{i}]", "a map"))
            continue
        host_port = port.get("hostPort")
        if host_port is None or (host_port == 0 and not isinstance(host_port, bool)):
            continue
        if isinstance(host_port, bool) or not isinstance(host_port, int):
            out.append(_malformed(f"{at}[{i}].hostPort", "an integer"))
        elif not policy.allow_host_ports:
            out.append(
                Violation(
                    f"{at}[{i}].hostPort",
                    ViolationCode.HOST_PORT,
                    f"binds the node's port {host_port}",
                )
            )
    return out


def normalize_capability(name: str) -> str:
    """`cap_sys_admin` -> `SYS_ADMIN`: the form capabilities are compared in."""
    upper = name.strip().upper()
    return upper[4:] if upper.startswith("CAP_") else upper


# --- parsing a policy document ---------------------------------------------------------------

_TOP_KEYS: Final = frozenset({"namespaces", "excludedNamespaces", "level", "allow", "podSecurity"})
#: `allow` flags: document key -> ClusterPolicy field.
_ALLOW_FLAGS: Final = {
    "privileged": "allow_privileged",
    "hostNetwork": "allow_host_network",
    "hostPID": "allow_host_pid",
    "hostIPC": "allow_host_ipc",
    "hostProcess": "allow_host_process",
    "hostPath": "allow_host_path",
    "hostPorts": "allow_host_ports",
}
#: `allow` lists of names ("*": any; default none).
_ALLOW_NAMES: Final = (
    "priorityClasses",
    "runtimeClasses",
    "secrets",
    "persistentVolumeClaims",
    "csiDrivers",
)
_ALLOW_KEYS: Final = frozenset(
    {*_ALLOW_FLAGS, *_ALLOW_NAMES, "capabilities", "serviceAccounts", "tolerations"}
)
_TOLERATION_FIELDS: Final = frozenset({"key", "operator", "value", "effect"})
_PSA_KEYS: Final = frozenset({"enforce", "warn", "audit", "version"})
#: The fields an `allow` flag relaxes beyond `baseline`: a namespace enforcing `baseline`
#: (or `restricted`) would reject the very pods the policy lets through.
_BEYOND_BASELINE: Final = (
    "privileged",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostProcess",
    "hostPath",
    "hostPorts",
)


def parse_policy(data: object) -> ClusterPolicy:
    """A `ClusterPolicy` from a policy document (parsed YAML or JSON); an empty document (None)
    is the default policy. Raises `PolicyInvalid` naming the field and the rule.

        namespaces: [ml-team, search]       # served; absent or []: all but the excluded
        excludedNamespaces: [kube-system]   # replaces the default list
        allow:
          privileged: false                 # and hostNetwork, hostPID, hostIPC, hostProcess,
          hostPath: false                   # hostPorts: booleans, default false
          capabilities: [NET_ADMIN]         # added to the level's set
          serviceAccounts: [default, vllm]  # the whole list ("*": any); default [default]
          priorityClasses: [inference]      # and runtimeClasses, secrets,
          secrets: [hf-token]               # persistentVolumeClaims, csiDrivers:
                                            # names ("*": any), default none
          tolerations:                      # added to the pool's (nvidia.com/gpu NoSchedule)
          - {key: dedicated, operator: Equal, value: ml, effect: NoSchedule}
        level: restricted                   # or baseline (without restricted's rules)
        podSecurity: {enforce: privileged, warn: restricted, audit: restricted, version: latest}
                                            # (beyond baseline: enforce must be privileged)
    """
    if data is None:
        return ClusterPolicy()
    doc = _mapping(data, "policy", _TOP_KEYS)
    allow = _mapping(doc.get("allow", {}), "allow", _ALLOW_KEYS)
    flags = {
        name: _bool(allow.get(key, False), f"allow.{key}") for key, name in _ALLOW_FLAGS.items()
    }
    extra_caps = _names(allow.get("capabilities", []), "allow.capabilities", _capability)
    accounts = _names(
        allow.get("serviceAccounts", [DEFAULT_SERVICE_ACCOUNT]), "allow.serviceAccounts", _account
    )
    pod_security = _pod_security(doc.get("podSecurity", {}))
    level = doc.get("level", RESTRICTED)
    if level not in LEVELS:
        raise PolicyInvalid("level", f"must be one of {', '.join(LEVELS)}")
    if level == BASELINE and pod_security.enforce == RESTRICTED:
        raise PolicyInvalid(
            "podSecurity.enforce",
            "must not be restricted at level baseline: those namespaces reject what it allows",
        )
    names = {key: _names(allow.get(key, []), f"allow.{key}", _object_name) for key in _ALLOW_NAMES}
    relaxed = [k for k in _BEYOND_BASELINE if allow.get(k) is True]
    if {normalize_capability(c) for c in extra_caps} - BASELINE_CAPABILITIES:
        relaxed.append("capabilities")
    if relaxed and pod_security.enforce not in (None, "privileged"):
        raise PolicyInvalid(
            "podSecurity.enforce",
            f"must be privileged (or null) when allow.{relaxed[0]} goes beyond baseline: "
            f"a namespace enforcing {pod_security.enforce} rejects those pods",
        )
    return ClusterPolicy(
        namespaces=_names(doc.get("namespaces", []), "namespaces", _namespace),
        excluded_namespaces=_names(
            doc.get("excludedNamespaces", list(DEFAULT_EXCLUDED_NAMESPACES)),
            "excludedNamespaces",
            _namespace,
        ),
        level=level,
        allowed_capabilities=(
            RESTRICTED_CAPABILITIES if level == RESTRICTED else BASELINE_CAPABILITIES
        )
        | {normalize_capability(c) for c in extra_caps},
        allowed_service_accounts=accounts,
        allowed_tolerations=(
            GPU_TOLERATION_RULE,
            *_tolerations(allow.get("tolerations", []), "allow.tolerations"),
        ),
        pod_security=pod_security,
        allowed_priority_classes=names["priorityClasses"],
        allowed_runtime_classes=names["runtimeClasses"],
        allowed_secrets=names["secrets"],
        allowed_claims=names["persistentVolumeClaims"],
        allowed_csi_drivers=names["csiDrivers"],
        **flags,
    )


def warnings(policy: ClusterPolicy) -> list[str]:
    """What a valid policy does that an operator should know: serving a namespace of the
    cluster's own (`kube-system`, the agent's) because `excludedNamespaces` no longer lists it."""
    served = [n for n in DEFAULT_EXCLUDED_NAMESPACES if n not in policy.excluded_namespaces]
    if not served or (policy.namespaces and not set(served) & set(policy.namespaces)):
        return []
    if policy.namespaces:
        served = [n for n in served if n in policy.namespaces]
    return [
        f"excludedNamespaces: serves {', '.join(served)}: tenant pods may run in the "
        "cluster's own namespaces (list them in excludedNamespaces unless that is meant)"
    ]


def _tolerations(value: object, path: str) -> tuple[TolerationRule, ...]:
    if not isinstance(value, list | tuple):
        raise PolicyInvalid(path, "must be a list")
    if len(value) > MAX_LIST_ENTRIES:
        raise PolicyInvalid(path, f"at most {MAX_LIST_ENTRIES} entries (got {len(value)})")
    out: list[TolerationRule] = []
    for i, item in enumerate(value):
        doc = _mapping(item, f"{path}[{i}]", _TOLERATION_FIELDS)
        fields: dict[str, str] = {}
        for key in _TOLERATION_FIELDS:
            text = doc.get(key, "")
            if not isinstance(text, str) or len(text) > MAX_NAME_CHARS:
                raise PolicyInvalid(
                    f"{path}[{i}].{key}", f"must be a string of at most {MAX_NAME_CHARS}"
                )
            fields[key] = text
        operator = fields["operator"] or "Equal"
        if operator not in ("Equal", "Exists"):
            raise PolicyInvalid(f"{path}[{i}].operator", "must be Equal or Exists")
        if not fields["key"] and operator != "Exists":
            raise PolicyInvalid(f"{path}[{i}].operator", "must be Exists when key is empty")
        if fields["effect"] not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise PolicyInvalid(
                f"{path}[{i}].effect", "must be NoSchedule, PreferNoSchedule, NoExecute or empty"
            )
        out.append(TolerationRule(fields["key"], operator, fields["value"], fields["effect"]))
    return tuple(out)


def _object_name(name: str) -> str:
    if name == ANY:
        return ""
    parts = name.split(".")
    if len(name) <= MAX_NAME_CHARS and all(_is_dns_label(p, 63) for p in parts):
        return ""
    return 'must be an object name (a DNS subdomain of at most 253) or "*"'


def _pod_security(data: object) -> PodSecurityLabels:
    doc = _mapping(data, "podSecurity", _PSA_KEYS)
    levels: dict[str, str | None] = {}
    defaults = PodSecurityLabels()
    for mode in ("enforce", "warn", "audit"):
        value = doc.get(mode, getattr(defaults, mode))
        if value is not None and value not in PSA_LEVELS:
            raise PolicyInvalid(
                f"podSecurity.{mode}", f"must be one of {', '.join(PSA_LEVELS)} or null"
            )
        levels[mode] = value
    version = doc.get("version", defaults.version)
    if not isinstance(version, str) or not _is_psa_version(version):
        raise PolicyInvalid("podSecurity.version", "must be latest or v1.<minor> (e.g. v1.33)")
    return PodSecurityLabels(levels["enforce"], levels["warn"], levels["audit"], version)


def _is_psa_version(value: str) -> bool:
    if value == "latest":
        return True
    major, _, minor = value.partition(".")
    return major == "v1" and minor.isdigit() and len(minor) <= 3 and minor.isascii()


def _mapping(data: object, path: str, keys: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise PolicyInvalid(path, "must be a map")
    for key in data:
        if not isinstance(key, str) or key not in keys:
            shown = _shown(key) if isinstance(key, str) else f"a {type(key).__name__} key"
            raise PolicyInvalid(
                f"{path}.{key}" if isinstance(key, str) else path,
                f"unknown field {shown} (known: {', '.join(sorted(keys))})",
            )
    return data


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyInvalid(path, "must be true or false")
    return value


def _names(value: object, path: str, rule: Callable[[str], str]) -> tuple[str, ...]:
    """A list of at most `MAX_LIST_ENTRIES` distinct strings, each passing `rule` (which
    returns what is wrong, or "")."""
    if not isinstance(value, list | tuple):
        raise PolicyInvalid(path, "must be a list")
    if len(value) > MAX_LIST_ENTRIES:
        raise PolicyInvalid(path, f"at most {MAX_LIST_ENTRIES} entries (got {len(value)})")
    seen: set[str] = set()
    for i, name in enumerate(value):
        if not isinstance(name, str):
            raise PolicyInvalid(f"{path}[{i}]", "must be a string")
        wrong = rule(name)
        if wrong:
            raise PolicyInvalid(f"{path}[{i}]", wrong)
        if name in seen:
            raise PolicyInvalid(f"{path}[{i}]", f"duplicate {_shown(name)}")
        seen.add(name)
    return tuple(value)


def _is_dns_label(value: str, max_chars: int) -> bool:
    return (
        0 < len(value) <= max_chars
        and value.isascii()
        and value[0].isalnum()
        and value[-1].isalnum()
        and all(c.isdigit() or c.islower() or c == "-" for c in value)
    )


def _namespace(name: str) -> str:
    return "" if _is_dns_label(name, 63) else "must be a namespace name (a DNS label of at most 63)"


def _account(name: str) -> str:
    if name == ANY_SERVICE_ACCOUNT:
        return ""
    parts = name.split(".")
    if len(name) <= MAX_NAME_CHARS and all(_is_dns_label(p, 63) for p in parts):
        return ""
    return 'must be a service account name (a DNS subdomain of at most 253) or "*"'


def _capability(name: str) -> str:
    norm = normalize_capability(name)
    if (
        0 < len(norm) <= 64
        and norm.isascii()
        and all(c.isupper() or c.isdigit() or c == "_" for c in norm)
    ):
        return ""
    return "must be a capability name such as NET_ADMIN (letters, digits, _; at most 64)"
