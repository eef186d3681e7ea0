"""`gpufleet validate` looks into pod templates: each member's `template` of a ModelDeployment
is checked as an agent with the default cluster policy checks it (`gpufleet.agent.policy.check`:
Pod Security restricted, the fleet's own rules), so a template an agent would refuse
(`PolicyDenied`) is seen before it is applied. A cluster's own policy (`gpufleet agent
--policy`) may allow more, so these are warnings: they do not change the exit code.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.agent.policy import ClusterPolicy, check
from gpufleet.api import Manifest


@dataclass(frozen=True, slots=True)
class TemplateWarning:
    """One field of a pod template the default policy refuses, with where it is."""

    subject: str
    path: str
    code: str
    message: str
    source: str

    def line(self) -> str:
        return (
            f"{self.subject}: {self.path}: {self.message} ({self.code}; refused by the "
            f"agent's default policy)  ({self.source})"
        )


def template_warnings(
    manifest: Manifest, policy: ClusterPolicy | None = None
) -> list[TemplateWarning]:
    """The violations of `policy` (default: the agent's) by the manifest's pod templates."""
    obj = manifest.obj
    if obj.kind != "ModelDeployment":
        return []
    policy = policy or ClusterPolicy()
    namespace = obj.metadata.namespace or "default"
    found: list[TemplateWarning] = []
    engines = obj.spec.template.spec.engines
    for i, engine in enumerate(engines):
        for j, member in enumerate(engine.members):
            at = f"spec.template.spec.engines[{i}].members[{j}].template."
            for v in check(member.template, namespace, policy, at):
                path = v.path or at.rstrip(".")
                subject = f"{obj.kind} {obj.display_name}"
                found.append(
                    TemplateWarning(subject, path, v.code.value, v.message, manifest.where(path))
                )
    return found
