"""Who can change a refusal, and how: the "what would change it" lines of `gpufleet explain`.

Every cluster-level reason code a diagnosis carries gets one line naming who acts (the platform
team that runs the hub and the clusters, the deployment's owner, or nobody: wait) and what they
do, with the clusters it concerns. The codes and their retry conditions are the core's
(`gpufleet.core.decision.ReasonCode`, docs/scheduling.md); this only says who holds the lever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpufleet.core.decision import Diagnosis, ReasonCode

PLATFORM: Final = "platform team"
OWNER: Final = "deployment owner"
NOBODY: Final = "nobody (wait)"


@dataclass(frozen=True, slots=True)
class Fix:
    """Who can lift one reason code, and what they do."""

    code: ReasonCode
    who: str
    what: str


_FIXES: Final = (
    Fix(
        ReasonCode.OBSERVATION_EXPIRED,
        PLATFORM,
        "the cluster's agent is silent: check its pods and Lease on the workload cluster "
        "(kubectl -n gpufleet-system get pods,lease) and its hub token (annotation "
        "gpufleet.io/token-expires-at of Secret gpufleet-hub; `gpufleet join` renews it)",
    ),
    Fix(
        ReasonCode.CLUSTER_NOT_READY,
        PLATFORM,
        "the controller sets Ready while the cluster's agent reports (its default "
        "--manage-ready): install or repair the agent (docs/operations.md, 'Join a workload "
        "cluster'); a hub run with --no-manage-ready leaves Ready to whoever owns it",
    ),
    Fix(
        ReasonCode.TAINTED,
        OWNER,
        "add a toleration to spec.tolerations, or the platform team removes the taint from "
        "the InferenceCluster's spec.taints",
    ),
    Fix(
        ReasonCode.CLUSTER_NOT_SELECTED,
        OWNER,
        "edit spec.clusterSelector, or the platform team relabels the InferenceCluster",
    ),
    Fix(
        ReasonCode.NO_MATCHING_POOL,
        OWNER,
        "edit the members' device requests (count, CEL selectors), or the platform team adds "
        "a pool whose InferenceClass matches them",
    ),
    Fix(
        ReasonCode.ENGINE_CANNOT_CLAIM,
        OWNER,
        "give a member a DRA device request a pool's class offers, or the platform team adds "
        "such a class",
    ),
    Fix(
        ReasonCode.INSUFFICIENT_GPU,
        NOBODY,
        "devices free up as other replicas leave; or the platform team grows the pool "
        "(spec.nodePools[].maxNodeCount)",
    ),
    Fix(
        ReasonCode.INSUFFICIENT_CPU,
        NOBODY,
        "CPU frees up as pods leave the nodes; or the member requests less CPU, or the "
        "platform team grows the pool",
    ),
    Fix(
        ReasonCode.INSUFFICIENT_MEMORY,
        NOBODY,
        "memory frees up as pods leave the nodes; or the member requests less memory, or the "
        "platform team grows the pool",
    ),
    Fix(
        ReasonCode.INSUFFICIENT_NODES,
        NOBODY,
        "whole nodes free up as replicas leave; or the platform team grows the pool "
        "(spec.nodePools[].maxNodeCount)",
    ),
    Fix(
        ReasonCode.GANG_NEEDS_DISTINCT_NODES,
        NOBODY,
        "as InsufficientGPU: each pod of a gang needs a node of its own",
    ),
    Fix(ReasonCode.BACKING_OFF, NOBODY, "the pool is avoided until the time in the message"),
)

FIXES: Final = {fix.code: fix for fix in _FIXES}


def fixes(diagnosis: Diagnosis) -> list[tuple[Fix, list[str]]]:
    """Each code with a known fix that a refused cluster carries, with those clusters (by
    name), in the order of `_FIXES` (root causes first)."""
    clusters: dict[ReasonCode, list[str]] = {}
    for verdict in diagnosis.clusters:
        if verdict.fits:
            continue
        for reason in verdict.reasons:
            if reason.code in FIXES:
                names = clusters.setdefault(reason.code, [])
                if verdict.cluster not in names:
                    names.append(verdict.cluster)
    return [(fix, clusters[fix.code]) for fix in _FIXES if fix.code in clusters]
