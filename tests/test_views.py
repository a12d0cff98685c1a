"""A view whose SQL and columns did not change is left as it is by the next build; one whose
SQL changed, or whose `select *` now covers more columns, is made again (docs/operations.md).
On PostgreSQL a view left as it is keeps the views a user built on it (dbt's own would drop
them with it). On local Spark and PostgreSQL, in this process: the view's identity (its
PostgreSQL oid; the number of versions in its Iceberg metadata) tells whether it was made
again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers.project import drop_database, query
from helpers.scenario import scenario_project

from runner.invocation import Invocation
from runner.project import Project

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else "views_test"
    monkeypatch.setenv("CDC_SCHEMA", schema)
    return request.param


def run_view(root: Path, target: str) -> None:
    from dbt.cli.main import dbtRunner

    res = dbtRunner().invoke(
        ["run", "--project-dir", str(root / "dbt_project"), "--profiles-dir", str(root),
         "--target", target, "--select", "stg_customers"]
    )  # fmt: skip
    assert res.success, res.exception or [r.message for r in res.result]


def identity(target: str, spark: Any, project: Project, schema: str) -> str:
    """What changes when the view is made again and only then."""
    if target == "postgres":
        rows = query(target, spark, project, f"select '{schema}.stg_customers'::regclass::oid as i")
        return str(rows[0]["i"])
    described = spark.sql(f"describe extended `{schema}`.`stg_customers`").collect()
    props = next(r.data_type for r in described if r.col_name == "View Properties")
    location = re.search(r"'location' = '([^']+)'", props).group(1)
    versions = sorted(p.name for p in (Path(location) / "metadata").glob("*.metadata.json"))
    return str(len(versions))


def columns(target: str, spark: Any, project: Project, schema: str) -> list[str]:
    q = "`" if target == "local" else '"'
    sql = f"select * from {q}{schema}{q}.{q}stg_customers{q} limit 0"
    if target == "local":
        return spark.sql(sql).columns
    from runner.destinations.postgres import connect

    conn = connect(project.target)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql)
            return [d[0] for d in cur.description]
    finally:
        conn.close()


def test_a_view_is_made_again_only_when_its_sql_or_columns_change(
    spark: Any, tmp_path: Path, target: str
) -> None:
    root = scenario_project(tmp_path / "repo")
    project = Project.load(root, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    inv = Invocation.of(project, None, spark)  # the staging table, empty: what the view reads
    inv.destination.writer().ensure_table(spark, inv.entities["customers"])
    q = "`" if target == "local" else '"'

    run_view(root, target)
    made = identity(target, spark, project, schema)
    if target == "postgres":  # a user's own view on it
        mine = f'select count(*) as n from "{schema}".stg_customers'
        query(target, spark, project, f'create view "{schema}".mine as {mine}')

    run_view(root, target)  # nothing changed
    assert identity(target, spark, project, schema) == made
    if target == "postgres":
        assert query(target, spark, project, f'select n from "{schema}".mine') == [{"n": 0}]

    model = root / "dbt_project" / "models" / "staging" / "stg_customers.sql"
    before = columns(target, spark, project, schema)
    model.write_text(model.read_text() + "\nwhere 1 = 1\n")
    run_view(root, target)  # its SQL changed, not its columns
    again = identity(target, spark, project, schema)
    assert again != made
    assert columns(target, spark, project, schema) == before

    staged = f"{q}{schema}{q}.{q}customers__staged{q}"
    query(target, spark, project, f"alter table {staged} add column {q}loyalty{q} int")
    if target == "postgres":  # PostgreSQL keeps a view's columns: `*` was expanded when made
        assert "loyalty" not in columns(target, spark, project, schema)
    run_view(root, target)  # the same SQL, one more column under its `select *`
    assert identity(target, spark, project, schema) != again
    assert "loyalty" in columns(target, spark, project, schema)
