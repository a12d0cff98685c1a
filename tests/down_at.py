"""`python tests/down_at.py PHASE runner|dbt ARGS...`: the runner or dbt CLI, with the test's
own PostgreSQL server (tests/helpers/servers.py, the folder in CDC_TEST_PG_FOLDER) stopped at
one moment (the phases: tests/helpers/faults.py), as a crash or failover of the server would
stop it. The server stays down; the test starts it again once the command has ended."""

from __future__ import annotations

import os
import sys

from helpers.faults import armed
from helpers.servers import PrivatePostgres

if __name__ == "__main__":
    phase, command, *args = sys.argv[1:]
    assert command in ("runner", "dbt"), "usage: down_at.py PHASE runner|dbt ARGS..."
    server = PrivatePostgres(os.environ["CDC_TEST_PG_FOLDER"])
    with armed(phase, server.stop):
        if command == "dbt":
            from dbt.cli.main import cli as main
        else:
            from runner.cli import main  # type: ignore[assignment]
        sys.argv = [command, *args]
        main()
