"""Files as AWS DMS and Debezium write them with their default settings, applied through the
documented commands on local Spark and PostgreSQL, against plain-Python oracles.

- DMS defaults (docs/examples/dms_defaults, Files in landing/dms-defaults): no header row,
  full-load Files without Op, change Files with Op first in date folders, no sequence column
  (ordered by DMS's file names, then the line), on PostgreSQL over three runs (the third: a
  File landing late in an earlier date folder, and a new date folder); with
  timestampColumnName as the sequence and two changes of one key in one transaction; and DMS
  Parquet output.
- Debezium defaults (docs/examples/debezium_defaults, Files in landing/debezium-defaults):
  schema/payload lines with precise decimals (base64), variable-scale decimals, dates, micro
  timestamps and times, zoned timestamps; `null` tombstones and a blank line; deletes whose
  `before` holds only the key; and the same events without the schema, decoded from declared
  encodings.
- Values that cannot be decoded exactly, a headerless line of the wrong length and a name DMS
  does not write are quarantined with file, line and field; the other Files apply.
- Two entities receiving a File of identical bytes: the File of the entity whose model has
  not run stays STAGED after a reconcile, then is COMMITTED with its own marker.

The oracles read the Files themselves (csv, json, base64, pyarrow) and apply the changes in
the order the tools define; they share nothing with the runner.
"""

from __future__ import annotations

import base64
import csv
import json
import shutil
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.oracles import naive
from helpers.project import REPO, ingest_here

pytestmark = pytest.mark.spark

EXAMPLES = REPO / "docs" / "examples"
SAMPLES = REPO / "landing"
DMS_COLUMNS = ("customer_id", "name", "tier", "balance", "updated_at")
PRODUCT_COLUMNS = (
    "id", "name", "price", "weight", "released", "stocked_at", "updated_at", "opens", "sku"
)  # fmt: skip
EMPTY = "2026/03/02/20260302-120000000.csv"  # the same (empty) bytes for two entities


# --- the oracles ---------------------------------------------------------------------------


def dms_place(path: Path) -> tuple[int, str]:
    """DMS's order of Files: the full load's LOAD Files, then change Files by their names."""
    return (0, path.name) if path.name.startswith("LOAD") else (1, path.name)


def dms_changes(
    files: list[Path], columns: tuple[str, ...], timestamp: bool = False
) -> list[tuple[Any, ...]]:
    """(order key, Op, row) for each line of DMS CSV Files without a header row; a LOAD File
    has no Op column. With ``timestamp``, the column after Op is the commit time, which orders
    the changes (ties: the File, then the line)."""
    out = []
    for path in files:
        load = path.name.startswith("LOAD")
        with path.open(newline="") as fh:
            for line, fields in enumerate(csv.reader(fh), start=1):
                op = "I" if load else fields.pop(0)
                ts = fields.pop(0) if timestamp else None
                row = dict(zip(columns, fields, strict=True))
                key = (ts, dms_place(path), line) if timestamp else (dms_place(path), line)
                out.append((key, op, row))
    return out


def apply_changes(changes: list[tuple[Any, ...]], key: str) -> dict[Any, dict]:
    state: dict[Any, dict] = {}
    for _, op, row in sorted(changes, key=lambda c: c[0]):
        if op == "D":
            state.pop(row[key], None)
        else:
            state[row[key]] = row
    return state


def dms_expected(state: dict[Any, dict]) -> dict[int, tuple]:
    return {
        int(k): (
            r["name"] or None,
            r["tier"] or None,
            Decimal(r["balance"]) if r["balance"] not in ("", None) else None,
            naive(r["updated_at"]) if r["updated_at"] else None,
        )
        for k, r in state.items()
    }


def unscaled(b64: str) -> int:
    return int.from_bytes(base64.b64decode(b64), "big", signed=True)


