"""Test-wide setup: tests/ has no __init__.py, so put it on sys.path for shared builders; and
the hypothesis profiles.

Under CI (`CI` set, as `.ci/run` is run) property tests are derandomized, so a run is
reproducible and a landing never hinges on a new random draw; on a developer's machine they
explore with fresh randomness. No deadline either way: a loaded 2-core machine must not turn
a slow example into a failure.
"""

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run in a test (the daemons, join) configures logging onto that test's
    captured stream; left behind, the handler writes later tests' logs to a closed stream
    ("--- Logging error ---" and a traceback on stderr). Each test leaves the root logger as
    it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
