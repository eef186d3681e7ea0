"""Kubernetes DRA CEL device selectors, compiled once and evaluated against core `Device`s.

Interface (stable; the implementation lives in this package):

- `compile_selector(expression: str) -> CelSelector`: raises `CelCompileError` (with a
  human-readable `message`) when the expression does not compile.
- `CelSelector.expression` and `CelSelector.matches(device) -> bool`: evaluation errors and
  non-bool results are non-matches, never exceptions.
"""
