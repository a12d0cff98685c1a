"""A crash at any moment is recovered by running the same command again, at once (issue
"Exactly once", class 5 and the kill tests).

`runner run` is killed (SIGKILL, through tests/kill_at.py) while hashing, while staging before
and after the staged-files manifest, between the target MERGE and the markers, and during
reconcile; each time the same command, run again right away, finishes the job: no waiting for
a lease, the killed run closed as `aborted`, no File counted as failed, every File COMMITTED
with one marker, and the table equal to the oracle's. The landing path has a space, an '@' and
a non-ASCII letter (class 1 through the real CLI).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_concurrency import applied
from test_contract import oracle

from runner.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

KILL_AT = Path(__file__).parent / "kill_at.py"
PHASES = ["hash", "stage-before-manifest", "stage-after-manifest", "before-markers", "reconcile"]
ROUNDS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9, 10]]  # Files landed before each phase


def _killed(cli, phase: str, *args: str) -> None:  # noqa: ANN001
    """Run `runner ARGS` under kill_at.py; wait until it and every child (the JVM) are gone."""
    proc = subprocess.Popen(
        [sys.executable, str(KILL_AT), phase, "runner", "--target", cli.target, *args],
        cwd=cli.root,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"{phase}: not killed ({proc.returncode})\n{err}"
    deadline = time.monotonic() + 60
    while True:  # the JVM notices its parent is gone and exits; it holds the Derby lock
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"{phase}: children of the killed run live on"
        time.sleep(0.2)


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_run_killed_in_any_phase_is_finished_by_running_it_again(
    cli_project, tmp_path: Path, target: str  # noqa: ANN001
) -> None:
    cli = cli_project(target)
    pool = tmp_path / "pool"
    files = generate_customers(pool, initial=60, files=10, changes_per_file=20)
    landing = tmp_path / 'landing dir "x@ñ"'
    (landing / "customers").mkdir(parents=True)
    landed: list[Path] = []
    for phase, batch in zip(PHASES, ROUNDS, strict=True):
        for i in batch:
            landed.append(files[i].rename(landing / "customers" / files[i].name))
        _killed(cli, phase, "run", "--landing", str(landing))
        started = time.monotonic()
        again = cli.runner("run", "--landing", str(landing))
        assert time.monotonic() - started < 300
        status = {Path(f["path"]).name: f for f in json.loads(cli.runner("status", "--json").stdout)}
        assert {n: f["state"] for n, f in status.items()} == {
            p.name: "COMMITTED" for p in landed
        }, (phase, again.stdout, again.stderr)
        assert all(f["attempts"] <= 1 for f in status.values()), (phase, status)

    assert applied(cli, landed) == oracle(landed)
    runs = _runs(cli)
    assert runs.count("aborted") == len(PHASES) and "running" not in runs, runs


def _runs(cli) -> list[str]:  # noqa: ANN001
    """The outcome of every run in the Audit DB."""
    if cli.target == "local":
        with sqlite3.connect(cli.root / ".cdc" / "local" / "audit.db") as conn:
            return [r[0] for r in conn.execute("select outcome from runs")]
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="test")
    try:
        with conn.cursor() as cur:
            cur.execute(f'select outcome from "{cli.env["CDC_AUDIT_SCHEMA"]}".runs')
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
