"""The event timeline of a run: what happened and when, with a kind, for the report's table and
the markers on its charts.

Made from the run's log (`RunResult.log`: the timeline's actions as they were carried out, and
the controller's placements, drops and refusals), the scenario's timeline (which action a log
line is), the failed checks, and each pool's node count in the samples (a change is a `nodes`
event at the sample that first shows it: the cluster-autoscaler writes no log line). A drop and a placement of the same deployment at the same
instant are one re-placement. A log line of a shape this module does not know is kept, as an
`other` event, so nothing that happened is left out.

Markers group the events of one instant; a run with many instants flags the ones that best
explain a change (agent events and failed checks first, placements last; see
`marker_instants`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.sim.report import colours
from gpufleet.sim.run.runner import RunResult
from gpufleet.sim.scenario.load import Action, ActionKind


class EventKind(StrEnum):
    ACTION = "action"
    AGENT = "agent"
    PLACED = "placed"
    DROPPED = "dropped"
    REPLACED = "re-placed"
    REFUSED = "refused"
    #: A pool's node count changed (cluster-autoscaler, or a node action), seen by the samples.
    NODES = "nodes"
    CHECK = "check failed"
    #: Under `--compare`: a check that does not hold in this mode (a difference, not a failure).
    CHECK_DIFFERS = "check differs"
    OTHER = "other"


#: Colours of the kinds (markers, badges); the page's legend names them.
KIND_COLOURS: dict[EventKind, str] = {
    EventKind.ACTION: colours.ACTION,
    EventKind.AGENT: colours.AGENT,
    EventKind.PLACED: colours.GOOD,
    EventKind.DROPPED: colours.MOVED,
    EventKind.REPLACED: colours.MOVED,
    EventKind.REFUSED: colours.FAILING,
    EventKind.NODES: colours.NODES,
    EventKind.CHECK: colours.FAILING,
    EventKind.CHECK_DIFFERS: colours.DEGRADED,
    EventKind.OTHER: colours.OTHER,
}
_AGENT_ACTIONS = {
    ActionKind.KILL_AGENT,
    ActionKind.START_AGENT,
    ActionKind.REINSTALL_AGENT,
    ActionKind.PARTITION,
    ActionKind.HEAL,
}

_PLACED = re.compile(r"placed (?P<dep>\S+) on (?P<cluster>\S+)$")
_DROPPED = re.compile(r"dropped (?P<dep>\S+) from (?P<cluster>\S+) \((?P<code>\w+)\)$")
_REFUSED = re.compile(r"refused (?P<dep>\S+): (?P<rest>.*)$")


@dataclass(frozen=True, slots=True)
class Event:
    at_s: float
    kind: EventKind
    text: str
    deployment: str = ""
    cluster: str = ""


def run_events(result: RunResult, *, is_compared: bool = False) -> list[Event]:
    """Every event of `result`, in time order (log order within an instant). Compared with
    another mode, a failed check is a difference (`CHECK_DIFFERS`)."""
    actions: dict[tuple[float, str], Action] = {
        (a.at_s, a.describe()): a for a in result.scenario.timeline
    }
    events: list[Event] = []
    for at_s, line in result.log:
        events.append(_classify(at_s, line, actions))
    events = _merge_replacements(events)
    events += node_changes(result)
    for failure in result.failures:
        events.append(
            Event(
                failure.at_s,
                EventKind.CHECK_DIFFERS if is_compared else EventKind.CHECK,
                f"{failure.path} {failure.what}: expected {failure.expected}, got {failure.got}",
            )
        )
    return sorted(events, key=lambda e: e.at_s)  # stable: log order within an instant


def node_changes(result: RunResult) -> list[Event]:
    """A pool's node count changing between two samples (ground truth), at the later sample:
    the cluster-autoscaler's work has no log line of its own."""
    s = result.series
    out = []
    for (cluster, pool), nodes in sorted(s.pool_nodes.items()):
        for i in range(1, len(nodes)):
            if nodes[i] == nodes[i - 1]:
                continue
            verb = "grew" if nodes[i] > nodes[i - 1] else "shrank"
            unit = "node" if nodes[i] == 1 else "nodes"
            out.append(
                Event(
                    s.times_s[i],
                    EventKind.NODES,
                    f"{cluster}/{pool} {verb} from {nodes[i - 1]} to {nodes[i]} {unit}",
                    cluster=cluster,
                )
            )
    return out