def debezium_value(name: str | None, value: Any, scale: int | None) -> Any:
    """A Debezium value decoded by its logical type, as Python holds it."""
    if value is None:
        return None
    if name == "org.apache.kafka.connect.data.Decimal":
        return Decimal(unscaled(value)).scaleb(-int(scale or 0))
    if name == "io.debezium.data.VariableScaleDecimal":
        return Decimal(unscaled(value["value"])).scaleb(-int(value["scale"]))
    if name == "io.debezium.time.Date":
        return date(1970, 1, 1) + timedelta(days=value)
    if name == "io.debezium.time.MicroTimestamp":
        return datetime(1970, 1, 1) + timedelta(microseconds=value)
    if name == "io.debezium.time.ZonedTimestamp":
        return datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)
    if name == "io.debezium.time.MicroTime":
        moment = datetime(1970, 1, 1) + timedelta(microseconds=value)
        return moment.time().isoformat(timespec="microseconds")
    return value


def debezium_expected(files: list[Path], encodings: dict[str, tuple[str, int | None]]) -> dict:
    """Products after the events of ``files`` in lsn order: tombstones skipped, a delete
    removes the key of its ``before``; values decoded from each line's schema, or from
    ``encodings`` on a line without one."""
    events = []
    for path in files:
        for text in path.read_text().splitlines():
            if text.strip() in ("", "null"):
                continue
            line = json.loads(text)
            payload = line.get("payload", line)
            kinds = dict(encodings)
            if "schema" in line:
                after = next(f for f in line["schema"]["fields"] if f["field"] == "after")
                kinds = {
                    f["field"]: (f.get("name"), int((f.get("parameters") or {}).get("scale", 0)))
                    for f in after["fields"]
                }
            events.append((payload["source"]["lsn"], payload, kinds))
    state: dict[int, tuple] = {}
    for _, payload, kinds in sorted(events, key=lambda e: e[0]):
        if payload["op"] == "d":
            state.pop(payload["before"]["id"], None)
            continue
        after = payload["after"]
        state[after["id"]] = tuple(
            debezium_value(kinds.get(c, (None, None))[0], after[c], kinds.get(c, (None, None))[1])
            for c in PRODUCT_COLUMNS[1:]
        )
    return state


# --- the project ---------------------------------------------------------------------------


def install_example(cli: Any, name: str, rename: dict[str, str] | None = None, **meta: Any) -> None:
    """docs/examples/<name> copied into the project's models (as a user would), optionally as
    a variant: names replaced (``rename``) and meta.cdc settings replaced (``meta``; None
    removes one); columns replaced with ``columns=[...]``."""
    rename = rename or {}
    folder = cli.root / "dbt_project" / "models" / (rename.get(name, name))
    folder.mkdir(parents=True)
    for path in (EXAMPLES / name).iterdir():
        text = path.read_text()
        for old, new in rename.items():
            text = text.replace(old, new)
        target = folder / path.name
        for old, new in rename.items():
            target = target.with_name(target.name.replace(old, new))
        if path.suffix == ".yml" and meta:
            doc = yaml.safe_load(text)
            table = doc["sources"][0]["tables"][0]
            columns = meta.pop("columns", None)
            if columns is not None:
                table["columns"] = [{"name": n, "data_type": t} for n, t in columns]
            for key, value in meta.items():
                if value is None:
                    table["meta"]["cdc"].pop(key, None)
                else:
                    table["meta"]["cdc"][key] = value
            text = yaml.safe_dump(doc, sort_keys=False)
        target.write_text(text)


def copy_sample(cli: Any, sample: str, folder: str) -> Path:
    dest = cli.root / "landing" / folder
    shutil.copytree(SAMPLES / sample, dest)
    return dest


