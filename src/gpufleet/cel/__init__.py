"""Kubernetes DRA CEL device selectors, compiled once and evaluated against core `Device`s.

Interface (stable; the implementation lives in this package):

- `compile_selector(expression: str, cost_limit=SELECTOR_COST_LIMIT) -> CelSelector`: raises
  `CelCompileError` (with a human-readable `message`) when the expression does not compile as
  the API server compiles a DRA selector: over 10 KiB or 250 levels deep, a syntax or type
  error, or an estimated cost over the limit (Kubernetes' DRA selector budget).
- `CelSelector.expression`, `CelSelector.estimated_cost` and `CelSelector.matches(device) ->
  bool`: evaluation errors and non-bool results are non-matches, never exceptions.

`CelError` is the base of every error this package raises. The dialect, and which way each
rule errs, is documented in `gpufleet.cel.selector` and docs/devices.md.
"""

from gpufleet.cel.cost import SELECTOR_COST_LIMIT
from gpufleet.cel.selector import CelCompileError, CelError, CelSelector, compile_selector

__all__ = ["SELECTOR_COST_LIMIT", "CelCompileError", "CelError", "CelSelector", "compile_selector"]
