"""`python tests/down_at.py PHASE runner|dbt ARGS...`: the runner or dbt CLI, with a server of
the test's own stopped at one moment (the phases: tests/helpers/faults.py), as a crash or
failover would stop it: the BigQuery emulator whose process group is CDC_TEST_BQ_PID (killed),
else the PostgreSQL server in CDC_TEST_PG_FOLDER (tests/helpers/servers.py). The test starts
it again. With CDC_TEST_PG_CUT set, that server stays up and every connection of the run is
terminated instead (pg_terminate_backend)."""

from __future__ import annotations

import os
import signal
import sys

from helpers.faults import armed
from helpers.servers import PrivatePostgres

if __name__ == "__main__":
    phase, command, *args = sys.argv[1:]
    assert command in ("runner", "dbt"), "usage: down_at.py PHASE runner|dbt ARGS..."
    if os.environ.get("CDC_TEST_BQ_PID"):
        pid = int(os.environ["CDC_TEST_BQ_PID"])

        def stop() -> None:
            os.killpg(pid, signal.SIGKILL)
    elif os.environ.get("CDC_TEST_PG_CUT"):  # the server stays up; the run's connections go

        def stop() -> None:
            assert PrivatePostgres(os.environ["CDC_TEST_PG_FOLDER"]).cut_connections() > 0
    else:
        stop = PrivatePostgres(os.environ["CDC_TEST_PG_FOLDER"]).stop
    with armed(phase, stop):
        if command == "dbt":
            from dbt.cli.main import cli as main
        else:
            from runner.cli import main  # type: ignore[assignment]
        sys.argv = [command, *args]
        main()
