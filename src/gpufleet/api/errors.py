"""The one error type for invalid input: `ValidationFailed`, a list of `FieldError`s.

Every problem with a manifest (unreadable file, malformed YAML, unknown kind, a schema error, a
broken rule) is reported as a `FieldError(path, message)`: `path` names the field in the
manifest's own camelCase spelling with `[i]` for list indices (`spec.nodePools[0].name`), empty
for the document as a whole, and `message` states the rule (`must be at least 1`). A
`ValidationFailed` gathers every error of one object, so a user fixes them all in one pass.
`LimitExceeded` is a `ValidationFailed` for a file that breaks an input bound.
`ManifestsInvalid` is what `load_manifests` raises: the failures of every object it read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    """One broken rule: the field's path in the manifest and what it must be."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ValidationFailed(ValueError):
    """An object (or a document or file that should hold objects) is invalid.

    `kind` and `name` identify the object as far as the input allows (`name` is
    `namespace/name` for namespaced objects; both are empty when the document is not even an
    object); `source` says where it was read from (`path#document`), empty when it was not
    read from a file.
    """

    def __init__(
        self,
        errors: tuple[FieldError, ...],
        *,
        kind: str = "",
        name: str = "",
        source: str = "",
    ) -> None:
        self.errors = errors
        self.kind = kind
        self.name = name
        self.source = source
        #: Where each error's field is (`deploy.yaml:14`, its line in the file), else `source`.
        self.error_sources: tuple[str, ...] = tuple(source for _ in errors)
        super().__init__(self._render())

    @property
    def subject(self) -> str:
        """`Kind namespace/name` when known, else the source."""
        if self.kind:
            return f"{self.kind} {self.name}".rstrip()
        return self.source

    def lines(self) -> list[str]:
        """One line per error, each naming the object: `ModelDeployment ml/llama: path: rule`."""
        return [f"{self.subject}: {error}" for error in self.errors]

    def _render(self) -> str:
        return "\n".join(self.lines())


class LimitExceeded(ValidationFailed):
    """A file is refused for breaking an input bound (size, nesting depth, alias expansion).

    `limit` names the bound and `value` its value; the CLI exits 2 for these, as for any
    unusable input, rather than 1 for manifests that are merely invalid.
    """

    def __init__(self, message: str, *, limit: str, value: int, source: str) -> None:
        self.limit = limit
        self.value = value
        super().__init__((FieldError("", message),), source=source)


class ManifestsInvalid(ValueError):
    """Some of the objects `load_manifests` read are invalid; `failures` holds each one."""

    def __init__(self, failures: tuple[ValidationFailed, ...]) -> None:
        self.failures = failures
        super().__init__("\n".join(line for f in failures for line in f.lines()))