def dms_timestamp_files(folder: Path) -> list[Path]:
    """DMS Files with timestampColumnName=changed_at (otherwise defaults): the column after Op
    (LOAD Files: the first) is the commit time (the load's transfer time in a LOAD File).
    Keys 201 and 203 change twice in one transaction (one commit time, one File)."""
    (folder / "2026" / "03" / "01").mkdir(parents=True)
    files = {
        "LOAD00000001.csv": [
            "2026-02-28 23:00:00.000001,201,Ann,gold,10.00,2026-02-28 22:00:00",
            "2026-02-28 23:00:00.000001,202,Bob,silver,20.00,2026-02-28 22:00:00",
            "2026-02-28 23:00:00.000001,203,Cid,,0.00,2026-02-28 22:00:00",
        ],
        "2026/03/01/20260301-080000000.csv": [
            "U,2026-03-01 07:59:59.123456,201,Ann,gold,11.00,2026-03-01 07:59:59",
            "U,2026-03-01 07:59:59.123456,201,Ann,platinum,12.00,2026-03-01 07:59:59",
            "D,2026-03-01 07:59:59.500000,202,Bob,silver,20.00,2026-02-28 22:00:00",
            "U,2026-03-01 07:59:58.000000,203,Cid,bronze,1.00,2026-03-01 07:59:58",
        ],
        "2026/03/01/20260301-081000000.csv": [
            "U,2026-03-01 08:09:00.000000,203,Cid,silver,2.00,2026-03-01 08:09:00",
            "I,2026-03-01 08:09:00.000000,202,Bob,gold,22.00,2026-03-01 08:09:00",
            "U,2026-03-01 08:09:00.000000,203,Cid,gold,3.00,2026-03-01 08:09:00",
        ],
    }
    out = []
    for name, lines in files.items():
        path = folder / name
        path.write_text("\n".join(lines) + "\n")
        out.append(path)
    (folder / EMPTY).parent.mkdir(parents=True, exist_ok=True)
    (folder / EMPTY).write_bytes(b"")
    return out


