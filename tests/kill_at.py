"""`python tests/kill_at.py PHASE runner|dbt ARGS...`: the runner or dbt CLI, SIGKILLed at one
moment (the phases: tests/helpers/faults.py), the way an OOM killer or a lost machine would."""

from __future__ import annotations

import sys

from helpers.faults import armed

if __name__ == "__main__":
    phase, command, *args = sys.argv[1:]
    assert command in ("runner", "dbt"), "usage: kill_at.py PHASE runner|dbt ARGS..."
    with armed(phase):
        if command == "dbt":
            from dbt.cli.main import cli as main
        else:
            from runner.cli import main  # type: ignore[assignment]
        sys.argv = [command, *args]
        main()
