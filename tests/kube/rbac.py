"""Kubernetes RBAC, evaluated as the API server's authorizer does, over install manifests.

`Rbac(manifests)` collects the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings among
`manifests`; `allows(subject, request)` says whether a ServiceAccount may make a request the
emulated API server recorded (kmockplus.Request). A rule matches when its `apiGroups`,
`resources` (`resource/subresource` for a subresource) and `verbs` each hold the request's
value or `*`, and its `resourceNames`, when given, hold the request's name (so they never match
a list, a watch of a collection or a create). A ClusterRoleBinding grants its ClusterRole in
every namespace and cluster-wide; a RoleBinding grants its Role or ClusterRole in its own
namespace only. As the API server does, a request on a Namespace object counts as made in that
namespace. A `User` (a bootstrap token's `system:bootstrap:ID` and its groups) matches a
binding's `User` and `Group` subjects. Aggregated ClusterRoles and non-resource URLs are not modelled (none is installed).

`authorizer(subjects)` makes the emulated API server enforce the same rules
(`KMockPlus.authorize`): a component's request they refuse is answered 403 Forbidden, so a
component that reaches outside its grant (an agent into another cluster's hub namespace) fails
as it would on a real cluster, not only in the check after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kmockplus import Request

Manifest = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class User:
    """A user the API server authenticated otherwise (a bootstrap token), with its groups."""

    name: str
    groups: tuple[str, ...] = ()

    @property
    def namespace(self) -> str:  # for `denied`'s lines
        return "user"


Subject = ServiceAccount | User


def _is_subject(subject: Subject, entry: Manifest) -> bool:
    if isinstance(subject, User):
        return (entry.get("kind") == "User" and entry.get("name") == subject.name) or (
            entry.get("kind") == "Group" and entry.get("name") in subject.groups
        )
    return (
        entry.get("kind") == "ServiceAccount"
        and entry.get("name") == subject.name
        and entry.get("namespace") == subject.namespace
    )


def _holds(values: Iterable[str], value: str) -> bool:
    return any(v in ("*", value) for v in values)


def rule_matches(rule: Manifest, request: Request) -> bool:
    resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
    names = rule.get("resourceNames") or []
    return (
        _holds(rule.get("apiGroups") or [], request.group)
        and _holds(rule.get("resources") or [], resource)
        and _holds(rule.get("verbs") or [], request.verb)
        and (not names or (bool(request.name) and request.name in names))
    )


class Rbac:
    """The RBAC objects among some manifests, and what they allow."""

    def __init__(self, manifests: Iterable[Manifest]) -> None:
        self.roles: dict[tuple[str, str, str], list[Manifest]] = {}  # (kind, ns, name) -> rules
        self.bindings: list[Manifest] = []
        for doc in manifests:
            kind, meta = doc.get("kind"), doc.get("metadata") or {}
            if kind in ("Role", "ClusterRole"):
                ns = meta.get("namespace", "") if kind == "Role" else ""
                self.roles[(kind, ns, meta["name"])] = list(doc.get("rules") or [])
            elif kind in ("RoleBinding", "ClusterRoleBinding"):
                self.bindings.append(doc)

    def _rules_for(self, subject: Subject, namespace: str) -> Iterable[Manifest]:
        """The rules granted to `subject` for a request in `namespace` ("" cluster-wide)."""
        for binding in self.bindings:
            if not any(_is_subject(subject, s) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            if binding["kind"] == "ClusterRoleBinding":
                yield from self.roles.get(("ClusterRole", "", ref["name"]), [])
                continue
            bound_ns = binding["metadata"]["namespace"]
            if bound_ns != namespace:
                continue
            role_ns = bound_ns if ref["kind"] == "Role" else ""
            yield from self.roles.get((ref["kind"], role_ns, ref["name"]), [])

    def granted(self, subject: Subject) -> set[tuple[str, str, str]]:
        """Every (apiGroup, resource, verb) some binding grants `subject`, in any namespace."""
        found = set()
        for binding in self.bindings:
            if not any(_is_subject(subject, s) for s in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            for rule in self.roles.get((ref["kind"], ns, ref["name"]), []):
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        found |= {(group, resource, verb) for verb in rule.get("verbs") or []}
        return found

    def allows(self, subject: Subject, request: Request) -> bool:
        namespace = request.namespace
        if request.group == "" and request.resource == "namespaces" and request.name:
            namespace = request.name
        return any(rule_matches(r, request) for r in self._rules_for(subject, namespace))

    def authorizer(self, subjects: Mapping[str, Subject]) -> Callable[[Request], bool]:
        """For `KMockPlus.authorize`: a request with a token in `subjects` is served when its
        ServiceAccount may make it; one with another token (the test's own, an admin's) is."""

        def authorize(request: Request) -> bool:
            subject = subjects.get(request.user)
            return subject is None or self.allows(subject, request)

        return authorize

    def denied(self, requests: Iterable[Request], subjects: Mapping[str, Subject]) -> list[str]:
        """One line per request made with a token in `subjects` that its ServiceAccount may not
        make (sorted); requests with other tokens (the test's own) are not checked."""
        lines = set()
        for request in requests:
            subject = subjects.get(request.user)
            if subject is not None and not self.allows(subject, request):
                lines.add(
                    f"{subject.namespace}/{subject.name} may not {request.verb} "
                    f"{request.group or 'core'}/{request.resource}"
                    f"{'/' + request.subresource if request.subresource else ''}"
                    f" in {request.namespace or '(cluster)'}"
                    f"{' name ' + request.name if request.name else ''}"
                )
        return sorted(lines)