def dms_parquet_files(folder: Path) -> tuple[list[Path], dict[int, tuple]]:
    """DMS Parquet output (dataFormat=parquet, includeOpForFullLoad=false): a LOAD File
    without Op, change Files with Op first; the expected table written out by hand."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "2026" / "03" / "01").mkdir(parents=True)
    types = {
        "customer_id": pa.int64(),
        "name": pa.string(),
        "tier": pa.string(),
        "balance": pa.decimal128(12, 2),
        "updated_at": pa.timestamp("us"),
    }

    def write(name: str, rows: list[tuple], op: bool) -> Path:
        fields = ([pa.field("Op", pa.string())] if op else []) + [
            pa.field(n, t) for n, t in types.items()
        ]
        columns = list(zip(*rows, strict=True)) if rows else [[] for _ in fields]
        table = pa.table(
            [pa.array(c, type=f.type) for c, f in zip(columns, fields, strict=True)],
            schema=pa.schema(fields),
        )
        path = folder / name
        pq.write_table(table, path)
        return path

    t = datetime(2026, 3, 1, 8, 0, 0, 123456)
    files = [
        write(
            "LOAD00000001.parquet",
            [(301, "Pia", "gold", Decimal("1.10"), t), (302, "Quin", None, Decimal("-2.00"), t)],
            op=False,
        ),
        write(
            "2026/03/01/20260301-080500000.parquet",
            [
                ("U", 301, "Pia", "platinum", Decimal("5.55"), t + timedelta(minutes=5)),
                ("D", 302, None, None, None, None),
                ("I", 303, "Rey", "silver", Decimal("99999999.99"), t + timedelta(minutes=5)),
                ("U", 303, "Rey", "gold", Decimal("0.01"), t + timedelta(minutes=6)),
            ],
            op=True,
        ),
    ]
    expected = {
        301: ("Pia", "platinum", Decimal("5.55"), t + timedelta(minutes=5)),
        303: ("Rey", "gold", Decimal("0.01"), t + timedelta(minutes=6)),
    }
    return files, expected


# The Files that cannot be applied exactly: name -> (lines, the message's expected part).
def bad_debezium_files(sample: Path, dest: Path) -> dict[str, str]:
    first = json.loads(sample.read_text().splitlines()[0])

    def variant(price: Any = None, scale: str | None = None, stocked: tuple | None = None) -> str:
        line = json.loads(json.dumps(first))
        after_schema = next(f for f in line["schema"]["fields"] if f["field"] == "after")
        for f in after_schema["fields"]:
            if f["field"] == "price" and scale is not None:
                f["parameters"]["scale"] = scale
            if f["field"] == "stocked_at" and stocked is not None:
                f["name"] = stocked[0]
        after = line["payload"]["after"]
        after["id"] = 900
        if price is not None:
            after["price"] = price
        if stocked is not None:
            after["stocked_at"] = stocked[1]
        return json.dumps(line)

    good = json.dumps(first)
    delete = next(
        json.loads(t) for t in sample.read_text().splitlines() if '"op":"d"' in t
    )  # a delete whose before holds only the key (REPLICA IDENTITY DEFAULT) ...
    delete["payload"]["before"] = {"name": "no key here"}  # ... and one without the key
    cases = {
        "bad-delete.json": (
            ["null", json.dumps(delete)],
            "line 2, field 'before.id': NULL in a key",
        ),
        "bad-base64.json": (
            [good, variant(price="@@not-base64")],
            "line 2, field 'after.price': \"@@not-base64\" is not a valid "
            "org.apache.kafka.connect.data.Decimal (scale 2)",
        ),
        "bad-scale.json": (
            # 12345 at scale 3 is 12.345: decimal(10,2) cannot hold it unchanged
            [variant(price=base64.b64encode((12345).to_bytes(2, "big")).decode(), scale="3")],
            "line 1, field 'after.price': \"12.345\" does not fit decimal(10,2) unchanged",
        ),
        "bad-nanos.json": (
            [
                good,
                "null",
                variant(stocked=("io.debezium.time.NanoTimestamp", 1772352000123456789)),
            ],
            "line 3, field 'after.stocked_at': \"2026-03-01 08:00:00.123456789\" does not fit "
            "timestamp unchanged",
        ),
    }
    for name, (lines, _) in cases.items():
        (dest / name).write_text("\n".join(lines) + "\n")
    return {name: message for name, (_, message) in cases.items()}


# --- the test ------------------------------------------------------------------------------


def shown(rows: list[dict], key: str, columns: tuple[str, ...], kinds: dict[str, Any]) -> dict:
    """`dbt show` rows (JSON: floats, ISO strings) as Python values of the columns' kinds."""

    def value(column: str, v: Any) -> Any:
        if v is None:
            return None
        kind = kinds.get(column)
        if kind is Decimal:
            return Decimal(str(v))
        if kind is datetime:
            return naive(v)
        if kind is date:
            return date.fromisoformat(str(v)[:10])
        return v

    return {r[key]: tuple(value(c, r[c]) for c in columns) for r in rows}


def status(cli: Any) -> dict[str, dict]:
    files = json.loads(cli.runner("status", "--json").stdout)
    return {str(Path(f["path"]).relative_to(cli.root / "landing")): f for f in files}


