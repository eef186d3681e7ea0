"""The version-skew policy (docs/operations.md, "Version skew"), checked at run time.

An agent stamps its gpufleet version in its reports (`status.agent.version`; agents older than
the field omit it). A hub of version `H.M` accepts agents of `H.M` and `H.(M-1)` (its own minor
release and the previous one; patch releases do not matter). Outside that window the cluster
gets `AgentVersionSupported=False` (reason `AgentTooOld` or `AgentTooNew`, the message naming
both versions) while its reports are still used: the schema, which the API server checks
against the hub's CRDs, is what refuses a report the hub cannot read; the condition says the
pair is not supported. No condition while the versions agree, while the agent sends no version,
or while the hub does not know its own (`hub_version` None).

Pure: a function of the two version strings.
"""

from __future__ import annotations

import re
from typing import Final

from gpufleet.controller.conditions import Obj, condition

AGENT_VERSION: Final = "AgentVersionSupported"
TOO_OLD: Final = "AgentTooOld"
TOO_NEW: Final = "AgentTooNew"
UNREADABLE: Final = "AgentVersionUnreadable"

#: `MAJOR.MINOR` at the start of a version (`0.2.1`, `0.2.1.dev3+gabc`, `1.0.0-rc.1`).
_MAJOR_MINOR: Final = re.compile(r"^v?(\d{1,9})\.(\d{1,9})(?:[.+\-]|$)")


def major_minor(version: str) -> tuple[int, int] | None:
    """The release (major, minor) a version string names; None when it names none."""
    found = _MAJOR_MINOR.match(version)
    return (int(found[1]), int(found[2])) if found else None


def skew_condition(agent_version: str | None, hub_version: str | None) -> Obj | None:
    """`AgentVersionSupported=False` when the agent's version is outside the hub's window;
    None when it is inside, or either version is not known."""
    if not agent_version or not hub_version:
        return None
    hub = major_minor(hub_version)
    if hub is None:
        return None
    accepted = _window(hub)
    agent = major_minor(agent_version)
    if agent is None:
        return condition(
            AGENT_VERSION,
            "False",
            UNREADABLE,
            f"agent version {agent_version!r} names no MAJOR.MINOR release; hub {hub_version} "
            f"accepts agents {accepted}",
        )
    if agent[0] == hub[0] and hub[1] - 1 <= agent[1] <= hub[1]:
        return None
    if agent > hub:
        return condition(
            AGENT_VERSION,
            "False",
            TOO_NEW,
            f"agent {agent_version} is newer than hub {hub_version}, which accepts agents "
            f"{accepted}: upgrade the hub (CRDs, then the controller) first",
        )
    return condition(
        AGENT_VERSION,
        "False",
        TOO_OLD,
        f"agent {agent_version} is older than hub {hub_version} accepts ({accepted}): "
        "upgrade the agent, one minor release at a time",
    )


def _window(hub: tuple[int, int]) -> str:
    major, minor = hub
    return f"{major}.{minor - 1}.x and {major}.{minor}.x" if minor > 0 else f"{major}.0.x"
