"""Output paths checked before a run: a report the run could not write fails at once.

`writable` is a typer option callback (`typer.Option("--report", callback=writable)`): a path
whose directory is missing, that is a directory, or that this process may not write is a usage
error (exit 2, one line naming the option), before any work is done, instead of a traceback
after a long run.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer


def write_problem(path: Path) -> str | None:
    """Why `path` cannot be written as a file, or None when it can (as far as can be told
    without writing it)."""
    if path.is_dir():
        return f"{path} is a directory"
    parent = path.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if path.exists():
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


def writable(value: Path | None) -> Path | None:
    """Typer callback: `value` unchanged, or a usage error saying why it cannot be written."""
    if value is None:
        return None
    problem = write_problem(value.expanduser())
    if problem is not None:
        raise typer.BadParameter(f"cannot write there: {problem}")
    return value.expanduser()