@pytest.mark.parametrize("target", ["local", "postgres"])
def test_files_as_dms_and_debezium_write_them_by_default_apply_exactly(
    cli_project: Any, target: str
) -> None:
    cli = cli_project(target)
    install_example(cli, "dms_defaults")
    install_example(cli, "debezium_defaults")
    install_example(
        cli,
        "dms_defaults",
        rename={"dms_defaults": "dms_timestamps", "dms_customers": "dms_ts_customers"},
        landing="dms-timestamps/customers/**/*.csv",
        sequence={"column": "changed_at", "ties": "line"},
        columns=[
            ("Op", "string"), ("changed_at", "timestamp"), ("customer_id", "bigint"),
            ("name", "string"), ("tier", "string"), ("balance", "decimal(12,2)"),
            ("updated_at", "timestamp"),
        ],
    )  # fmt: skip
    install_example(
        cli,
        "dms_defaults",
        rename={"dms_defaults": "dms_parquet", "dms_customers": "dms_pq_customers"},
        landing="dms-parquet/customers/**/*.parquet",
        format="parquet",
        csv=None,
    )
    install_example(
        cli,
        "debezium_defaults",
        rename={"debezium_defaults": "debezium_plain", "products": "plain_products"},
        landing="debezium-plain/products/*.json",
        debezium={
            "fields": {"op": "op", "lsn": "source.lsn"},
            "envelope": "plain",
            "encodings": {
                "price": {"name": "org.apache.kafka.connect.data.Decimal", "scale": 2},
                "weight": "io.debezium.data.VariableScaleDecimal",
                "released": "io.debezium.time.Date",
                "stocked_at": "io.debezium.time.MicroTimestamp",
                "opens": "io.debezium.time.MicroTime",
            },
        },
    )
    dms = copy_sample(cli, "dms-defaults", "dms-defaults") / "customers"
    dms_files = sorted(dms.rglob("*.csv"), key=dms_place)
    (dms / EMPTY).write_bytes(b"")
    (dms / "2026/03/02/20260302-130000000.csv").write_text("U,101,Ada,gold,1.00\n")
    (dms / "customers-extra.csv").write_text("I,999,Nobody,gold,1.00,2026-03-01 00:00:00\n")
    ts_files = dms_timestamp_files(cli.root / "landing" / "dms-timestamps" / "customers")
    pq_files, pq_expected = dms_parquet_files(cli.root / "landing" / "dms-parquet" / "customers")
    products = copy_sample(cli, "debezium-defaults", "debezium-defaults") / "products"
    product_files = sorted(products.iterdir())
    bad = bad_debezium_files(product_files[0], products)
    plain_files = plain_debezium_from(product_files, cli.root / "landing" / "debezium-plain")

    # 1. Stage everything; only A's model (dms_customers) is applied, then reconciled.
    cli.runner("ingest", ok=(1,))  # Files quarantined: exit 1
    cli.dbt("build", "--select", "dms_customers_current")
    # Which models apply which entity comes from dbt's manifest; without one, from a parse.
    (cli.root / "dbt_project" / "target" / "manifest.json").unlink()
    cli.runner("reconcile")
    seen = status(cli)
    a_empty, b_empty = (
        seen[f"dms-defaults/customers/{EMPTY}"],
        seen[f"dms-timestamps/customers/{EMPTY}"],
    )
    assert a_empty["content_hash"] == b_empty["content_hash"]  # identical bytes
    assert a_empty["state"] == "COMMITTED"
    assert [m["target_table"] for m in a_empty["markers"]] == [
        f"{cli.schema}.dms_customers_current"
    ]
    assert b_empty["state"] == "STAGED", b_empty  # its entity's model has not run yet

    # 2. The documented run applies the rest.
    cli.runner("run", ok=(0, 1))
    seen = status(cli)
    b_empty = seen[f"dms-timestamps/customers/{EMPTY}"]
    assert b_empty["state"] == "COMMITTED"
    assert [m["target_table"] for m in b_empty["markers"]] == [
        f"{cli.schema}.dms_ts_customers_current"
    ]
    quarantined = {p: f["last_error"] for p, f in seen.items() if f["state"] == "QUARANTINED"}
    assert set(quarantined) == {
        "dms-defaults/customers/2026/03/02/20260302-130000000.csv",
        "dms-defaults/customers/customers-extra.csv",
        *(f"debezium-defaults/products/{n}" for n in bad),
    }, quarantined
    assert (
        "line 1, wrong number of fields (the File has no header row"
        in quarantined["dms-defaults/customers/2026/03/02/20260302-130000000.csv"]
    )
    assert (
        "not a name AWS DMS gives its Files"
        in quarantined["dms-defaults/customers/customers-extra.csv"]
    )
    for name, message in bad.items():
        assert message in quarantined[f"debezium-defaults/products/{name}"], (name, quarantined)
    others = {p: f["state"] for p, f in seen.items() if p not in quarantined}
    assert set(others.values()) == {"COMMITTED"}, others

    kinds = {"balance": Decimal, "updated_at": datetime}
    table = shown(
        cli.table(f"{cli.schema}.dms_customers_current"), "customer_id", DMS_COLUMNS[1:], kinds
    )
    assert table == dms_expected(apply_changes(dms_changes(dms_files, DMS_COLUMNS), "customer_id"))
    # 3. On PostgreSQL, a third run: a File landing late in an earlier date folder (its change
    # of 106 is older than the one applied from 2026/03/02; its others apply) and one in a new
    # date folder. (Local Spark: a late File across runs is test_source_order's MySQL case.)
    if target == "postgres":
        _third_dms_run(cli, dms, dms_files, kinds)
    table = shown(
        cli.table(f"{cli.schema}.dms_ts_customers_current"), "customer_id", DMS_COLUMNS[1:], kinds
    )
    expected = dms_expected(
        apply_changes(dms_changes(ts_files, DMS_COLUMNS, timestamp=True), "customer_id")
    )
    assert table == expected
    assert expected[201][1] == "platinum" and expected[203][1] == "gold"  # the later line won
    table = shown(
        cli.table(f"{cli.schema}.dms_pq_customers_current"), "customer_id", DMS_COLUMNS[1:], kinds
    )
    assert table == pq_expected
    _debezium_tables_are_their_oracles(cli, product_files, plain_files)


