"""The report's colours: each has one meaning on the page.

The states (lanes, badges, flags) take `GOOD`, `STARTING`, `DEGRADED`, `FAILING` and
`NOTHING`; the ground truth is `TRUTH` and the agent's report of it `REPORTED`; what the
deployments ask for `WANTED`; the kinds of event that are no state (an action, an agent event,
a pool's nodes changing, a drop) have colours of their own (`ACTION`, `AGENT`, `NODES`,
`MOVED`); pools and clusters take `COLOURS`, which holds none of the above.
"""

from __future__ import annotations

#: States: serving, fresh, Ready, up, placed.
GOOD = "#2da44e"
#: Placed, not every pod Running yet.
STARTING = "#8fd19e"
#: Degraded: a stale report, a partitioned agent, a check that differs between compared runs.
DEGRADED = "#d4a72c"
#: Failing: short of replicas, an expired report, not Ready, an agent down, a refusal, a failed
#: check.
FAILING = "#cf222e"
#: Nothing to show: none wanted, no observation, Unknown.
NOTHING = "#b0b0b0"
#: The ground truth (the cluster's own claims), and the agent's report of it on the hub.
TRUTH = "#1f77b4"
REPORTED = "#ff7f0e"
#: What the deployments ask for.
WANTED = "#111111"
#: Pools or clusters, one each: no state colour, nor the agent's report's.
COLOURS = ("#1f77b4", "#e377c2", "#393b79", "#6b6ecf", "#5254a3", "#9c9ede")
#: Kinds of event that are not states.
ACTION = "#444444"
AGENT = "#8e44ad"
NODES = "#0a7d8c"
MOVED = "#8a4b08"
OTHER = "#777777"
