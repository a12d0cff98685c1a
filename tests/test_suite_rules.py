"""The suite's own rules (docs/testing.md), kept by a check rather than by memory:

- every test has its seconds recorded in tests/durations.json (a new test is measured before it
  lands: `make test-record`, or one file with CDC_TEST_RECORD=1), and nothing recorded is gone;
- the recorded suite, on two workers, stays under its ceiling (pyproject.toml's
  recorded_suite_ceiling_seconds, lowered as the suite gets cheaper, down to the budget);
- the modules that start processes (the documented commands as processes, kills, servers going
  away, races, the installed wheel, the cluster) are exactly those docs/testing.md lists, each
  with the reason a process is needed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.durations import recorded_durations

TESTS = Path(__file__).parent
REPO = TESTS.parent
PAGE = REPO / "docs" / "testing.md"
# What starts a process in a test: a Cli made with processes=True, a command killed or with a
# server stopped under it (run_at), two builds at once, a Cli's start(), subprocess and
# multiprocessing themselves.
STARTS_A_PROCESS = re.compile(
    r"processes=True|run_at\(|builds_at_once\(|cli\.start\(|subprocess\.(run|Popen|check_\w+)\("
    r"|multiprocessing"
)


def collected() -> list[str]:
    """Every test's node id, as `make test` collects them."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


def test_every_test_has_its_seconds_recorded_and_the_suite_fits_its_budget(
    pytestconfig: pytest.Config,
) -> None:
    recorded = recorded_durations()
    ids = collected()
    assert len(ids) > 100, ids[:5]
    missing = sorted(set(ids) - set(recorded))
    gone = sorted(set(recorded) - set(ids))
    assert not missing, (
        f"{len(missing)} test(s) not measured yet: run them with CDC_TEST_RECORD=1 "
        f"(`CDC_TEST_RECORD=1 .venv/bin/pytest FILE`) to record their seconds in "
        f"tests/durations.json: {missing[:10]}"
    )
    assert not gone, f"tests/durations.json records tests that no longer exist: {gone[:10]}"
    ceiling = float(pytestconfig.getini("recorded_suite_ceiling_seconds"))
    # Two workers share the suite; the recorded seconds are each test's own in such a run.
    total = sum(recorded[i] for i in ids) / 2
    assert total <= ceiling, (
        f"the recorded suite takes {total:.0f} s on two workers, over its ceiling of "
        f"{ceiling:.0f} s (pyproject.toml): make a test cheaper before adding one "
        "(docs/testing.md)"
    )


def test_the_modules_that_start_processes_are_the_ones_docs_testing_lists() -> None:
    starting = {
        p.name
        for p in TESTS.glob("test_*.py")
        if p.name != Path(__file__).name and STARTS_A_PROCESS.search(p.read_text())
    }
    section = PAGE.read_text().split("## Process-level tests", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(test_\w+\.py)`", section))
    assert starting == listed, (
        f"start processes but are not listed in docs/testing.md: {sorted(starting - listed)}; "
        f"listed but start none: {sorted(listed - starting)}"
    )