def _third_dms_run(cli: Any, dms: Path, dms_files: list[Path], kinds: dict) -> None:
    late = dms / "2026/03/01/20260301-235959000.csv"
    late.write_text(
        "U,106,Margaret Hamilton,bronze,1.00,2026-03-01 23:59:59\n"
        "U,103,Grace Hopper,platinum,15.25,2026-03-01 23:59:59\nD,101,,,,\n"
    )
    (dms / "2026/03/03").mkdir()
    later = dms / "2026/03/03/20260303-070000000.csv"
    later.write_text(
        "I,101,Ada Lovelace,gold,131.00,2026-03-03 06:59:00\n"
        "U,102,Brian Kernighan,gold,6.00,2026-03-03 06:59:30\n"
    )
    cli.runner("run", ok=(0, 1))
    table = shown(
        cli.table(f"{cli.schema}.dms_customers_current"), "customer_id", DMS_COLUMNS[1:], kinds
    )
    dms_files = sorted([*dms_files, late, later], key=dms_place)
    expected = dms_expected(apply_changes(dms_changes(dms_files, DMS_COLUMNS), "customer_id"))
    assert table == expected
    assert expected[106][1] == "platinum" and expected[103][1] == "platinum"  # late: one stale


def _debezium_tables_are_their_oracles(
    cli: Any, product_files: list[Path], plain_files: list[Path]
) -> None:
    product_kinds = {
        "price": Decimal, "weight": Decimal, "released": date, "stocked_at": datetime,
        "updated_at": datetime,
    }  # fmt: skip
    expected = debezium_expected(product_files, {})
    assert {k: v[1] for k, v in expected.items()} == {
        1: Decimal("120.00"),
        2: Decimal("-0.01"),
        3: Decimal("0.00"),
        4: Decimal("99999999.99"),
        5: Decimal("-99999999.99"),
    }  # the sample as meant: positive, negative, zero, both extremes of decimal(10,2)
    table = shown(
        cli.table(f"{cli.schema}.products_current"), "id", PRODUCT_COLUMNS[1:], product_kinds
    )
    assert table == expected
    table = shown(
        cli.table(f"{cli.schema}.plain_products_current"), "id", PRODUCT_COLUMNS[1:], product_kinds
    )
    encodings = {
        "price": ("org.apache.kafka.connect.data.Decimal", 2),
        "weight": ("io.debezium.data.VariableScaleDecimal", None),
        "released": ("io.debezium.time.Date", None),
        "stocked_at": ("io.debezium.time.MicroTimestamp", None),
        "opens": ("io.debezium.time.MicroTime", None),
        "updated_at": ("io.debezium.time.ZonedTimestamp", None),  # ISO text, a plain cast
    }
    assert table == debezium_expected(plain_files, encodings) == expected


