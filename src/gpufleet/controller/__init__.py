"""The hub controller: cluster and replica status from agent reports, and one scheduling loop
for the whole fleet (docs/controller.md).

- `Controller(hub, config, identity).step(now) -> StepResult`: one reconcile of everything.
- Pure parts: `status` (trust, freshness, published status), `replicas` (replica bodies and
  deployment status from a decision), `events`, `ledger` (the assume ledger).
"""

from gpufleet.controller.config import ControllerConfig, observation_namespace
from gpufleet.controller.loop import Controller, StepResult

__all__ = ["Controller", "ControllerConfig", "StepResult", "observation_namespace"]
