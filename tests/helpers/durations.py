"""Each test's seconds in the last recorded run (tests/durations.json): the suite's order
(tests/conftest.py) and its ceiling (tests/test_suite_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path

DURATIONS_FILE = Path(__file__).resolve().parents[1] / "durations.json"


def recorded_durations() -> dict[str, float]:
    """Seconds by node id; empty when nothing was recorded yet."""
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS_FILE.read_text()).items()}
    except FileNotFoundError:
        return {}
