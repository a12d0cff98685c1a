"""A crash at any moment is recovered by running the same command again, at once (issue
"Exactly once", class 5 and the kill tests).

`runner ingest` is killed (SIGKILL, through tests/kill_at.py) while hashing and while staging
before and after the staged-files manifest; `runner run` between the target MERGE and the
markers and during reconcile. Each time the same command, run again right away, finishes the
job: no waiting for a lease, the killed run closed as `aborted`, no attempt counted against a
File, every File STAGED (ingest) or COMMITTED with one marker (run), and in the end the table
equals the oracle's with one marker per File. PostgreSQL is killed in every phase, local Spark
in the two its own code decides (see TARGET_PHASES). Two runs or builds at once (class 2):
tests/test_concurrency.py. The landing path has a space, an '@' and a non-ASCII letter (class 1
through the real CLI).
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from helpers.faults import run_at
from helpers.oracles import applied
from helpers.oracles import customers_oracle as oracle
from helpers.project import CHANGES_HISTORY, audit_rows

from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

KILL_AT = Path(__file__).parent / "kill_at.py"
# Each phase, the command killed in it (and run again), and the state every File is in after.
PHASES = [
    ("hash", "ingest", "STAGED"),
    ("stage-before-manifest", "ingest", "STAGED"),
    ("stage-after-manifest", "ingest", "STAGED"),
    ("before-markers", "run", "COMMITTED"),
    ("reconcile", "run", "COMMITTED"),
]
# Phases per target. PostgreSQL: all. Local Spark: the moments its own code decides (the Iceberg
# writer before its manifest, the ordered apply statements before the markers); hashing,
# marking STAGED and reconcile are the same Audit DB code on both (its SQLite recovery is in
# tests/test_audit_leases.py), and each killed phase costs two JVM starts here.
TARGET_PHASES = {
    "postgres": [p[0] for p in PHASES],
    "local": ["stage-before-manifest", "before-markers"],
}


STAGING = "{{ source('cdc_staging', 'customers') }}"


def _written_not_published(cli) -> set[str]:  # noqa: ANN001
    """Files whose rows are in the staging table but not in the staged-files manifest."""
    # None: the manifest table is not made yet (its first write was the one killed)
    published = cli.read_here("{{ source('cdc_state', 'staged_files') }}") or []
    manifest = {r["file_hash"] for r in published}
    return {r["_cdc_file_hash"] for r in cli.table(STAGING)} - manifest


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) - 1  # the header row


def _killed(cli, phase: str, *args: str) -> None:  # noqa: ANN001
    """Run `runner ARGS` under kill_at.py; wait until it and every child (the JVM) are gone."""
    code, _, err = run_at(KILL_AT, phase, cli, "--target", cli.target, *args)
    assert code == -signal.SIGKILL, f"{phase}: not killed ({code})\n{err}"


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_run_killed_in_any_phase_is_finished_by_running_it_again(
    cli_project,
    tmp_path: Path,
    target: str,  # noqa: ANN001
) -> None:
    cli = cli_project(target, without=CHANGES_HISTORY)
    pool = tmp_path / "pool"
    files = generate_customers(pool, initial=60, files=10, changes_per_file=20)
    landing = tmp_path / 'landing dir "x@ñ"'
    (landing / "customers").mkdir(parents=True)
    landed: list[Path] = []
    phases = [p for p in PHASES if p[0] in TARGET_PHASES[target]]
    for n, (phase, command, state) in enumerate(phases):
        batch = range(n * 2, n * 2 + 2) if n < len(phases) - 1 else range(n * 2, len(files))
        for i in batch:  # two new Files before each phase, the rest before the last
            landed.append(files[i].rename(landing / "customers" / files[i].name))
        _killed(cli, phase, command, "--landing", str(landing))
        if phase == "stage-before-manifest" and target == "local":
            unpublished = _written_not_published(cli)  # the append committed, no manifest
        again = cli.runner(command, "--landing", str(landing))  # at once: no lease to wait out
        files_now = audit_rows(cli, "select path, state, attempts from files")
        assert {Path(p).name: (s, a) for p, s, a in files_now} == {
            p.name: (state, 1) for p in landed
        }, (phase, again.stdout, again.stderr)
        if phase == "stage-before-manifest" and target == "local":
            # Staging writes each File in one pass: killed between its append and the
            # manifest that publishes it, the apply reads none of its rows; run again, each
            # File's rows are in the staging table once, as many as its lines.
            assert unpublished and not _written_not_published(cli)
            staged = Counter(r["_cdc_file_name"] for r in cli.table(STAGING))
            assert staged == {p.name: _lines(p) for p in landed}, staged

    assert applied(cli, landed) == oracle(landed)
    runs = [r[0] for r in audit_rows(cli, "select outcome from runs")]
    assert runs.count("aborted") == len(phases) and "running" not in runs, runs
    # The documented status command agrees.
    status = json.loads(cli.runner("status", "--json").stdout)
    assert sorted(Path(f["path"]).name for f in status if f["state"] == "COMMITTED") == sorted(
        p.name for p in landed
    )
