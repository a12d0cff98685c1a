"""JSON lines, Parquet and gzip-compressed Files: staged rows equal what was written, with the
Debezium operation codes normalised, and broken Files quarantined with their line or row."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.project import ingest_here

from runner.contract import lineage_columns
from runner.project import Project

pytestmark = pytest.mark.spark

COLUMNS = """
          - {name: op, data_type: string}
          - {name: seq, data_type: bigint}
          - {name: order_id, data_type: bigint}
          - {name: amount, data_type: "decimal(10,2)"}
          - {name: placed_at, data_type: timestamp}
          - {name: note, data_type: string}
"""
SOURCES = (
    """
version: 2
sources:
  - name: cdc_formats
    schema: "{{ target.schema }}"
    tables:
"""
    + "".join(
        f"""
      - name: orders_{fmt}
        identifier: orders_{fmt}__staged
        meta:
          cdc:
            landing: "orders_{fmt}/*"
            format: {"csv" if fmt == "csvgz" else fmt}
            keys: [order_id]
            sequence: seq
            operation: {{column: op, preset: debezium}}
        columns:{COLUMNS}"""
        for fmt in ("json", "parquet", "csvgz")
    )
    + "".join(  # the same Files, with a field the declaration lacks: added to the staging table
        f"""
      - name: orders_{fmt}_grows
        identifier: orders_{fmt}_grows__staged
        meta:
          cdc:
            landing: "orders_{fmt}_grows/*"
            format: {fmt}
            keys: [order_id]
            sequence: seq
            operation: {{column: op, preset: debezium}}
            on_schema_change: append_new_columns
        columns:{COLUMNS}"""
        for fmt in ("json", "parquet")
    )
)

ROWS = [  # op, seq, order_id, amount, placed_at, note
    ("r", 1, 1, Decimal("12.50"), datetime(2026, 3, 1, 10, 0, 0, 123456), 'héllo, "x"'),
    ("c", 3, 2, Decimal("0.99"), datetime(2026, 3, 1, 10, 5), None),
    ("u", 2, 1, Decimal("13.00"), datetime(2026, 3, 1, 10, 1), "again"),
    ("d", 4, 2, None, None, None),
]
OPS = {"r": "I", "c": "I", "u": "U", "d": "D"}


def _json_lines(rows: list[tuple]) -> str:
    keys = ["op", "seq", "order_id", "amount", "placed_at", "note"]
    out = []
    for r in rows:
        rec = dict(zip(keys, r, strict=True))
        rec["amount"] = str(rec["amount"]) if rec["amount"] is not None else None
        rec["placed_at"] = rec["placed_at"].isoformat(sep=" ") if rec["placed_at"] else None
        out.append(json.dumps(rec, ensure_ascii=False))
    return "\n".join(out) + "\n"


def _csv(rows: list[tuple]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["op", "seq", "order_id", "amount", "placed_at", "note"])
    for r in rows:
        w.writerow(
            [
                "" if v is None else (v.isoformat(sep=" ") if isinstance(v, datetime) else v)
                for v in r
            ]
        )
    return buf.getvalue()


def _parquet(
    path: Path, rows: list[tuple], drop: str | None = None, points: list | None = None
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {
        "op": pa.array([r[0] for r in rows], pa.string()),
        "seq": pa.array([r[1] for r in rows], pa.int64()),
        "order_id": pa.array([r[2] for r in rows], pa.int64()),
        "amount": pa.array([r[3] for r in rows], pa.decimal128(10, 2)),
        "placed_at": pa.array([r[4] for r in rows], pa.timestamp("us")),
        "note": pa.array([r[5] for r in rows], pa.string()),
    }
    if drop:
        cols.pop(drop)
    if points is not None:  # a column the declaration lacks, typed int64
        cols["points"] = pa.array(points, pa.int64())
    pq.write_table(pa.table(cols), path)


def test_json_parquet_and_gzip_files_are_staged_and_broken_ones_quarantined(
    spark, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SCHEMA", "formats_test")
    declared = spark_project / "dbt_project" / "models" / "staging" / "test_formats.yml"
    declared.write_text(SOURCES)
    try:
        project = Project.load(spark_project, target="local")
        landing = tmp_path / "landing"
        for fmt in ("json", "parquet", "csvgz", "json_grows", "parquet_grows"):
            (landing / f"orders_{fmt}").mkdir(parents=True)
        # A field the declaration lacks, from line 2 on: quarantined by default (fail) with its
        # line; added to the staging table under append_new_columns (a string from JSON, the
        # Parquet type from Parquet), NULL where a line lacks it.
        lines = _json_lines(ROWS[:3]).splitlines()
        lines[1] = lines[1][:-1] + ', "coupon": "SPRING"}'
        lines[2] = lines[2][:-1] + ', "coupon": 5}'
        (landing / "orders_json" / "extra.json").write_text("\n".join(lines) + "\n")
        (landing / "orders_json_grows" / "a.json").write_text("\n".join(lines) + "\n")
        _parquet(landing / "orders_parquet_grows" / "a.parquet", ROWS, points=[1, None, 3, 4])
        (landing / "orders_json" / "a.json").write_text(_json_lines(ROWS[:2]), encoding="utf-8")
        with gzip.open(landing / "orders_json" / "b.json.gz", "wt", encoding="utf-8") as fh:
            fh.write(_json_lines(ROWS[2:]))
        (landing / "orders_json" / "broken.json").write_text(
            _json_lines(ROWS[:1]) + '{"op": "c", "seq": 9, \n'
        )
        _parquet(landing / "orders_parquet" / "a.parquet", ROWS)
        _parquet(landing / "orders_parquet" / "missing.parquet", ROWS, drop="note")
        # Footer intact (pyarrow reads the header), data pages garbled: only Spark's read fails.
        many = [(r[0], n, n, r[3], r[4], f"note {n}" * 20) for n, r in enumerate(ROWS * 500)]
        _parquet(landing / "orders_parquet" / "corrupt.parquet", many)
        data = bytearray((landing / "orders_parquet" / "corrupt.parquet").read_bytes())
        for i in range(8, len(data) // 2):
            data[i] = 0xA5
        (landing / "orders_parquet" / "corrupt.parquet").write_bytes(bytes(data))
        with gzip.open(landing / "orders_csvgz" / "a.csv.gz", "wt", encoding="utf-8") as fh:
            fh.write(_csv(ROWS))

        db = ingest_here(
            project,
            spark,
            tmp_path / "audit.db",
            landing,
            "orders_json",
            "orders_parquet",
            "orders_csvgz",
            "orders_json_grows",
            "orders_parquet_grows",
        )
        states = {Path(f.path).parent.name + "/" + Path(f.path).name: f for f in db.files()}
        extra = states["orders_json/extra.json"]
        assert extra.state == "QUARANTINED"
        assert extra.last_error.startswith(
            "extra.json: line 2, field 'coupon': not declared for entity 'orders_json'"
        ), extra.last_error
        for name in ("orders_json_grows/a.json", "orders_parquet_grows/a.parquet"):
            assert states[name].state == "STAGED", (name, states[name].last_error)
        grown = {
            r["order_id"] * 10 + r["seq"]: r["coupon"]
            for r in spark.sql("select * from formats_test.orders_json_grows__staged").collect()
        }
        assert grown == {11: None, 23: "SPRING", 12: "5"}, grown
        typed = spark.table("formats_test.orders_parquet_grows__staged").schema["points"]
        assert typed.dataType.simpleString() == "bigint", typed
        points = sorted(
            (r["seq"], r["points"])
            for r in spark.sql("select * from formats_test.orders_parquet_grows__staged").collect()
        )
        assert points == [(1, 1), (2, 3), (3, None), (4, 4)], points
        states = {k.split("/", 1)[1]: v for k, v in states.items() if "_grows" not in k}
        assert states["broken.json"].state == "QUARANTINED"
        assert "broken.json: line 2, not a valid JSON object" in states["broken.json"].last_error
        assert states["missing.parquet"].state == "QUARANTINED"
        assert "column 'note': declared column missing" in states["missing.parquet"].last_error
        # Staged with a.parquet in one read, it broke the read; alone, it is quarantined.
        assert states["corrupt.parquet"].state == "QUARANTINED"
        assert "corrupt.parquet: cannot be read" in states["corrupt.parquet"].last_error
        for name in ("a.json", "b.json.gz", "a.parquet", "a.csv.gz"):
            assert states[name].state == "STAGED", (name, states[name].last_error)

        lin = lineage_columns()
        expected_by_file = {
            "a.json": ROWS[:2],
            "b.json.gz": ROWS[2:],
            "a.parquet": ROWS,
            "a.csv.gz": ROWS,
        }
        for fmt, files in (
            ("json", ["a.json", "b.json.gz"]),
            ("parquet", ["a.parquet"]),
            ("csvgz", ["a.csv.gz"]),
        ):
            got = sorted(
                (
                    r[lin["file_name"]],
                    r[lin["row_number"]],
                    r[lin["operation"]],
                    r["seq"],
                    r["order_id"],
                    r["amount"],
                    r["placed_at"],
                    r["note"],
                )
                for r in spark.sql(f"select * from formats_test.orders_{fmt}__staged").collect()
            )
            want = sorted(
                (name, n, OPS[r[0]], r[1], r[2], r[3], r[4], r[5])
                for name in files
                for n, r in enumerate(expected_by_file[name], start=1)
            )
            assert got == want, fmt
        db.dispose()
    finally:
        declared.unlink()
