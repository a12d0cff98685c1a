"""`runner ingest` then `dbt build` on local Spark + Iceberg and on PostgreSQL: after every
build of a multi-File scenario (several changes per key per File, rows out of order, deletes,
re-inserts, late Files, a byte-identical copy, a broken File, a header-only File, partial
updates, a truncate, a late File older than it) the customers table and its change history
equal plain-Python oracles that fold the changes in order; a second build changes nothing, and
a run that fails between the MERGE and the markers is repaired by the next one. Also: the
ADR-019 guard on a dirty target, and a history with deletion records and dbt's names."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.faults import SPARK_COMMITS, stopped_before, walk_the_stops
from helpers.project import (
    dbt_build,
    drop_database,
    drop_key_index,
    key_indexes,
    link_package,
    make_project,
    query,
    read_table,
)
from helpers.scenario import (
    BROKEN,
    LATE,
    LATE_PARTIAL,
    LATE_TRUNCATED,
    PARTIAL_FILE,
    ROUND_1,
    ROUND_2,
    ROUND_3,
    TRUNCATE_FILE,
    CurrentOracle,
    HistoryOracle,
    change,
    check_truncate_markers,
    current,
    current_rows,
    for_table,
    history,
    history_oracle,
    history_rows,
    oracle,
    scenario_project,
    seq,
    write,
)

from audit import AuditDB
from runner.contract import lineage_columns, lineage_on, state_tables
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else "apply_test"
    monkeypatch.setenv("CDC_SCHEMA", schema)
    return request.param


@pytest.fixture(scope="module")
def dbt_deps(spark_project: Path) -> Path:
    from dbt.cli.main import dbtRunner

    proj = spark_project / "dbt_project"
    res = dbtRunner().invoke(
        ["deps", "--project-dir", str(proj), "--profiles-dir", str(proj.parent)]
    )
    assert res.success, res.exception
    return proj


def test_apply_equals_the_oracle_and_survives_a_stop_between_any_two_statements(
    spark, tmp_path: Path, target: str
) -> None:
    """The scenario, build by build, on the current state and the change history: the rounds
    above with a duplicate and a broken File, partial updates (NULLs and a placeholder that keep
    a value), late Files, a no-op rebuild (with the data tests), a truncate between changes,
    and a late File older than the truncate whose apply is stopped before each of its
    statements in turn, then finished by the same build."""
    root = scenario_project(tmp_path / "repo")
    project = Project.load(root, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    folder = tmp_path / "landing" / "customers"
    markers_table = state_tables()["applied_files"]["identifier"]
    pids: dict[str, str] = {}  # File name -> the process id of the ingest that staged it
    now, hist = CurrentOracle(), HistoryOracle(pids)

    def read(table: str) -> list[dict]:
        return read_table(target, spark, project, schema, table)

    def stage(files: dict[str, list[list[str]]]) -> list[Path]:
        batch = [write(folder / n, rows) for n, rows in files.items()]
        pid = new_process_id()
        db.start_run(pid, "ingest", target)
        ingest(Invocation.of(project, db, spark), pid, landing=[str(folder.parent)])
        pids.update({p.name: pid for p in batch})
        return batch

    def build(tests: bool = False) -> Any:
        # The data tests run once, on the rebuild with nothing new below.
        extra = () if tests else ("--exclude", "resource_type:test")
        return dbt_build(
            root / "dbt_project", target, "--select", "+customers", "+customers_changes_history",
            *extra,
        )  # fmt: skip

    def applied(batch: list[Path]) -> None:
        now.apply(batch)
        hist.apply(batch)
        assert current_rows(read("customers")) == now.table(), [p.name for p in batch]
        assert history_rows(read("customers_changes_history")) == hist.table()

    def step(files: dict[str, list[list[str]]]) -> list[Path]:
        batch = stage(files)
        assert build().success
        applied(batch)
        return batch

    good = step(ROUND_1)

    shutil.copy(folder / "20260301-080500000.csv", folder / "copy-of-080500.csv")  # DUPLICATE
    (bad,) = [write(folder / n, rows) for n, rows in BROKEN.items()]
    # Truncates are declared, so a truncate row's key may be empty; any other row's may not.
    no_key = write(folder / "20260301-081300000.csv", [change("U", 52, 14, "k")[:2] + [""] * 6])
    good += step(ROUND_2 | PARTIAL_FILE)
    files = {Path(f.path).name: f for f in db.files()}
    assert files["copy-of-080500.csv"].state == "DUPLICATE"
    assert files[bad.name].state == files[no_key.name].state == "QUARANTINED"
    assert "line 2, column 'customer_id': NULL in a key" in files[no_key.name].last_error
    assert 13 not in now.table() and 13 not in current_rows(read("customers"))  # nothing of it

    # Late Files: older sequences than what is applied. k4 and k7 stay deleted (their
    # tombstones), k1 and k5 keep their newer values, k8 is new, the delete of k6 is newer
    # than its load; the late versions land between the versions around them, which are
    # re-closed, one of them before a delete that left no row (k7).
    good += step(LATE | LATE_PARTIAL)
    rows = read("customers")
    for r in rows:
        # Every lineage column a change-File entity's rows carry (history's are on history rows,
        # the key and row hashes on snapshot entities' rows).
        for col in lineage_on("staged", "cdc") + lineage_on("applied", "cdc"):
            assert r[col.name] is not None, (col.name, r)

    # Nothing new: a second build changes nothing, not even the lineage of a row.
    versions = read("customers_changes_history")
    assert build(tests=True).success
    assert sorted(read("customers"), key=str) == sorted(rows, key=str)
    assert sorted(read("customers_changes_history"), key=str) == sorted(versions, key=str)

    good += step(ROUND_3)
    good += step(TRUNCATE_FILE)
    # The apply of a File older than the truncate (every step of the truncate path), stopped
    # before each of its statements in turn (each stop on what the one before left), then run
    # to the end: the oracle's tables, one marker per File. (On Spark the counts of a marker
    # written by a replay describe that replay: the truncate's own File is applied unstopped,
    # its counts are checked below.)
    batch = stage(LATE_TRUNCATED)
    models = ("customers", "customers_changes_history")
    # On local Spark before each commit (SPARK_COMMITS): what a kill can leave there.
    only = SPARK_COMMITS if target == "local" else None
    stops = walk_the_stops(build, models, only=only)
    end = "drop table" if target == "local" else "COMMIT"  # after the markers
    # (on local Spark the first commit is the truncate's delete: the scratch tables before it
    # are made again by the next build)
    first = "delete from" if target == "local" else "__cdc_truncate"
    stopped_before(stops["customers"], first, "merge into", "cdc_applied_files", end)
    stopped_before(
        stops["customers_changes_history"], "cdc_history_deletes", "cdc_applied_files", end
    )
    applied(batch)
    good += batch

    markers = read(markers_table)
    staged = sorted(p.name for p in good)
    for table in ("customers", "customers_changes_history"):
        # exactly one marker per applied File and apply model, the header-only one too
        assert sorted(m["file_name"] for m in for_table(markers, table)) == staged, table
    by_name = {m["file_name"]: m for m in for_table(markers, "customers")}
    late = by_name["20260301-075900000.csv"]
    # k8 inserted, k6 deleted; k4, k1, k7, k5 stale.
    assert (
        late["rows_inserted"],
        late["rows_updated"],
        late["rows_deleted"],
        late["rows_skipped"],
    ) == (1, 0, 1, 4)
    late = {m["file_name"]: m for m in for_table(markers, "customers_changes_history")}[
        late["file_name"]
    ]
    # Every change of the late File is a version or a delete in the history.
    assert (late["rows_inserted"], late["rows_updated"], late["rows_deleted"]) == (1, 4, 1)
    check_truncate_markers(markers, now)
    db.dispose()


def test_a_target_with_duplicate_keys_is_deduplicated_then_applied_in_one_build(
    spark,
    spark_project: Path,
    dbt_deps: Path,
    tmp_path: Path,
    target: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ADR-019: a target holding keys more than once (here: rows inserted by hand after a build)
    is repaired by the next apply, which keeps each key's row of highest sequence and warns with
    the count, and then applies the new Files as usual. On Spark (keys counted whatever the
    table's size here), a build marks the snapshot it left as holding each key once: the hand's
    inserts after the mark are still found, and the repaired table's snapshot is marked. On
    PostgreSQL the apply's unique index on the keys refuses the copies; dropped (a table an
    earlier release made), the copies go in, and the repairing build indexes the keys again."""
    from dbt.cli.main import dbtRunner

    if target == "local":
        monkeypatch.setenv("CDC_SCHEMA", "guard_test")
    project = Project.load(spark_project, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    landing = tmp_path / "landing"
    folder = landing / "customers"

    def run_ingest() -> None:
        pid = new_process_id()
        db.start_run(pid, "ingest", target)
        ingest(Invocation.of(project, db, spark), pid, landing=[str(landing)])

    warnings: list[str] = []

    def build() -> Any:
        return dbtRunner(callbacks=[lambda e: warnings.append(e.info.msg)]).invoke(
            ["build", "--select", "+customers", "--project-dir", str(dbt_deps),
             "--profiles-dir", str(dbt_deps.parent), "--target", target,
             "--vars", "{cdc_key_check_rows: 0}"]
        )  # fmt: skip

    good = [write(folder / n, rows) for n, rows in ROUND_1.items()]
    run_ingest()
    assert build().success
    q = "`" if target == "local" else '"'
    table = f"{q}{schema}{q}.{q}customers{q}"
    columns = [c for c in read_table(target, spark, project, schema, "customers")[0]]
    seq_col = lineage_columns()["sequence"]

    def copy_of(key: int, **changed: str) -> str:
        cols = ", ".join(changed.get(c, f"{q}{c}{q}") for c in columns)
        return (
            f"insert into {table} select {cols} from {table} "
            f"where customer_id = {key} and name not like 'dirty%'"
        )

    if target == "postgres":  # the apply's unique index refuses the copies; a table an
        with pytest.raises(Exception, match="duplicate key"):  # earlier release made has none
            query(target, spark, project, copy_of(5))
        drop_key_index(project, schema, "customers")
    # k3 (not in the next Files): a newer copy with other values, which must survive, and an
    # older one; k5 (updated by the next Files): an exact copy.
    query(target, spark, project, copy_of(3, name="'dirty newer'", **{seq_col: f"'{seq(25)}'"}))
    query(target, spark, project, copy_of(3, name="'dirty older'", **{seq_col: f"'{seq(0)}'"}))
    query(target, spark, project, copy_of(5))
    dirty = read_table(target, spark, project, schema, "customers")
    assert len(dirty) == len(oracle(good)) + 3

    good += [write(folder / n, rows) for n, rows in ROUND_2.items()]
    run_ingest()
    warnings.clear()
    # The repair and the apply after it, stopped before each of their statements in turn,
    # then run to the end.
    only = SPARK_COMMITS if target == "local" else None
    stops = walk_the_stops(build, ("customers",), only=only)["customers"]
    repair = "insert overwrite table" if target == "local" else "where ctid in"
    stopped_before(stops, repair, "merge into", "cdc_tombstones")
    if target != "local":  # (on local Spark a scratch table is made again by the next build)
        stopped_before(stops, "__cdc_batch")
    stopped_before(stops, "cdc_applied_files", "drop table" if target == "local" else "COMMIT")
    rows = read_table(target, spark, project, schema, "customers")
    keys = [r["customer_id"] for r in rows]
    assert len(keys) == len(set(keys))  # one row per key
    expected = oracle(good)
    k3 = next(r for r in dirty if r["name"] == "dirty newer")
    expected[3] = current([k3])[3]  # the survivor: the highest sequence
    assert current(rows) == expected
    said = [w for w in warnings if "more than once" in w]
    assert said and "2 keys more than once (3 extra rows)" in said[0], warnings
    if target == "local":  # the repaired table's snapshot is marked: the next build won't count
        mark = spark.sql(f"show tblproperties {table} ('cdc.keys_unique_at')").collect()[0][1]
        main = spark.sql(f"select snapshot_id from {table}.refs where name = 'main'").collect()
        assert mark == f"s{main[0][0]}"
    else:  # the repaired table's keys are indexed again
        assert len(key_indexes(project, schema, "customers")) == 1
    db.dispose()


NEW_RECORD_HISTORY = """
select customer_id, name, email, tier, balance, updated_at,
    {{ cdc.dms_change_time('AR_H_CHANGE_SEQ') }} as changed_at,
    {{ cdc.lineage_select() }}
from {{ cdc.unapplied(ref('stg_customers')) }}
"""
NEW_RECORD_CONFIG = {
    "name": "customers_deletions_history",
    "config": {
        "meta": {
            "cdc": {
                "apply": True,
                "history": True,
                "valid_from": "changed_at",
                "hard_deletes": "new_record",
                "snapshot_meta_column_names": {
                    "dbt_valid_from": "valid_from",
                    "dbt_valid_to": "valid_to",
                    "closed_process_id": "closed_by",
                },
                "dbt_valid_to_current": "cast('9999-12-31' as timestamp)",
            }
        },
        "materialized": "incremental",
        "incremental_strategy": "merge",
        "unique_key": "customer_id",
    },
}


@pytest.mark.postgres
def test_change_history_with_deletion_records_and_dbt_names(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str
) -> None:
    """hard_deletes: new_record, renamed history columns and dbt_valid_to_current, on
    PostgreSQL: the first rounds and the late File of the scenario, each delete a deletion
    record (operation D) open until the key comes back, equal to the oracle after each build."""
    monkeypatch.setenv("CDC_SCHEMA", pg_schema)
    root = make_project(tmp_path / "repo")
    models = root / "dbt_project" / "models"
    (models / "customers_deletions_history.sql").write_text(NEW_RECORD_HISTORY)
    (models / "deletions.yml").write_text(
        yaml.safe_dump({"version": 2, "models": [NEW_RECORD_CONFIG]})
    )
    link_package(root)
    project = Project.load(root, target="postgres")
    schema = project.target["schema"]
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    folder = tmp_path / "landing" / "customers"
    pids: dict[str, str] = {}
    names = {"valid_from": "valid_from", "valid_to": "valid_to", "closed_process_id": "closed_by"}
    good: list[Path] = []
    for files in (ROUND_1, ROUND_2, LATE):
        good += [write(folder / n, rows) for n, rows in files.items()]
        pid = new_process_id()
        db.start_run(pid, "ingest", "postgres")
        ingest(Invocation.of(project, db, spark), pid, landing=[str(folder.parent)])
        pids.update({p.name: pid for p in good if p.name not in pids})
        res = dbt_build(
            root / "dbt_project", "postgres", "--select", "+customers_deletions_history"
        )
        assert res.success, res.exception
        rows = read_table("postgres", spark, project, schema, "customers_deletions_history")
        expected = history_oracle(good, pids, new_record=True, current=datetime(9999, 12, 31))
        assert history(rows, names) == expected
    db.dispose()
