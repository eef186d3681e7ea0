"""What a refused pod template field is (pure): the codes, the violation, the readers.

Shared by `gpufleet.agent.policy` (the baseline rules, the policy document) and
`gpufleet.agent.pod_security` (the restricted rules and the fields only the fleet sets). The
readers never raise: a field of the wrong type is a `MalformedField` violation (fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ViolationCode(StrEnum):
    """Why a pod template is refused; CamelCase, fit for a condition's reason."""

    NAMESPACE_NOT_SERVED = "NamespaceNotServed"
    # Pod Security Standards, baseline
    PRIVILEGED = "Privileged"
    HOST_NAMESPACE = "HostNamespace"
    HOST_PROCESS = "HostProcess"
    CAPABILITY_NOT_ALLOWED = "CapabilityNotAllowed"
    HOST_PATH = "HostPath"
    HOST_PORT = "HostPort"
    HOST_PROBE = "HostProbe"
    APP_ARMOR = "AppArmorProfile"
    SE_LINUX = "SELinuxOptions"
    PROC_MOUNT = "ProcMount"
    SECCOMP = "SeccompProfile"
    SYSCTL = "UnsafeSysctl"
    # Pod Security Standards, restricted
    VOLUME_TYPE = "VolumeTypeNotAllowed"
    PRIVILEGE_ESCALATION = "PrivilegeEscalation"
    RUN_AS_ROOT = "RunAsRoot"
    CAPABILITIES_NOT_DROPPED = "CapabilitiesNotDropped"
    # Fields only the fleet sets, and what a pod may reference in its namespace
    SERVICE_ACCOUNT_NOT_ALLOWED = "ServiceAccountNotAllowed"
    PRIORITY_NOT_ALLOWED = "PriorityNotAllowed"
    NODE_NAME = "NodeNameSet"
    SCHEDULER_NAME = "SchedulerNameSet"
    TOLERATION_NOT_ALLOWED = "TolerationNotAllowed"
    RUNTIME_CLASS_NOT_ALLOWED = "RuntimeClassNotAllowed"
    EXTENDED_RESOURCE = "ExtendedResource"
    RESOURCE_CLAIM = "ResourceClaimSet"
    SECRET_NOT_ALLOWED = "SecretNotAllowed"
    CLAIM_NOT_ALLOWED = "PersistentVolumeClaimNotAllowed"
    #: A field a rule reads has the wrong type: refused, since it cannot be checked.
    MALFORMED_FIELD = "MalformedField"


@dataclass(frozen=True, slots=True, order=True)
class Violation:
    """One refused field: its path (from the object checked), the rule and a short message."""

    path: str
    code: ViolationCode
    message: str


def malformed(path: str, want: str) -> Violation:
    return Violation(path, ViolationCode.MALFORMED_FIELD, f"must be {want}")


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def shown(value: str) -> str:
    """A tenant's string as a message quotes it: repr, cut to 64 characters."""
    return repr(value[:64] + ("..." if len(value) > 64 else ""))


def flag(value: object, path: str, out: list[Violation]) -> bool:
    """A boolean field: True when set. A value of another type is reported malformed (once:
    the caller's rule does not also report it) and the template is refused either way."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    out.append(malformed(path, "a boolean"))
    return False


def sub_map(
    parent: Mapping[str, Any], key: str, path: str, out: list[Violation]
) -> Mapping[str, Any]:
    """`parent[key]` when it is a map; {} when absent; {} and a violation when malformed."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        out.append(malformed(path, "a map"))
        return {}
    return value


def sub_list(parent: Mapping[str, Any], key: str, path: str, out: list[Violation]) -> Sequence[Any]:
    """`parent[key]` when it is a list; () when absent; () and a violation when malformed."""
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        out.append(malformed(path, "a list"))
        return ()
    return value


def string(parent: Mapping[str, Any], key: str, path: str, out: list[Violation]) -> str | None:
    """`parent[key]` when it is a string; None when absent; None and a violation otherwise."""
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        out.append(malformed(path, "a string"))
        return None
    return value
