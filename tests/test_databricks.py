"""The databricks destination's own staging code, run here on local Spark with Iceberg standing
in for Delta (no Delta jars can be had offline): Files staged through the session the runner is
given, rows naming their File by ``_metadata.file_path`` (``input_file_name()`` is made to fail,
as on Unity Catalog), into ``catalog.schema.table``, from a landing root given as a URI (listed,
hashed and validated through fsspec, as an s3:// or abfss:// root would be; file:// here).
Staged rows equal the plain-Python oracle; a bad File is quarantined; a second ingest stages
nothing again. The dbt-databricks apply SQL
runs on local Spark in tests/test_render.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.oracles import staged_oracle as oracle
from helpers.oracles import staged_tuples
from helpers.project import drop_database, make_project

from audit import AuditDB
from runner.contract import state_tables
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark]
SCHEMA = "databricks_stage"


def databricks_project(root: Path) -> Path:
    make_project(root)
    profiles = yaml.safe_load((root / "profiles.yml").read_text())
    profiles["cdc"]["outputs"]["databricks"] = {
        "type": "databricks",
        "host": "example.cloud.databricks.com",
        "http_path": "/sql/1.0/warehouses/none",
        "token": "{{ env_var('DATABRICKS_TOKEN', 'not-used-here') }}",
        "catalog": "spark_catalog",
        "schema": SCHEMA,
    }
    (root / "profiles.yml").write_text(yaml.safe_dump(profiles))
    settings = yaml.safe_load((root / "runner.yml").read_text())
    settings.setdefault("targets", {})["databricks"] = {"table_format": "iceberg"}
    (root / "runner.yml").write_text(yaml.safe_dump(settings))
    return root


def test_databricks_staging_runs_here_and_equals_the_oracle(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark.sql.functions as F

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("input_file_name() is not available on Unity Catalog")

    monkeypatch.setattr(F, "input_file_name", unavailable)
    drop_database(spark, SCHEMA)
    project = Project.load(databricks_project(tmp_path / "repo"), target="databricks")
    landing = tmp_path / "landing dir @ñ"  # a path Spark spells differently
    good = generate_customers(landing / "customers", initial=30, files=2, changes_per_file=20)
    bad = landing / "customers" / "bad.csv"
    bad.write_text(
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\n"
        "I,20260301080000000000000000000000001,1,a,b,c,1.00,2026-03-01 08:00:00\n"
        "I,20260301080000000000000000000000002,x,a,b,c,1.00,2026-03-01 08:00:00\n"
    )
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()

    def run() -> object:
        pid = new_process_id()
        db.start_run(pid, "ingest", "databricks")
        return ingest(Invocation.of(project, db, spark), pid, landing=[f"file://{landing}"])

    first = run()
    assert (first.staged, first.quarantined) == (len(good), 1)  # type: ignore[attr-defined]
    assert sorted(f.path for f in db.files()) == sorted(
        f"file://{p}" for p in [*good, bad]
    )  # recorded by URI, as found through fsspec
    reason = next(f.last_error for f in db.files() if f.path == f"file://{bad}")
    assert reason is not None and "line 3" in reason and "customer_id" in reason

    staged = [
        {k.lower(): v for k, v in r.asDict().items()}
        for r in spark.sql(f"select * from spark_catalog.{SCHEMA}.customers__staged").collect()
    ]
    assert staged_tuples(staged) == sorted(row for p in good for row in oracle(p))
    manifest = spark.sql(
        f"select file_name, staged_rows from spark_catalog.{SCHEMA}."
        f"{state_tables()['staged_files']['identifier']}"
    ).collect()
    assert sorted((m[0], m[1]) for m in manifest) == sorted((p.name, len(oracle(p))) for p in good)

    second = run()
    assert second.staged == 0  # type: ignore[attr-defined]
    assert spark.table(f"spark_catalog.{SCHEMA}.customers__staged").count() == len(staged)
    db.dispose()
    drop_database(spark, SCHEMA)