def _classify(at_s: float, line: str, actions: dict[tuple[float, str], Action]) -> Event:
    action = actions.get((at_s, line))
    if action is not None:
        kind = EventKind.AGENT if action.kind in _AGENT_ACTIONS else EventKind.ACTION
        return Event(at_s, kind, line, action.deployment, action.cluster)
    if m := _PLACED.match(line):
        return Event(at_s, EventKind.PLACED, line, m["dep"], m["cluster"])
    if m := _DROPPED.match(line):
        return Event(at_s, EventKind.DROPPED, line, m["dep"], m["cluster"])
    if m := _REFUSED.match(line):
        return Event(at_s, EventKind.REFUSED, line, m["dep"])
    return Event(at_s, EventKind.OTHER, line)


def _merge_replacements(events: list[Event]) -> list[Event]:
    """A drop and a placement of one deployment at one instant become one re-placement."""
    out: list[Event] = []
    open_drops: dict[tuple[float, str], list[int]] = {}
    for event in events:
        key = (event.at_s, event.deployment)
        if event.kind is EventKind.DROPPED:
            open_drops.setdefault(key, []).append(len(out))
            out.append(event)
            continue
        if event.kind is EventKind.PLACED and open_drops.get(key):
            at = open_drops[key].pop(0)
            dropped = out[at]
            m = _DROPPED.match(dropped.text)
            code = f" ({m['code']})" if m else ""
            out[at] = Event(
                event.at_s,
                EventKind.REPLACED,
                f"re-placed {event.deployment} from {dropped.cluster} to {event.cluster}{code}",
                event.deployment,
                event.cluster,
            )
            continue
        out.append(event)
    return out


@dataclass(frozen=True, slots=True)
class Marker:
    """One marked instant: its number (as the event table shows it), time, colour, title."""

    number: int
    at_s: float
    colour: str
    title: str


#: At most this many markers on a chart.
MAX_MARKERS = 40


def tier(event: Event) -> int:
    """How much an event explains a change on a chart, 0 most: an agent event or a failed
    check; an action on a node or a cluster, or a pool's node count changing; an action on a
    deployment; a refusal, drop or re-placement; a placement."""
    if event.kind in (EventKind.AGENT, EventKind.CHECK, EventKind.CHECK_DIFFERS):
        return 0
    if event.kind is EventKind.ACTION:
        return 2 if event.deployment else 1
    if event.kind is EventKind.NODES:
        return 1
    return 4 if event.kind is EventKind.PLACED else 3


def marker_instants(events: Sequence[Event]) -> list[Marker]:
    """The instants to flag, numbered in time order: every instant with an event when there
    are at most `MAX_MARKERS`. Otherwise instants are taken by their most explaining event
    (`tier`), a tier at a time; the tier that does not fit whole is thinned evenly over the
    run, so the flags still span it."""
    by_instant: dict[float, list[Event]] = {}
    for event in events:
        by_instant.setdefault(event.at_s, []).append(event)
    by_tier: dict[int, list[float]] = {}
    for at_s, group in sorted(by_instant.items()):
        by_tier.setdefault(min(tier(e) for e in group), []).append(at_s)
    chosen: list[float] = []
    for _, instants in sorted(by_tier.items()):
        room = MAX_MARKERS - len(chosen)
        if room <= 0:
            break
        if len(instants) > room:
            instants = [instants[i * len(instants) // room] for i in range(room)]
        chosen += instants
    markers = []
    for number, at_s in enumerate(sorted(chosen), start=1):
        group = by_instant[at_s]
        first = min(group, key=lambda e: _PRIORITY.index(e.kind))
        title = "; ".join(e.text for e in group[:6]) + (" ..." if len(group) > 6 else "")
        markers.append(Marker(number, at_s, KIND_COLOURS[first.kind], title))
    return markers


#: Which kind colours an instant with several events (the cause before the effect).
_PRIORITY = (
    EventKind.CHECK,
    EventKind.CHECK_DIFFERS,
    EventKind.AGENT,
    EventKind.ACTION,
    EventKind.NODES,
    EventKind.REFUSED,
    EventKind.REPLACED,
    EventKind.DROPPED,
    EventKind.PLACED,
    EventKind.OTHER,
)


def shared_markers(runs: Sequence[Sequence[Event]]) -> list[list[Marker]]:
    """Markers for runs compared side by side, numbered once over all of them: an instant has
    the same number in every panel and event table. Each run is flagged at the chosen instants
    it has events at, coloured and titled by its own events there."""
    chosen = marker_instants([e for run in runs for e in run])
    out = []
    for run in runs:
        by_instant: dict[float, list[Event]] = {}
        for event in run:
            by_instant.setdefault(event.at_s, []).append(event)
        markers = []
        for m in chosen:
            group = by_instant.get(m.at_s)
            if not group:
                continue
            first = min(group, key=lambda e: _PRIORITY.index(e.kind))
            title = "; ".join(e.text for e in group[:6]) + (" ..." if len(group) > 6 else "")
            markers.append(Marker(m.number, m.at_s, KIND_COLOURS[first.kind], title))
        out.append(markers)
    return out