def plain_debezium_from(files: list[Path], dest: Path) -> list[Path]:
    """The sample's events without the schema (schemas.enable=false), tombstones kept."""
    dest = dest / "products"
    dest.mkdir(parents=True)
    out = []
    for path in files:
        lines = [
            text if text.strip() in ("", "null") else json.dumps(json.loads(text)["payload"])
            for text in path.read_text().splitlines()
        ]
        (dest / path.name).write_text("\n".join(lines) + "\n")
        out.append(dest / path.name)
    return out


ENCODED = """
version: 2
sources:
  - name: encoded
    schema: "{{ target.schema }}"
    tables:
      - name: encoded_values
        meta:
          cdc:
            landing: "encoded/*.json"
            format: debezium
            keys: [id]
            sequence: lsn
            debezium:
              envelope: plain
              fields: {op: op, lsn: source.lsn}
              encodings:
                big: {name: org.apache.kafka.connect.data.Decimal, scale: 10}
                small: {name: org.apache.kafka.connect.data.Decimal, scale: 0}
                variable: io.debezium.data.VariableScaleDecimal
                day: io.debezium.time.Date
                day_connect: org.apache.kafka.connect.data.Date
                day_number: io.debezium.time.Date
                at_ms: io.debezium.time.Timestamp
                at_us: io.debezium.time.MicroTimestamp
                at_ns: io.debezium.time.NanoTimestamp
                at_connect: org.apache.kafka.connect.data.Timestamp
                clock_ms: io.debezium.time.Time
                clock_us: io.debezium.time.MicroTime
                clock_ns: io.debezium.time.NanoTime
                clock_connect: org.apache.kafka.connect.data.Time
                span: io.debezium.time.MicroDuration
                doc: io.debezium.data.Json
        columns:
          - {name: op, data_type: string}
          - {name: lsn, data_type: bigint}
          - {name: id, data_type: int}
          - {name: big, data_type: "decimal(38,10)"}
          - {name: small, data_type: "decimal(5,0)"}
          - {name: variable, data_type: "decimal(20,5)"}
          - {name: day, data_type: date}
          - {name: day_connect, data_type: date}
          - {name: day_number, data_type: int}
          - {name: at_ms, data_type: timestamp}
          - {name: at_us, data_type: timestamp}
          - {name: at_ns, data_type: timestamp}
          - {name: at_connect, data_type: timestamp}
          - {name: clock_ms, data_type: string}
          - {name: clock_us, data_type: string}
          - {name: clock_ns, data_type: string}
          - {name: clock_connect, data_type: string}
          - {name: span, data_type: bigint}
          - {name: doc, data_type: string}
"""


