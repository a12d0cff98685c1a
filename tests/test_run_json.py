"""`runner run --json`: one JSON object with the counts and the time of each phase, its numbers
checked against the landing Files and the destination; the runner's process id reaches dbt
without a changing `--vars` value, so the next run's dbt keeps its partial parse."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import sqlalchemy as sa
from conftest import REPO

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.dbt]

PHASES = {"spark_start", "reconcile", "discover", "hash", "stage", "dbt_fixed", "dbt_nodes"}


def data_rows(folder) -> int:  # noqa: ANN001
    total = 0
    for path in folder.iterdir():
        with open(path, newline="", encoding="utf-8") as handle:
            total += sum(1 for _ in csv.reader(handle)) - 1
    return total


def test_run_json_reports_counts_and_phases_and_keeps_partial_parsing(cli_project, request) -> None:  # noqa: ANN001
    cli = cli_project("postgres")
    landing = cli.root / "landing" / "customers"
    shutil.copytree(REPO / "landing" / "customers", landing)
    late = sorted(landing.iterdir())[-1]
    held = cli.root / late.name
    late.rename(held)  # lands before the second run

    first = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert set(first["phases"]) >= PHASES, first["phases"]
    assert all(v >= 0 for v in first["phases"].values())
    assert first["ok"] and first["dbt_ok"], first
    assert first["ingest"]["staged"] == len(list(landing.iterdir()))
    assert first["ingest"]["rows"] == data_rows(landing)
    assert first["audit"] == {"COMMITTED": len(list(landing.iterdir()))}

    engine = sa.create_engine(request.getfixturevalue("pg_url"))
    try:
        with engine.connect() as conn:
            counts = {
                f"{cli.schema}.{t}": conn.execute(
                    sa.text(f'select count(*) from "{cli.schema}".{t}')
                ).scalar()
                for t in ("customers", "customers_changes_history")
            }
            assert first["tables"] == counts
            # the history snapshot got the runner's process id (from CDC_PROCESS_ID)
            pids = conn.execute(
                sa.text(
                    f'select distinct "_cdc_insert_process_id" '
                    f'from "{cli.schema}".customers_history'
                )
            ).all()
            assert pids == [(first["process_id"],)]
    finally:
        engine.dispose()

    log = cli.root / "dbt_project" / "logs" / "dbt.log"
    log.write_text("")
    held.rename(landing / late.name)
    second = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert second["ingest"]["staged"] == 1 and second["committed"] == 1, second
    text = log.read_text()
    assert "Running with dbt" in text  # the log is where this dbt wrote it
    assert "Unable to do partial parsing" not in text
