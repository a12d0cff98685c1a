"""The servers a run depends on going away mid-run (issue "Faults beyond a killed runner").

PostgreSQL, a server of the test's own (tests/helpers/servers.py), is stopped at one moment of
`runner run` (through tests/down_at.py): while staging and in reconcile; in the apply the run's
connections are cut instead (pg_terminate_backend), the server staying up. On the
postgres target it holds the tables and the Audit DB; on the embedded default (local) the
Iceberg catalog. The run ends with a one-line error (no traceback) instead of hanging; once the
server is back, the same command run again at once finishes: every File COMMITTED with one
marker, the table equal to the plain-Python oracle's, nothing applied twice. (On local Spark,
where every run is a JVM, the run again after the first moment is the one stopped at the next.)
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.faults import run_at
from helpers.oracles import applied
from helpers.oracles import customers_oracle as oracle
from helpers.project import (
    CHANGES_HISTORY,
    Cli,
    audit_rows,
    link_package,
    make_project,
    new_schema,
)
from helpers.servers import PrivatePostgres

from runner.destinations.spark.session import link_iceberg_jar
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

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


# The moment at which the run's connections are cut (pg_terminate_backend, the server staying
# up) instead of the server stopping: in the apply.
CUT_AT = "before-markers"


def _with_server_down(cli: Cli, server: PrivatePostgres, phase: str, *args: str) -> str:
    """`runner ARGS` with the server stopped at ``phase`` (at CUT_AT: the run's connections
    terminated): the run ends by itself, with an error said in one line (no stack trace),
    which the run's record keeps when its Audit DB is still there. That line."""
    cut = phase == CUT_AT
    if cut:
        cli.env["CDC_TEST_PG_CUT"] = "1"
    try:
        code, out, err = run_at(DOWN_AT, phase, cli, *args)
    finally:
        cli.env.pop("CDC_TEST_PG_CUT", None)
    assert server.answers() == cut, f"{phase}: the run never reached the moment ({err[-2000:]})"
    assert code in (1, 2), (phase, code, out[-2000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert not re.search(r"^\s+at [\w$.]+\(", out + err, re.M), (out + err)[-3000:]  # Java's
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, (phase, err[-3000:])
    assert "lost" in errors[0] and "PostgreSQL" in errors[0], errors[0]  # says what went away
    assert "run the same command again" in errors[0], errors[0]
    if cut:  # the server named, and the run's record says why it failed
        assert f"PostgreSQL at 127.0.0.1:{server.port} was lost while customers" in errors[0]
        assert "Files not applied stay STAGED" in errors[0], errors[0]
        (detail,) = audit_rows(cli, "select detail from runs order by started_at desc limit 1")
        assert detail == (errors[0].removeprefix("error: "),), detail
    return errors[0]


@pytest.mark.postgres
@pytest.mark.parametrize("target", ["postgres", "local"])
def test_postgresql_going_away_mid_run_is_finished_by_running_again_once_it_is_back(
    tmp_path: Path, server: PrivatePostgres, target: str, request: pytest.FixtureRequest
) -> None:
    root = make_project(tmp_path / "repo", CHANGES_HISTORY)
    # The run the server leaves is a process; the runs around it are in-process on the
    # postgres target (on local Spark the server holds the catalog, which this process's
    # session does not use).
    in_process = target == "postgres"
    if in_process:
        request.getfixturevalue("spark")
    spark = (lambda: request.getfixturevalue("spark")) if target == "local" else None
    cli = Cli(root, target, "servers", in_process=in_process, spark=spark, **server.env)
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
        if phase != CUT_AT:
            server.start()
        if not in_process and phase != PHASES[target][-1]:
            # A process is a JVM here: the next moment's run is this one's "run it again" (it
            # gets past this moment before it reaches its own); the last is run again below.
            continue
        cli.runner("run", "--landing", str(landing))  # at once: no lease to wait out
        states = audit_rows(cli, "select path, state, attempts from files")
        # A server going away is nobody's File's fault: no attempt counts against one.
        assert {Path(p).name: (s, a) for p, s, a in states} == {
            p.name: ("COMMITTED", 1) for p in landed
        }, (phase, said[phase])

    assert applied(cli, landed) == oracle(landed)  # one marker per File, nothing twice


@pytest.mark.bigquery
@pytest.mark.parametrize("phase", ["bq-load", "bq-apply"])
def test_the_bigquery_emulator_going_away_mid_run_loses_nothing_and_applies_nothing_twice(
    tmp_path: Path,
    phase: str,
    spark,  # noqa: ANN001
) -> None:
    """The emulator (its state kept on disk) killed as a load job or the apply script is sent,
    and started again on its port a few seconds later, as a service comes back: the run either
    rides it out (the client retries) or ends with one line; the same command afterwards
    leaves every File COMMITTED once, and the table equals the oracle's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import bq_emulator

    data = tmp_path / "bq-data"
    data.mkdir()
    try:
        emulator = bq_emulator.start(data_dir=data, log=tmp_path / "bq.log")
    except RuntimeError as exc:
        pytest.fail(f"the BigQuery emulator could not start: {exc} (`make setup`)", pytrace=False)
    try:
        root = make_project(tmp_path / "repo", CHANGES_HISTORY)
        # The run the emulator leaves is a process; the runs around it are in-process.
        cli = Cli(
            root, "bigquery", new_schema(), in_process=True, CDC_BQ_ENDPOINT=emulator.endpoint
        )
        cli.env["CDC_TEST_BQ_PID"] = str(emulator.process.pid)
        link_package(root)
        files = generate_customers(tmp_path / "pool", initial=40, files=2, changes_per_file=15)
        landing = tmp_path / "landing"
        (landing / "customers").mkdir(parents=True)
        first, later = files[:1], files[1:]
        for f in first:
            f.rename(landing / "customers" / f.name)
        cli.runner("run", "--landing", str(landing))
        landed = [landing / "customers" / f.name for f in first]
        for f in later:
            landed.append(f.rename(landing / "customers" / f.name))

        proc = subprocess.Popen(
            [sys.executable, str(DOWN_AT), phase, "runner", "run", "--target", "bigquery",
             "--landing", str(landing)],
            cwd=cli.root, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        while emulator.process.poll() is None:  # until the run killed it
            assert proc.poll() is None, f"{phase}: the run ended first: {proc.communicate()}"
            time.sleep(0.1)
        time.sleep(3)  # down for a moment, then back on its port with its data
        emulator = bq_emulator.start(emulator.port, data_dir=data, log=tmp_path / "bq.log")
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:  # it did not ride it out: then one line, no traceback
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "Traceback" not in err, (phase, err[-3000:])
        cli.runner("run", "--landing", str(landing))
        states = audit_rows(cli, "select path, state from files")
        assert {Path(p).name: s for p, s in states} == {p.name: "COMMITTED" for p in landed}
        assert applied(cli, landed) == oracle(landed)  # one marker per File, nothing twice
    finally:
        emulator.stop()
