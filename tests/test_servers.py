"""The servers a run depends on going away mid-run (issue "Faults beyond a killed runner").

PostgreSQL, a server of the test's own (tests/helpers/servers.py), is stopped at one moment of
`runner run` (through tests/down_at.py): while staging, in the apply, in reconcile. On the
postgres target it holds the tables and the Audit DB; on the embedded default (local) the
Iceberg catalog. The run ends with a one-line error (no traceback) instead of hanging; once the
server is back, the same command run again at once finishes: every File COMMITTED with one
marker, the table equal to the plain-Python oracle's, nothing applied twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.oracles import applied
from helpers.oracles import customers_oracle as oracle
from helpers.project import CHANGES_HISTORY, Cli, audit_rows, link_package, make_project
from helpers.servers import PrivatePostgres

from runner.destinations.spark.session import link_iceberg_jar
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]

DOWN_AT = Path(__file__).parent / "down_at.py"
# The moments the server goes away, per target: on local Spark reconcile reads the markers
# before it writes anything, and its Audit DB is SQLite: the catalog is not used after that.
PHASES = {
    "postgres": ["stage-before-manifest", "before-markers", "reconcile"],
    "local": ["stage-before-manifest", "before-markers"],
}


@pytest.fixture
def server() -> object:
    try:
        pg = PrivatePostgres()
    except RuntimeError as exc:
        pytest.fail(f"a PostgreSQL server of the test's own could not start: {exc}", pytrace=False)
    yield pg
    pg.close()


def _with_server_down(cli: Cli, server: PrivatePostgres, phase: str, *args: str) -> str:
    """`runner ARGS` with the server stopped at ``phase``: the run ends by itself, with an error
    said in one line. Its stderr."""
    proc = subprocess.Popen(
        [sys.executable, str(DOWN_AT), phase, "runner", *args],
        cwd=cli.root,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{phase}: the run hung with the server down") from None
    assert not server.answers(), f"{phase}: the run never reached the moment ({err[-2000:]})"
    assert proc.returncode in (1, 2), (phase, proc.returncode, out[-2000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, (phase, err[-3000:])
    assert "lost" in errors[0] and "PostgreSQL" in errors[0], errors[0]  # says what went away
    assert "run the same command again" in errors[0], errors[0]
    deadline = time.monotonic() + 60
    while True:  # the JVM of the local target ends with its parent
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"{phase}: children of the run live on"
        time.sleep(0.2)
    return errors[0]


@pytest.mark.parametrize("target", ["postgres", "local"])
def test_postgresql_going_away_mid_run_is_finished_by_running_again_once_it_is_back(
    tmp_path: Path, server: PrivatePostgres, target: str
) -> None:
    root = make_project(tmp_path / "repo", CHANGES_HISTORY)
    cli = Cli(root, target, "servers", **server.env)
    link_package(root)
    link_iceberg_jar(root)
    files = generate_customers(tmp_path / "pool", initial=40, files=len(PHASES[target]) * 2,
                               changes_per_file=15)  # fmt: skip
    landing = tmp_path / "landing"
    (landing / "customers").mkdir(parents=True)
    landed: list[Path] = []
    said = {}
    for n, phase in enumerate(PHASES[target]):
        for f in files[n * 2 : n * 2 + 2]:  # two new Files each time
            landed.append(f.rename(landing / "customers" / f.name))
        said[phase] = _with_server_down(
            cli, server, phase, "run", "--target", target, "--landing", str(landing)
        )
        server.start()
        cli.runner("run", "--landing", str(landing))  # at once: no lease to wait out
        states = audit_rows(cli, "select path, state, attempts from files")
        # A server going away is nobody's File's fault: no attempt counts against one.
        assert {Path(p).name: (s, a) for p, s, a in states} == {
            p.name: ("COMMITTED", 1) for p in landed
        }, (phase, said[phase])

    assert applied(cli, landed) == oracle(landed)  # one marker per File, nothing twice
