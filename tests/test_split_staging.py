"""Large Files read by many tasks: with Spark's split size made tiny, each File below is read in
many blocks. Row numbers, exact duplicates, conflicts and bad rows that fall in different blocks
are found as a plain-Python reading of the same Files says; a File with a newline inside quotes
is read whole and still numbered by record."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from pathlib import Path

import pytest

from audit import AuditDB
from runner.contract import lineage_columns
from runner.entities import load_entities
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project

pytestmark = pytest.mark.spark

HEADER = ["Op", "AR_H_CHANGE_SEQ", "customer_id", "name", "email", "tier", "balance", "updated_at"]


def row(i: int, name: str | None = None) -> list[str]:
    return [
        "I" if i % 7 else "U",
        f"20260301{i:027d}",
        str(1000 + i),
        name or f'Ana "{i}", Jr.',
        f"a{i}@example.com",
        "gold",
        f"{i}.25",
        "2026-03-01 08:00:00.000001",
    ]


def write(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def test_split_files_keep_row_numbers_duplicates_conflicts_and_bad_rows(
    spark, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SCHEMA", "split_test")
    landing = tmp_path / "landing" / "customers"
    landing.mkdir(parents=True)
    n = 4000
    big = [row(i) for i in range(1, n + 1)]
    big.insert(3500, list(big[9]))  # an exact duplicate of data row 10, blocks later
    write(landing / "big.csv", big)
    bad = [row(i) for i in range(1, n + 1)]
    bad[3200][6] = "12.345"  # data row 3201 (line 3202): does not fit decimal(12,2)
    bad[3600][2] = "x"  # a second bad row
    write(landing / "bad.csv", bad)
    conflict = [row(i) for i in range(1, n + 1)]
    conflict.insert(3700, row(100, name="Someone else"))  # key and sequence of data row 100
    write(landing / "conflict.csv", conflict)
    quoted = [row(i) for i in range(1, 50)]
    quoted[4][3] = "two\nlines"
    write(landing / "quoted.csv", quoted)

    project = Project.load(spark_project, target="local")
    entity = load_entities(project)["customers"]
    from runner.staging.read import BLOCK, read_files

    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "32768")
    try:
        blocks = read_files(spark, entity, HEADER, [str(landing / "big.csv")], whole=False)
        assert blocks.select(BLOCK).distinct().count() > 5  # really read in many blocks

        db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
        db.upgrade()
        pid = new_process_id()
        db.start_run(pid, "ingest", "local")
        ingest(Invocation.of(project, db, spark), pid, landing=[str(landing.parent)])
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)

    states = {Path(f.path).name: f for f in db.files()}
    assert states["big.csv"].state == "STAGED", states["big.csv"].last_error
    assert states["quoted.csv"].state == "STAGED", states["quoted.csv"].last_error
    assert states["bad.csv"].state == "QUARANTINED"
    assert states["bad.csv"].last_error.startswith(
        "bad.csv: line 3202, column 'balance': \"12.345\" does not fit decimal(12,2)"
    ), states["bad.csv"].last_error
    assert "(1 more bad rows)" in states["bad.csv"].last_error
    assert states["conflict.csv"].state == "QUARANTINED"
    assert states["conflict.csv"].last_error == (
        "conflict.csv: line 3702, column 'AR_H_CHANGE_SEQ': conflicts with line 101: "
        "same key (customer_id=1100) and same sequence, different values"
    )
    db.dispose()

    # The oracle: each good File read with Python's csv module; an exact duplicate is dropped,
    # its first occurrence keeps its number.
    want = []
    for name in ("big.csv", "quoted.csv"):
        with open(landing / name, newline="", encoding="utf-8") as handle:
            records = list(csv.reader(handle))[1:]
        seen = set()
        for number, rec in enumerate(records, start=1):
            if tuple(rec) in seen:
                continue
            seen.add(tuple(rec))
            want.append((name, number, int(rec[2]), rec[3], Decimal(rec[6])))
    lin = lineage_columns()
    got = [
        (r[0], r[1], r[2], r[3], r[4])
        for r in spark.sql(
            f"select `{lin['file_name']}`, `{lin['row_number']}`, customer_id, name, balance "
            "from split_test.customers__staged"
        ).collect()
    ]
    assert sorted(got) == sorted(want)
    assert len(got) == n + 49  # the duplicate dropped
