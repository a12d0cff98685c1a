"""`python tests/hold_at.py PHASE HELD GO runner|dbt ARGS...`: the runner or dbt CLI, held at one
moment (the phases: tests/helpers/faults.py): it writes the file HELD there and waits until the
file GO exists, so that a test runs another command at exactly that point."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.faults import armed, hold

if __name__ == "__main__":
    phase, held, go, command, *args = sys.argv[1:]
    assert command in ("runner", "dbt"), "usage: hold_at.py PHASE HELD GO runner|dbt ARGS..."
    with armed(phase, hold(Path(held), Path(go))):
        if command == "dbt":
            from dbt.cli.main import cli as main
        else:
            from runner.cli import main  # type: ignore[assignment]
        sys.argv = [command, *args]
        main()
