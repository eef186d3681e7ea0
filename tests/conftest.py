"""Test-wide setup: tests/ has no __init__.py, so put it on sys.path for shared builders."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
