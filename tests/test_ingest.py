"""`runner ingest` on local Spark + Iceberg and on PostgreSQL: staged rows equal a plain-Python
oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.oracles import HEADER, staged_tuples
from helpers.oracles import staged_oracle as oracle
from helpers.project import read_table

from audit import AuditDB
from runner.contract import lineage_columns, state_tables
from runner.entities import load_entities
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project
from runner.samples.generate import generate_customers

pytestmark = pytest.mark.spark

SEQ = "2026030109000000000000000000000000{}"
BAD = {
    "wrong_count.csv": (
        HEADER + f"I,{SEQ.format(1)},1,a,b,gold,1.00,2026-03-01 09:00:00\n"
        f"I,{SEQ.format(2)},2,a,b,gold\n",
        "line 3, wrong number of fields",
    ),
    "null_key.csv": (
        HEADER + f"U,{SEQ.format(1)},,a,b,gold,1.00,2026-03-01 09:00:00\n",
        "line 2, column 'customer_id': NULL in a key or sequence",
    ),
    "bad_key.csv": (
        HEADER + f"U,{SEQ.format(1)},12x,a,b,gold,1.00,2026-03-01 09:00:00\n",
        "line 2, column 'customer_id': cannot cast \"12x\" to bigint",
    ),
    "null_seq.csv": (
        HEADER + "U,,5,a,b,gold,1.00,2026-03-01 09:00:00\n",
        "line 2, column 'AR_H_CHANGE_SEQ': NULL in a key or sequence",
    ),
    "bad_op.csv": (
        HEADER + f"X,{SEQ.format(1)},5,a,b,gold,1.00,2026-03-01 09:00:00\n",
        "line 2, column 'Op': unknown operation code \"X\"",
    ),
    "conflict.csv": (
        HEADER + f"U,{SEQ.format(1)},5,a,b,gold,1.00,2026-03-01 09:00:00\n"
        f"U,{SEQ.format(2)},6,a,b,gold,1.00,2026-03-01 09:00:00\n"
        f"U,{SEQ.format(1)},5,z,b,gold,1.00,2026-03-01 09:00:00\n",
        "line 4, column 'AR_H_CHANGE_SEQ': conflicts with line 2",
    ),
    "missing_column.csv": (
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance\n",
        "line 1, column 'updated_at': declared column missing",
    ),
}


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "postgres":
        monkeypatch.setenv("CDC_SCHEMA", request.getfixturevalue("pg_schema"))
    else:
        monkeypatch.setenv("CDC_SCHEMA", "ingest_test")
    return request.param


def test_ingest_stages_good_files_quarantines_bad_ones_and_is_idempotent(
    spark, spark_project: Path, tmp_path: Path, target: str
) -> None:
    project = Project.load(spark_project, target=target)
    entity = load_entities(project)["customers"]
    landing = tmp_path / "landing"
    good = generate_customers(landing / "customers", initial=50, files=3, changes_per_file=30)
    dup_line = good[1].read_text().splitlines()[1]  # an exact duplicate row inside a File
    good[1].write_text(good[1].read_text() + dup_line + "\n")
    (landing / "customers" / "header_only.csv").write_text(HEADER)
    for name, (text, _) in BAD.items():
        (landing / "customers" / name).write_text(text)
    shutil.copy(good[0], landing / "customers" / "copy_of_load.csv")
    before = {p: p.read_bytes() for p in (landing / "customers").iterdir()}

    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "ingest", "local")
    result = ingest(Invocation.of(project, db, spark), pid, landing=[str(landing)])

    states = {Path(f.path).name: f for f in db.files()}
    assert states["copy_of_load.csv"].state == "DUPLICATE"
    for name, (_, reason) in BAD.items():
        assert states[name].state == "QUARANTINED", name
        assert reason in (states[name].last_error or ""), (name, states[name].last_error)
        assert name in states[name].last_error
    for p in [*good, landing / "customers" / "header_only.csv"]:
        assert states[p.name].state == "STAGED" and states[p.name].staged_by == pid
    assert (result.quarantined, result.staged) == (len(BAD), len(good) + 1)

    lin = lineage_columns()
    rows = read_table(target, spark, project, entity.staging_schema, entity.staging_table)
    expected = sorted(row for p in good for row in oracle(p))
    assert staged_tuples(rows) == expected
    hashes = {Path(f.path).name: f.content_hash for f in db.files()}
    for r in rows:
        assert r[lin["process_id"]] == pid
        assert r[lin["file_hash"]] == hashes[r[lin["file_name"]]]
        assert r[lin["operation"]] == r["op"] and r[lin["sequence"]] == r["ar_h_change_seq"]
        assert r[lin["ingested_at"]] is not None
    # The staged-files manifest lists exactly the staged Files, with their row counts.
    manifest_table = state_tables()["staged_files"]["identifier"]
    manifest = read_table(target, spark, project, entity.staging_schema, manifest_table)
    per_file = {p.name: len(oracle(p)) for p in good}
    per_file["header_only.csv"] = 0
    assert {(m["file_name"], m["staged_rows"], m["process_id"]) for m in manifest} == {
        (name, n, pid) for name, n in per_file.items()
    }

    # Again: nothing new is registered or staged, and the landing zone was never modified.
    pid2 = new_process_id()
    db.start_run(pid2, "ingest", "local")
    again = ingest(Invocation.of(project, db, spark), pid2, landing=[str(landing)])
    assert (again.registered, again.staged, again.rows) == (0, 0, 0)
    assert len(
        read_table(target, spark, project, entity.staging_schema, entity.staging_table)
    ) == len(rows)
    assert {p: p.read_bytes() for p in (landing / "customers").iterdir()} == before
    db.dispose()


def test_a_thousand_small_files_are_staged_in_a_handful_of_spark_jobs(
    spark, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SCHEMA", "many_files_test")
    project = Project.load(spark_project, target="local")
    landing = tmp_path / "landing"
    files = generate_customers(landing / "customers", initial=20, files=999, changes_per_file=3)
    assert len(files) == 1000
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "ingest", "local")
    sc = spark.sparkContext
    group = f"many-files-{pid}"
    sc.setJobGroup(group, "1,000 small Files")
    try:
        result = ingest(Invocation.of(project, db, spark), pid, landing=[str(landing)])
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    jobs = sc.statusTracker().getJobIdsForGroup(group)
    print(f"1,000 Files: {len(jobs)} Spark jobs")
    assert result.staged == 1000 and result.rows == 20 + 999 * 3
    # One read per entity: the checks, the write and its manifest; not 1,000.
    assert 0 < len(jobs) <= 20, f"{len(jobs)} Spark jobs for 1,000 Files"
    # Nor a task per File: the driver lists local Files (Spark's own listing job past 32
    # paths has one task per path), and small Files share a task.
    tracker = sc.statusTracker()
    tasks = {
        stage: info.numTasks
        for job in jobs
        for stage in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
        if (info := tracker.getStageInfo(stage)) is not None
    }
    assert tasks and max(tasks.values()) < 1000, tasks
    db.dispose()


@pytest.mark.postgres
def test_two_runners_meeting_a_new_entity_on_postgres_create_its_staging_table_once(
    spark_project: Path, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first runner's load has created the staging table and not committed yet; a second
    runner's first-time DDL for the same entity waits for it instead of failing on PostgreSQL's
    catalog (`duplicate key value violates unique constraint "pg_type_typname_nsp_index"`),
    then finds the table."""
    import threading
    import time

    from runner.destinations import destination_for
    from runner.destinations.postgres import _lock_if_missing, connect, staging_table_ddl

    monkeypatch.setenv("CDC_SCHEMA", pg_schema)
    project = Project.load(spark_project, target="postgres")
    entity = load_entities(project)["customers"]
    writer = destination_for(project).writer()
    first = connect(project.target)
    failed: list[BaseException] = []

    def second_runner() -> None:
        try:
            writer.ensure_table(None, entity)  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failed.append(exc)

    try:
        with first.cursor() as cur:  # the first runner's transaction, still open
            _lock_if_missing(cur, (entity.staging_schema, entity.staging_table))
            for stmt in staging_table_ddl(entity):
                cur.execute(stmt)
            other = threading.Thread(target=second_runner)
            other.start()
            time.sleep(1.0)
            assert other.is_alive() and not failed  # waiting, not failed
        first.commit()
        other.join(timeout=60)
        assert not other.is_alive() and not failed, failed
    finally:
        first.close()
