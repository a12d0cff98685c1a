"""`runner maintain` (runner.yml `retention`), on local Spark + Iceberg and PostgreSQL.

Two rounds of Files applied (no apply leaves a scratch table behind, in the catalog or on
disk), a third only staged. With every age limit at 0 days: `--dry-run`
changes nothing; then exactly the staged rows of the COMMITTED Files go (counted from the CSV
Files by plain Python), the STAGED File's rows stay, the events of COMMITTED Files go, and every
apply target and the markers are unchanged row by row; on Iceberg the tables keep one snapshot
and fewer files. Rebuilding the history model from the start then refuses, naming retention;
`runner run` still applies the third File (the tables equal the oracle of every File), and with
`maintain_every: 1` maintains by itself afterwards.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle, shown_customers
from helpers.project import audit_rows
from helpers.scenario import ROUND_1, ROUND_2, ROUND_3, write

from runner.contract import lineage_columns

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

HASH = lineage_columns()["file_hash"]


def _csv_rows(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, encoding="utf-8", newline="") as handle:
            total += sum(1 for _ in csv.DictReader(handle))
    return total


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _retention(root: Path, **extra: object) -> None:
    import yaml

    path = root / "runner.yml"
    conf = yaml.safe_load(path.read_text())
    conf["retention"] = {"staged_days": 0, "events_days": 0, "snapshot_days": 0}
    conf.update(extra)
    path.write_text(yaml.safe_dump(conf))


def _iceberg(spark, schema: str, table: str) -> tuple[int, int]:  # noqa: ANN001
    name = f"`{schema}`.`{table}`"
    files = spark.sql(f"select count(*) from {name}.files").first()[0]
    snaps = spark.sql(f"select count(*) from {name}.snapshots").first()[0]
    return int(files), int(snaps)


def _delete_files(spark, schema: str, table: str) -> int:  # noqa: ANN001
    """The delete files of the table's current snapshot."""
    return int(spark.sql(f"select count(*) from `{schema}`.`{table}`.delete_files").first()[0])


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_maintain_removes_exactly_the_old_committed_rows_and_changes_no_table(
    cli_project, request: pytest.FixtureRequest, target: str
) -> None:  # noqa: ANN001
    cli = cli_project(target)
    landing = cli.root / "landing" / "customers"
    first = [write(landing / n, rows) for n, rows in ROUND_1.items()]
    second = [write(landing / n, rows) for n, rows in ROUND_2.items()]
    cli.runner("run", "--landing", "landing")
    third = [write(landing / n, rows) for n, rows in ROUND_3.items()]
    cli.runner("ingest", "--landing", "landing")
    staged = "{{ source('cdc_staging', 'customers') }}"
    markers = "{{ source('cdc_state', 'applied_files') }}"
    models = ("{{ ref('customers') }}", "{{ ref('customers_changes_history') }}", markers)
    before = {m: sorted(map(str, cli.table(m))) for m in models}
    rows_before = cli.table(staged)
    spark = request.getfixturevalue("spark") if target == "local" else None
    if spark is not None:  # no apply leaves a scratch table, in the catalog or on disk
        tables = [r["tableName"] for r in spark.sql(f"show tables in `{cli.schema}`").collect()]
        assert not [t for t in tables if "__cdc_" in t or "__dbt_tmp" in t], tables
        # (the session's catalog keeps the warehouse it was built with: ask the table)
        rows = spark.sql(f"describe table extended `{cli.schema}`.customers").collect()
        location = next(r["data_type"] for r in rows if r["col_name"] == "Location")
        folder = Path(location.removeprefix("file:")).parent
        assert folder.is_dir(), folder
        kept = [p for d in folder.glob("*__cdc_*") for p in d.rglob("*") if p.is_file()]
        assert not kept, kept  # (Iceberg's purge leaves the emptied folders)
        # What a build that died leaves (its scratch tables are named with its invocation id),
        # in the session catalog (a profile without the scratch catalog) and in the scratch one
        stray = f"customers__cdc_batch_{'0a' * 8}"
        spark.sql(f"create table `{cli.schema}`.`{stray}` as select 1 as x")
        spark.sql(f"create table cdc_scratch.`{cli.schema}`.`{stray}` as select 1 as x")
        # the applies' scratch tables were in their own catalog, gone with their folders (the
        # folder of this schema there: the stray's parent, as the catalog was built)
        rows = spark.sql(f"describe table extended cdc_scratch.`{cli.schema}`.`{stray}`").collect()
        location = next(r["data_type"] for r in rows if r["col_name"] == "Location")
        scratch = Path(location.removeprefix("file:"))
        assert scratch.is_dir() and scratch.name == stray, scratch
        assert [p.name for p in scratch.parent.iterdir()] == [stray]
    iceberg_before = _iceberg(spark, cli.schema, "customers__staged") if spark else None
    if spark:  # the apply targets are created merge-on-read
        props = spark.sql(f"show tblproperties `{cli.schema}`.customers").collect()
        modes = {r[0]: r[1] for r in props if r[0].startswith("write.") and r[0].endswith(".mode")}
        assert set(modes.values()) == {"merge-on-read"} and len(modes) == 3, modes

    _retention(cli.root)
    dry = json.loads(cli.runner("maintain", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and [s["files"] for s in dry["staged"]] == [len(first + second)], dry
    assert sorted(map(str, cli.table(staged))) == sorted(map(str, rows_before))

    done = json.loads(cli.runner("maintain", "--json").stdout)
    assert [(s["entity"], s["files"], s["rows"]) for s in done["staged"]] == [
        ("customers", len(first + second), _csv_rows(first + second))
    ], done
    left = cli.table(staged)
    assert {r[HASH] for r in left} == {_sha256(p) for p in third}
    assert len(left) == _csv_rows(third)
    for model in models:  # the targets and the markers: unchanged, row by row
        assert sorted(map(str, cli.table(model))) == before[model], model
    assert done["events_removed"] > 0
    kept = dict(audit_rows(cli, "select f.state, count(e.id) from files f left join "
                                "file_events e on e.file_id = f.id group by f.state"))  # fmt: skip
    assert kept["COMMITTED"] == 0 and kept["STAGED"] > 0, kept
    if spark is not None:
        from runner.destinations.spark.destination import drop_left_scratch

        # written a moment ago, its build may be running: kept; a day later, dropped
        assert not [t for t in done["tables"] if stray in t], done["tables"]
        dropped = drop_left_scratch(spark, "spark_catalog", [(cli.schema, "customers")], False, 0)
        assert dropped == [f"{cli.schema}.{stray}: scratch table of a stopped build dropped"]
        assert not spark.catalog.tableExists(f"{cli.schema}.{stray}")
        dropped = drop_left_scratch(spark, "cdc_scratch", [(cli.schema, "customers")], False, 0)
        said = f"cdc_scratch.{cli.schema}.{stray}: scratch table of a stopped build dropped"
        assert dropped == [said], dropped
        assert not scratch.exists()
        assert _iceberg(spark, cli.schema, "customers")[1] == 1  # the newest snapshot only
        files, snaps = _iceberg(spark, cli.schema, "customers__staged")
        assert snaps == 1 and files < iceberg_before[0], (iceberg_before, (files, snaps))
        assert any(t.startswith(f"{cli.schema}.customers: files") for t in done["tables"])
    else:
        assert f"{cli.schema}.customers: vacuum (analyze)" in done["tables"], done["tables"]

    refused = cli.dbt("build", "--full-refresh", "--select", "customers_changes_history", ok=(1,))
    said = refused.stdout + refused.stderr
    assert "are gone (runner maintain's retention" in said, said[-2000:]
    assert sorted(map(str, cli.table(models[1]))) == before[models[1]]  # left as it was

    _retention(cli.root, maintain_every=1)
    out = cli.runner("run", "--landing", "landing")
    everything = first + second + third
    assert shown_customers(cli.table(models[0])) == customers_oracle(everything)
    assert "staged rows of 1 COMMITTED File removed" in out.stdout, out.stdout
    assert cli.table(staged) == []
    if spark is not None:  # the run's MERGE into the full table wrote deletes; maintain folded them
        assert _delete_files(spark, cli.schema, "customers") == 0
    maintains = audit_rows(cli, "select outcome from runs where command = 'maintain'")
    assert maintains == [("ok",), ("ok",)], maintains  # the dry run is not counted
