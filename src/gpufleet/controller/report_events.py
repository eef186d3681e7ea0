"""The controller's events about agents' reports it does not accept: reports fenced out (an older
lease epoch or another Lease incarnation: `StaleAgentReport`), reports stamped in the future (`FutureAgentReport`) and pool
reports refused as implausible (`ImplausibleReport`), each once per message per subject, and
forgotten when the situation clears (`forget_cleared`). The step (loop.py) calls these.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from gpufleet.controller.conditions import ReadObj
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.events import Event, EventReason, EventType
from gpufleet.controller.faulted import FaultBarrier
from gpufleet.controller.fence import rejection
from gpufleet.controller.plausible import Implausible
from gpufleet.controller.status import future_message, implausible_pools
from gpufleet.controller.statuses import ClusterStatuses
from gpufleet.controller.writes import StepErrors
from gpufleet.store.port import INFERENCE_CLUSTER


class ReportedSteps(StepErrors, Protocol):
    """A step's result, with the reports it ignored (`StepResult`)."""

    rejected_reports: list[str]


class ReportEvents(FaultBarrier):
    """Events about reports not accepted (see the module docstring); a part of `Controller`
    between the step (loop.py) and its writer (`HubWriter`)."""

    config: ControllerConfig
    #: Per cluster: its trust, and whether it rejects reports or moves with the clock.
    statuses: ClusterStatuses
    #: Per event prefix, the standing situations last seen (`forget_cleared`).
    _alive: dict[str, set[tuple[str, ...]]]

    def forget_cleared(self, prefix: str, alive: set[tuple[str, ...]]) -> None:
        """Forget the events of situations under `prefix` that cleared (`alive` are those
        that stand), when that set moved since the last call."""
        if self._alive.get(prefix) != alive:
            self.writer.recorder.forget_missing(prefix, alive)
            self._alive[prefix] = alive

    def _report_stale(self, now: datetime, result: ReportedSteps) -> None:
        """A Warning event per report ignored for its older lease epoch (once per message),
        and the report in the step's `rejected_reports` every step."""
        records = self.index.records[INFERENCE_CLUSTER]
        alive: set[tuple[str, ...]] = set()
        for cluster in sorted(self.statuses.rejecting):
            trust = self.statuses.trusts[cluster]
            for report in trust.rejected:
                assert trust.fence is not None
                reason, why = rejection(report, trust.fence, self.config.expire_after_s)
                message = (
                    f"{report.kind} {report.namespace}/{report.name} from agent "
                    f"{report.identity} with lease epoch {report.lease_epoch} ignored "
                    f"({reason}): {why}"
                )
                result.rejected_reports.append(message)
                subject = ("stale", cluster, report.kind, report.name)
                alive.add(subject)
                obj = records[("", cluster)].obj
                event = Event(obj, EventType.WARNING, EventReason.STALE_AGENT_REPORT, message)
                self.writer.record_once(subject, event, now, result)
        self.forget_cleared("stale", alive)

    def _report_future(self, now: datetime, result: ReportedSteps) -> None:
        """A Warning event per cluster with reports stamped in the future (once per message)."""
        alive: set[tuple[str, ...]] = set()
        records = self.index.records[INFERENCE_CLUSTER]
        # (A cluster with reports in the future is among those whose Trust moves.)
        for cluster in sorted(self.statuses.moving):
            message = future_message(self.statuses.trusts[cluster], self.config)
            if not message or ("", cluster) not in records:
                continue
            result.rejected_reports.append(f"cluster {cluster}: {message}")
            subject = ("future", cluster)
            alive.add(subject)
            obj = records[("", cluster)].obj
            event = Event(obj, EventType.WARNING, EventReason.FUTURE_AGENT_REPORT, message)
            self.writer.record_once(subject, event, now, result)
        self.forget_cleared("future", alive)

    def _report_implausible(
        self,
        cluster: ReadObj,
        verdicts: Mapping[str, Implausible | None],
        now: datetime,
        result: ReportedSteps,
    ) -> None:
        """A Warning event per pool whose report is refused as implausible (once per
        message; `verdicts` by pool, `status.pool_verdicts`); a pool whose report is
        plausible again is forgotten."""
        name = cluster["metadata"]["name"]
        refused = implausible_pools(verdicts)
        for pool in (cluster.get("spec") or {}).get("nodePools") or []:
            pool_name = str(pool.get("name"))
            subject = ("implausible", name, pool_name)
            message = refused.get(pool_name)
            if message is None:
                self.writer.recorder.forget(subject)
                continue
            message = f"PoolObservation {pool_name} refused: {message}"
            event = Event(cluster, EventType.WARNING, EventReason.IMPLAUSIBLE_REPORT, message)
            self.writer.record_once(subject, event, now, result)
