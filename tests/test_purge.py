"""`dbt run-operation cdc.purge_tombstones --args '{older_than_days: N}'` (macros/README.md), as a
process: tombstones older than N days go, newer ones stay, on PostgreSQL and BigQuery (emulator).
Not run on local Spark (a JVM start per dbt process; the suite is at CI's time limit): there the
default `dateadd` path runs, the one PostgreSQL takes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from helpers.project import CHANGES_HISTORY, Cli

pytestmark = [pytest.mark.dbt]


def _tombstones() -> list[tuple]:
    """Tombstones deleted 1, 29, 31 and 400 days ago."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    return [
        ("cdc.customers", f"k{days}", "s", "h", "p", "i", (now - timedelta(days=days)).isoformat())
        for days in (1, 29, 31, 400)
    ]


def _run(cli: Cli, sql: str) -> list[tuple]:
    if cli.target == "postgres":
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="test")
        try:
            with conn, conn.cursor() as cur:
                cur.execute(f'set search_path to "{cli.schema}"')
                cur.execute(sql)
                return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    client = bigquery.Client(
        project="cdc-local",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=cli.env["CDC_BQ_ENDPOINT"]),
        default_query_job_config=bigquery.QueryJobConfig(default_dataset=f"cdc-local.{cli.schema}"),
    )
    return [tuple(r.values()) for r in client.query(sql).result()]


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("bigquery", marks=pytest.mark.bigquery),
    ],
)
def test_purge_tombstones_removes_only_the_old_ones(
    target: str, cli_project: Callable[[str], Cli]
) -> None:
    cli = cli_project(target, without=CHANGES_HISTORY)
    cli(
        "dbt",
        "run-operation",
        "cdc.create_state_tables",
        "--project-dir",
        "dbt_project",
        "--target",
        target,
    )
    values = ", ".join(
        "(" + ", ".join(f"'{v}'" for v in row[:-1]) + f", cast('{row[-1]}' as timestamp))"
        for row in _tombstones()
    )
    _run(cli, f"insert into cdc_tombstones values {values}")
    out = cli(
        "dbt",
        "run-operation",
        "cdc.purge_tombstones",
        "--args",
        "{older_than_days: 30}",
        "--project-dir",
        "dbt_project",
        "--target",
        target,
    )
    assert "purged tombstones older than 30 days" in out.stdout
    left = sorted(r[0] for r in _run(cli, "select key_text from cdc_tombstones"))
    assert left == ["k1", "k29"]
