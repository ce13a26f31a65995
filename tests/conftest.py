"""Shared pytest wiring: makes the tests' helper modules (e.g. `exact`) importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
