"""`dbt source freshness` on the CDC sources (docs/operations.md): each entity's loaded-at is
when its last File was staged; the sample's defaults warn after a day and error after three,
and an entity overrides them with its own `config: {freshness: ...}`. On local Spark and
PostgreSQL, in this process: pass once a File is staged, warn once that File is older than the
entity's threshold (the clock moved: its staging time set back), error for an entity that never
had a File."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.project import drop_database, query
from helpers.scenario import ROUND_1, scenario_project, write

from audit import AuditDB
from runner.contract import state_tables
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else "fresh_test"
    monkeypatch.setenv("CDC_SCHEMA", schema)
    return request.param


def freshness(root: Path, target: str) -> dict[str, str]:
    """`dbt source freshness` of the cdc_staging sources: source table name -> status."""
    from dbt.cli.main import dbtRunner

    proj = root / "dbt_project"
    res = dbtRunner().invoke(
        ["source", "freshness", "--project-dir", str(proj), "--profiles-dir", str(root),
         "--target", target, "--select", "source:cdc_staging"]
    )  # fmt: skip
    assert res.result is not None, res.exception
    return {r.node.name: str(r.status) for r in res.result.results}


def test_freshness_passes_once_a_file_is_staged_and_warns_when_it_ages(
    spark: Any, tmp_path: Path, target: str
) -> None:
    root = scenario_project(tmp_path / "repo")
    sources = root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    doc = yaml.safe_load(sources.read_text())
    customers = next(t for t in doc["sources"][0]["tables"] if t["name"] == "customers")
    customers["config"] = {
        "freshness": {"warn_after": {"count": 5, "period": "minute"},
                      "error_after": {"count": 1, "period": "day"}}
    }  # fmt: skip
    sources.write_text(yaml.safe_dump(doc, sort_keys=False))
    project = Project.load(root, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    folder = tmp_path / "landing" / "customers"
    for name, rows in ROUND_1.items():
        write(folder / name, rows)
    pid = new_process_id()
    db.start_run(pid, "ingest", target)
    ingest(Invocation.of(project, db, spark), pid, landing=[str(folder.parent)])
    db.dispose()

    # customers' Files staged just now; accounts has never had a File
    assert freshness(root, target) == {"customers": "pass", "accounts": "error"}

    # the clock moves: the Files were staged ten minutes ago, past customers' five
    manifest = state_tables()["staged_files"]["identifier"]
    q = "`" if target == "local" else '"'
    back = "interval 10 minutes" if target == "local" else "interval '10 minutes'"
    query(
        target, spark, project,
        f"update {q}{schema}{q}.{q}{manifest}{q} set staged_at = staged_at - {back}",
    )  # fmt: skip
    assert freshness(root, target) == {"customers": "warn", "accounts": "error"}
