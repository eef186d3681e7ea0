"""Rendering a `Decision` for `gpufleet plan` and `gpufleet explain`: tables and JSON.

Tables are rich tables when stdout is a terminal and plain aligned text otherwise (columns
separated by two spaces, a multi-line cell continues on the next lines), so piped output greps
and diffs and tests compare it whole. Colour never changes the text.

JSON (or YAML, the same data) is the decision as data, documented in docs/cli.md: keys in a fixed order (camelCase, as
the API spells fields; the keys of a reason's `details` and of a verdict's `free` are the
core's own), enums as their values, datetimes as RFC 3339 in UTC. Every list keeps the core's
order (deployments by key, clusters and placements by name).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from gpufleet.core.decision import (
    Accounting,
    ClusterVerdict,
    Decision,
    DeploymentDecision,
    Diagnosis,
    DroppedReplica,
    FreeBucket,
    PlacedEngine,
    PlacedMember,
    Placement,
    PoolState,
    PoolVerdict,
    Reason,
)
from gpufleet.core.model import ClusterName, PoolName, Role

#: The widest a table column is kept for its longest word (longer words are folded).
WORD_MAX_CHARS = 32
#: Written in place of an empty cell, so every column of plain text has a value to grep.
NONE = "-"
CREATE = "create"
RETAIN = "retain"

Json = dict[str, Any]


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


class DecisionFormat(StrEnum):
    """`plan -o` and `explain -o`: tables, or the decision as JSON or YAML (the same data)."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def data_text(body: Json, output: DecisionFormat) -> str:
    """`body` as indented JSON, or as YAML with the keys in the same order."""
    if output is DecisionFormat.YAML:
        return yaml.safe_dump(body, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(body, indent=2)


def rfc3339(moment: datetime) -> str:
    """`2026-11-29T10:00:05Z`: UTC, with a `Z`."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- tables -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Table:
    """Headers and rows of text; a cell may hold several lines."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def plain_lines(table: Table) -> list[str]:
    """The table as aligned text: a header line, then each row (its cells' lines side by side)."""
    split = [[cell.split("\n") for cell in row] for row in (table.headers, *table.rows)]
    widths = [max(len(line) for row in split for line in row[i]) for i in range(len(table.headers))]
    lines: list[str] = []
    for row in split:
        for k in range(max(len(cell) for cell in row)):
            cells = zip(row, widths, strict=True)
            parts = [(cell[k] if k < len(cell) else "").ljust(w) for cell, w in cells]
            lines.append("  ".join(parts).rstrip())
    return lines


class Printer:
    """Writes lines and tables to a console: rich tables on a terminal, plain text otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def line(self, text: str = "", style: str = "", indent: int = 0) -> None:
        if not self.console.is_terminal or not text:
            self.console.print(Text(" " * indent + text, style=style))
            return
        # On a terminal, wrap at spaces, continuation lines under the first.
        width = max(1, self.console.width - indent)
        for wrapped in Text(text, style=style).wrap(self.console, width):
            wrapped.rstrip()
            self.console.print(Text(" " * indent) + wrapped)

    def table(self, table: Table, indent: int = 0) -> None:
        if not self.console.is_terminal:
            for line in plain_lines(table):
                self.line(line, indent=indent)
            return
        widths = column_widths(table, self.console.width - indent)
        if widths is not None:
            self.console.print(Padding(rich_table(table, widths), (0, 0, 0, indent)))
            return
        # Too wide for the terminal even with every column at its longest word: one record
        # per row (header, then its value wrapped at spaces), as `kubectl describe` prints.
        for row in table.rows:
            grid = RichTable.grid(padding=(0, 2))
            grid.add_column(no_wrap=True, style="bold")
            grid.add_column(overflow="fold")
            for header, cell in zip(table.headers, row, strict=True):
                grid.add_row(header, Text(cell))
            self.console.print(Padding(grid, (0, 0, 1, indent)))


#: Between two columns of a rich table: a space, the (invisible) divider, a space.
COLUMN_GAP = 3


def column_widths(table: Table, available: int) -> list[int] | None:
    """Column widths that fit `available` characters with no word broken, or None.

    Each column gets at least its longest word (at most WORD_MAX_CHARS: longer words are
    folded) and at most its longest line; the room left over goes to the columns that
    would wrap, in proportion to what they lack.
    """
    columns = list(zip(table.headers, *table.rows, strict=True))
    words = [max(len(w) for cell in col for w in (cell.split() or [""])) for col in columns]
    lines = [max(len(line) for cell in col for line in cell.split("\n")) for col in columns]
    lows = [min(w, WORD_MAX_CHARS) for w in words]
    room = available - COLUMN_GAP * (len(columns) - 1)
    if sum(lows) > room:
        return None
    if sum(lines) <= room:
        return lines
    spare = room - sum(lows)
    lacking = [line - low for line, low in zip(lines, lows, strict=True)]
    total = sum(lacking)
    return [low + spare * lack // total for low, lack in zip(lows, lacking, strict=True)]


def rich_table(table: Table, widths: Sequence[int]) -> RichTable:
    rich = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header, width in zip(table.headers, widths, strict=True):
        rich.add_column(header, overflow="fold", width=width)
    for row in table.rows:
        rich.add_row(*(Text(cell) for cell in row))
    return rich


# --- text pieces --------------------------------------------------------------------------


def details_text(details: Mapping[str, int | str]) -> str:
    """`pods=1 requested_devices=1 ...` in the core's order; `-` when there are none."""
    return " ".join(f"{key}={value}" for key, value in details.items()) or NONE


def reason_text(reason: Reason) -> str:
    return f"{reason.code.value}: {reason.message}"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def devices_per_pod(member: PlacedMember) -> str:
    """`1 gpu`, `8 gpu + 2 nic`; `-` for a member that claims nothing."""
    return " + ".join(f"{r.count} {r.name}" for r in member.requests) or NONE


def member_pods(engine: PlacedEngine, member: PlacedMember) -> int:
    return engine.copies * (member.worker_nodes if member.role is Role.WORKER else 1)


def engine_to_pool(engine: PlacedEngine, member: PlacedMember) -> str:
    """`engine → l4`; a gang or multi-member engine names the role: `engine/Leader → h100`."""
    name = engine.name if len(engine.members) == 1 else f"{engine.name}/{member.role.value}"
    return f"{name} → {member.pool}"


def bucket_text(bucket: FreeBucket) -> str:
    nodes = plural(bucket.nodes, "node")
    if len(bucket.free) == 1:
        return f"{nodes} with {next(iter(bucket.free.values()))} free"
    free = " + ".join(f"{n} {driver}" for driver, n in bucket.free.items())
    return f"{nodes} with {free} free"


def free_text(state: PoolState) -> str:
    """The pool's free summary: its histogram (FreeGPU) or its free nodes (WholeNode)."""
    if state.accounting is Accounting.WHOLE_NODE:
        return (
            f"{state.free_nodes if state.free_nodes is not None else 0} of "
            f"{plural(state.nodes, 'node')} free"
        )
    return ", ".join(bucket_text(b) for b in state.histogram) or "no nodes"


def verdict_free_text(accounting: Accounting, free: Mapping[str, int | str]) -> str:
    """A pool verdict's free numbers in words, one format for every row of explain's pool
    table: `1 of 6 nodes free` (WholeNode), `10 free on 3 nodes, best node 4` (FreeGPU)."""
    if accounting is Accounting.WHOLE_NODE and "free_nodes" in free:
        return f"{free['free_nodes']} of {plural(int(free.get('nodes', 0)), 'node')} free"
    if "free_devices" in free:
        best = f", best node {free['best_node_free']}" if "best_node_free" in free else ""
        return f"{free['free_devices']} free on {plural(int(free.get('nodes', 0)), 'node')}{best}"
    return details_text(free)


def state_free_text(state: PoolState) -> str:
    """`verdict_free_text` of a pool's state after the plan (for a pool no verdict covers)."""
    if state.accounting is Accounting.WHOLE_NODE:
        free_nodes = state.free_nodes if state.free_nodes is not None else 0
        return verdict_free_text(state.accounting, {"nodes": state.nodes, "free_nodes": free_nodes})
    if any(len(b.free) != 1 for b in state.histogram):
        return free_text(state)  # several drivers: their counts do not add up
    counts = [(next(iter(b.free.values())), b.nodes) for b in state.histogram]
    return verdict_free_text(
        state.accounting,
        {
            "nodes": sum(n for _, n in counts),
            "free_devices": sum(free * n for free, n in counts),
            "best_node_free": max((free for free, n in counts if n > 0), default=0),
        },
    )


def top_reason(diagnosis: Diagnosis) -> tuple[Reason, str] | None:
    """The reason to show first, with where it was found (`Diagnosis.top_reason`)."""
    return diagnosis.top_reason()


# --- the decision as text -----------------------------------------------------------------


def headline(decision: DeploymentDecision) -> str:
    placed = len(decision.retained) + len(decision.created)
    text = f"{decision.key}: desired {decision.desired}, placed {placed}"
    if decision.retained:
        text += f" ({len(decision.retained)} retained, {len(decision.created)} created)"
    text += f", shortfall {decision.shortfall}"
    if decision.dropped:
        text += f", dropped {len(decision.dropped)}"
    return text


def placements_table(decision: DeploymentDecision) -> Table:
    retained = {p.name for p in decision.retained}
    rows = [
        (
            p.cluster,
            str(p.index),
            p.name,
            RETAIN if p.name in retained else CREATE,
            engine_to_pool(engine, member),
            str(member_pods(engine, member)),
            devices_per_pod(member),
        )
        for p in decision.placements
        for engine in p.engines
        for member in engine.members
    ]
    headers = ("CLUSTER", "INDEX", "REPLICA", "ACTION", "ENGINE → POOL", "PODS", "DEVICES/POD")
    return Table(headers, tuple(rows))


def dropped_table(dropped: Sequence[DroppedReplica]) -> Table:
    rows = [
        (d.cluster, str(d.index), d.name, d.reason.code.value, d.reason.message) for d in dropped
    ]
    return Table(("CLUSTER", "INDEX", "DROPPED", "REASON", "MESSAGE"), tuple(rows))


def print_deployment(printer: Printer, decision: DeploymentDecision) -> None:
    """Headline, placements, drops and, for a shortfall, the roll-up and the top reason."""
    printer.line(headline(decision), style="bold")
    if decision.placements:
        printer.table(placements_table(decision), indent=2)
    if decision.dropped:
        printer.table(dropped_table(decision.dropped), indent=2)
    if decision.shortfall > 0 and decision.diagnosis is not None:
        printer.line(decision.diagnosis.summary(), style="yellow", indent=2)
        top = top_reason(decision.diagnosis)
        if top is not None:
            reason, where = top
            label = f"top reason ({where})" if where else "top reason"
            printer.line(f"{label}: {reason_text(reason)}", indent=2)
            printer.line(details_text(reason.details), indent=4)


def pools_table(pools: Iterable[PoolState]) -> Table:
    rows = [
        (
            p.cluster,
            p.pool,
            p.accounting.value,
            p.observation.value,
            str(p.nodes),
            free_text(p),
            "\n".join(reason_text(r) for r in p.reasons) or NONE,
        )
        for p in pools
    ]
    headers = ("CLUSTER", "POOL", "ACCOUNTING", "OBSERVATION", "NODES", "FREE", "NOTES")
    return Table(headers, tuple(rows))


def clusters_table(verdicts: Iterable[ClusterVerdict]) -> Table:
    """One row per cluster; a cluster with several reasons continues on the next lines."""
    rows = [
        (
            v.cluster,
            "yes" if v.fits else "no",
            "\n".join(r.code.value for r in v.reasons) or NONE,
            "\n".join(r.message for r in v.reasons) or NONE,
            "\n".join(details_text(r.details) for r in v.reasons) or NONE,
        )
        for v in verdicts
    ]
    return Table(("CLUSTER", "FIT", "REASON", "MESSAGE", "DETAILS"), tuple(rows))


def pool_verdicts_table(
    diagnosis: Diagnosis, pools: Sequence[PoolState], refused: Mapping[ClusterName, str]
) -> Table:
    """Every pool of the fleet: one row per engine verdict; a pool no verdict covers (its
    cluster was not evaluated) gets one row saying why, with its final free summary."""
    by_pool: dict[tuple[ClusterName, PoolName], list[PoolVerdict]] = {}
    for verdict in diagnosis.clusters:
        for pv in verdict.pools:
            by_pool.setdefault((verdict.cluster, pv.pool), []).append(pv)
    rows: list[tuple[str, ...]] = []
    for state in pools:
        verdicts = by_pool.get((state.cluster, state.pool), [])
        if not verdicts:
            why = refused.get(state.cluster, "")
            rows.append(
                (
                    state.cluster,
                    state.pool,
                    NONE,
                    state.accounting.value,
                    NONE,
                    state_free_text(state),
                    f"not evaluated: cluster {why}" if why else "not evaluated",
                    NONE,
                )
            )
            continue
        for pv in verdicts:
            rows.append(
                (
                    state.cluster,
                    pv.pool,
                    pv.engine,
                    pv.accounting.value,
                    "yes" if pv.fits else "no",
                    verdict_free_text(pv.accounting, pv.free),
                    "\n".join(reason_text(r) for r in pv.reasons) or NONE,
                    "\n".join(details_text(r.details) for r in pv.reasons) or NONE,
                )
            )
    headers = ("CLUSTER", "POOL", "ENGINE", "ACCOUNTING", "FIT", "FREE", "REASON", "DETAILS")
    return Table(headers, tuple(rows))


# --- JSON ---------------------------------------------------------------------------------


_SNAKE = re.compile(r"_([a-z0-9])")


def camel(key: str) -> str:
    """`best_node_free` -> `bestNodeFree`: JSON keys are camelCase, as the API's fields are."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), key)


def camel_keys(numbers: Mapping[str, int | str]) -> Json:
    """A core `details` (or `free`) mapping with camelCase keys, in its order."""
    return {camel(k): v for k, v in numbers.items()}


def reason_json(reason: Reason) -> Json:
    return {
        "code": reason.code.value,
        "message": reason.message,
        "details": camel_keys(reason.details),
    }


def pool_verdict_json(verdict: PoolVerdict) -> Json:
    return {
        "pool": verdict.pool,
        "engine": verdict.engine,
        "accounting": verdict.accounting.value,
        "fits": verdict.fits,
        "reasons": [reason_json(r) for r in verdict.reasons],
        "free": camel_keys(verdict.free),
    }


def cluster_verdict_json(verdict: ClusterVerdict) -> Json:
    return {
        "cluster": verdict.cluster,
        "fits": verdict.fits,
        "reasons": [reason_json(r) for r in verdict.reasons],
        "pools": [pool_verdict_json(p) for p in verdict.pools],
    }


def diagnosis_json(diagnosis: Diagnosis) -> Json:
    code = diagnosis.dominant_code()
    return {
        "summary": diagnosis.summary(),
        "dominantCode": code.value if code is not None else None,
        "reasons": [reason_json(r) for r in diagnosis.reasons],
        "clusters": [cluster_verdict_json(c) for c in diagnosis.clusters],
    }


def member_json(engine: PlacedEngine, member: PlacedMember) -> Json:
    return {
        "role": member.role.value,
        "pool": member.pool,
        "workerNodes": member.worker_nodes,
        "pods": member_pods(engine, member),
        "deviceRequests": [
            {
                "name": r.name,
                "deviceClassName": r.device_class_name,
                "driver": r.driver,
                "count": r.count,
                "selectors": list(r.selectors),
            }
            for r in member.requests
        ],
    }


def placement_json(placement: Placement, action: str) -> Json:
    return {
        "name": placement.name,
        "cluster": placement.cluster,
        "index": placement.index,
        "action": action,
        "gatewayAddress": placement.gateway_address,
        "engines": [
            {
                "name": e.name,
                "copies": e.copies,
                "phase": e.phase.value if e.phase is not None else None,
                "members": [member_json(e, m) for m in e.members],
            }
            for e in placement.engines
        ],
    }


def deployment_json(decision: DeploymentDecision) -> Json:
    retained = {p.name for p in decision.retained}
    condition = decision.condition
    return {
        "namespace": decision.key.namespace,
        "name": decision.key.name,
        "desired": decision.desired,
        "placed": len(decision.retained) + len(decision.created),
        "shortfall": decision.shortfall,
        "placements": [
            placement_json(p, RETAIN if p.name in retained else CREATE) for p in decision.placements
        ],
        "dropped": [
            {
                "name": d.name,
                "cluster": d.cluster,
                "index": d.index,
                "reason": reason_json(d.reason),
            }
            for d in decision.dropped
        ],
        "condition": {
            "type": condition.type,
            "status": condition.status,
            "reason": condition.reason,
            "message": condition.message,
        },
        "diagnosis": diagnosis_json(decision.diagnosis) if decision.diagnosis else None,
    }


def pool_state_json(state: PoolState) -> Json:
    return {
        "cluster": state.cluster,
        "pool": state.pool,
        "accounting": state.accounting.value,
        "observation": state.observation.value,
        "nodes": state.nodes,
        "histogram": [{"free": dict(b.free), "nodes": b.nodes} for b in state.histogram],
        "freeNodes": state.free_nodes,
        "reasons": [reason_json(r) for r in state.reasons],
    }


def decision_json(decision: Decision, now: datetime) -> Json:
    return {
        "now": rfc3339(now),
        "deployments": [deployment_json(d) for d in decision.deployments],
        "pools": [pool_state_json(p) for p in decision.pools],
    }
