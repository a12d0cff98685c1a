"""Two `dbt build`s applying one table at the same time (one scheduled, one started by hand):
each File is applied once, with one marker, and the table equals the oracle (issue "Exactly
once", class 2).

PostgreSQL: the test holds an exclusive lock on the markers table until both builds are
waiting on it, then lets them go at the same instant, so their applies overlap every time.
Before the fix both applied every File (two current rows per key, two markers per File).
Local Spark: see tests/test_crash_recovery.py, which races two builds between its phases.
"""

from __future__ import annotations

import time

import pytest
from helpers.oracles import applied
from helpers.oracles import customers_oracle as oracle
from helpers.project import CHANGES_HISTORY

from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.mark.postgres
def test_two_overlapping_builds_on_postgres_apply_each_file_once(cli_project, pg_url) -> None:  # noqa: ANN001
    import psycopg2

    cli = cli_project("postgres", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    files = generate_customers(landing / "customers", initial=3000, files=4, changes_per_file=1000)
    for f in files[1:]:  # the full load first, applied alone; the changes race
        f.rename(f.with_suffix(".later"))
    cli.runner("ingest", "--landing", str(landing))
    cli.dbt("build")
    for f in files[1:]:
        f.with_suffix(".later").rename(f)
    cli.runner("ingest", "--landing", str(landing))

    schema = cli.env["CDC_SCHEMA"]
    gate = psycopg2.connect(pg_url.replace("postgresql+psycopg2", "postgresql"))
    gate.autocommit = False
    builds = []
    try:
        with gate.cursor() as cur:
            cur.execute(f'LOCK TABLE "{schema}".cdc_applied_files IN ACCESS EXCLUSIVE MODE')
            builds = [
                cli.start(
                    "dbt",
                    "build",
                    "--project-dir",
                    "dbt_project",
                    "--target",
                    "postgres",
                    "--select",
                    "customers",  # the apply; two view rebuilds collide in dbt itself
                )
                for _ in range(2)
            ]
            deadline = time.monotonic() + 180
            waiting = 0
            while waiting < 2:
                assert time.monotonic() < deadline, "the two builds never reached the markers"
                assert all(b.poll() is None for b in builds), "a build ended before the gate"
                time.sleep(0.2)
                with gate.cursor() as probe:  # same transaction: the lock stays held
                    probe.execute(
                        "select count(*) from pg_locks l join pg_class c on c.oid = l.relation "
                        "where c.relname = 'cdc_applied_files' and not l.granted"
                    )
                    waiting = probe.fetchone()[0]
        gate.commit()  # both go at once
    finally:
        gate.close()
    outs = [b.communicate(timeout=300) for b in builds]
    codes = [b.returncode for b in builds]
    assert codes == [0, 0], [o[0][-3000:] for o in outs if "ERROR" in o[0]]

    assert applied(cli, files) == oracle(files)