def b64(unscaled_value: int) -> str:
    size = max(1, (unscaled_value.bit_length() + 8) // 8)
    return base64.b64encode(unscaled_value.to_bytes(size, "big", signed=True)).decode()


def test_every_debezium_encoding_is_decoded_exactly(
    spark: Any, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each logical type, at its edges (the largest decimal(38,10) both signs, epoch-negative
    times, nanoseconds that fit), staged from lines without a schema; expectations computed
    with Python's own integers, dates and timedeltas."""
    from runner.project import Project

    monkeypatch.setenv("CDC_SCHEMA", "encoded_test")
    declared = spark_project / "dbt_project" / "models" / "staging" / "test_encoded.yml"
    declared.write_text(ENCODED)
    largest = 10**38 - 1
    epoch = datetime(1970, 1, 1)
    rows = {
        1: dict(big=largest, small=0, variable={"scale": 5, "value": -1234567891}, day=20513,
                day_connect=0, day_number=20513, at_ms=1772352000123, at_us=1772352000123456,
                at_ns=1772352000123456000, at_connect=-1, clock_ms=45296789,
                clock_us=86399999999, clock_ns=45296789012345, clock_connect=0,
                span=-1500000, doc='{"a": [1, 2]}'),
        2: dict(big=-largest, small=-99999, variable={"scale": 0, "value": 7}, day=-1,
                day_connect=-719162, day_number=-1, at_ms=0, at_us=-1, at_ns=-1000,
                at_connect=253402300799999, clock_ms=0, clock_us=0, clock_ns=1, clock_connect=999,
                span=0, doc=None),
        3: dict(big=-1, small=99999, variable={"scale": 2, "value": 0}, day=None,
                day_connect=None, day_number=None, at_ms=None, at_us=None, at_ns=None,
                at_connect=None, clock_ms=None, clock_us=None, clock_ns=None, clock_connect=None,
                span=None, doc="null"),
    }  # fmt: skip

    def encode(name: str, value: Any) -> Any:
        if value is None:
            return None
        if name in ("big", "small"):
            return b64(value)
        if name == "variable":
            return {"scale": value["scale"], "value": b64(value["value"])}
        return value

    lines = [
        json.dumps(
            {
                "op": "c",
                "ts_ms": 1000 + key,
                "source": {"lsn": key},
                "before": None,
                "after": {"id": key, **{k: encode(k, v) for k, v in values.items()}},
            }
        )
        for key, values in rows.items()
    ]
    landing = tmp_path / "landing"
    (landing / "encoded").mkdir(parents=True)
    # a Kafka tombstone and a blank line between the events: skipped, and counted
    (landing / "encoded" / "values.json").write_text(
        "\n".join([*lines[:2], "null", "", *lines[2:]]) + "\n"
    )

    def clock(count: int | None, per_second: int) -> str | None:
        if count is None:
            return None
        seconds, fraction = divmod(count, per_second)
        digits = len(str(per_second)) - 1
        h, rest = divmod(seconds, 3600)
        return f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}.{fraction:0{digits}d}"

    def expected(v: dict) -> dict:
        def at(count: int | None, per_second: int) -> datetime | None:
            if count is None:
                return None
            return epoch + timedelta(microseconds=count * 1_000_000 // per_second)

        def day(count: int | None) -> date | None:
            return None if count is None else date(1970, 1, 1) + timedelta(days=count)

        return {
            "big": Decimal(v["big"]).scaleb(-10, Context(prec=60)),  # 38 digits exactly
            "small": Decimal(v["small"]),
            "variable": Decimal(v["variable"]["value"]).scaleb(-v["variable"]["scale"]),
            "day": day(v["day"]),
            "day_connect": day(v["day_connect"]),
            "day_number": v["day_number"],
            "at_ms": at(v["at_ms"], 1000),
            "at_us": at(v["at_us"], 1_000_000),
            "at_ns": at(v["at_ns"], 1_000_000_000),
            "at_connect": at(v["at_connect"], 1000),
            "clock_ms": clock(v["clock_ms"], 1000),
            "clock_us": clock(v["clock_us"], 1_000_000),
            "clock_ns": clock(v["clock_ns"], 1_000_000_000),
            "clock_connect": clock(v["clock_connect"], 1000),
            "span": v["span"],
            "doc": v["doc"],
        }

    try:
        project = Project.load(spark_project, target="local")
        db = ingest_here(project, spark, tmp_path / "audit.db", landing, "encoded_values")
        (rec,) = db.files()
        assert rec.state == "STAGED", rec.last_error
        staged_event = [e for e in db.events(rec.id) if e["to_state"] == "STAGED"]
        assert [e["detail"] for e in staged_event] == [
            "2 Kafka tombstone(s) skipped (blank or null lines)"
        ]
        staged = spark.sql("select * from encoded_test.encoded_values").collect()
        got = {r["id"]: {k: r[k] for k in rows[1]} for r in staged}
        want = {key: expected(values) for key, values in rows.items()}
        differ = {
            (k, c): (got[k][c], want[k][c])
            for k in want
            for c in want[k]
            if got[k][c] != want[k][c]
        }
        assert not differ, differ
        assert got[1]["clock_ns"] == "12:34:56.789012345" and got[2]["at_ms"] == epoch
    finally:
        declared.unlink()
