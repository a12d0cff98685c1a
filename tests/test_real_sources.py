"""Files as AWS DMS and Debezium write them with their default settings, applied through the
documented commands on local Spark and PostgreSQL, against plain-Python oracles.

- DMS defaults (docs/examples/dms_defaults, Files in landing/dms-defaults): no header row,
  full-load Files without Op, change Files with Op first in date folders, no sequence column
  (ordered by DMS's file names, then the line); with timestampColumnName as the sequence and
  two changes of one key in one transaction; and DMS Parquet output.
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
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.oracles import naive
from helpers.project import REPO

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

    product_kinds = {
        "price": Decimal, "weight": Decimal, "released": date, "stocked_at": datetime,
        "updated_at": datetime,
    }  # fmt: skip
    expected = debezium_expected(product_files, {})
    assert {k: v[1] for k, v in expected.items()} == {
        1: Decimal("120.00"),
        3: Decimal("1.10"),
        5: Decimal("-99999999.99"),
        2: Decimal("19.90"),
    }  # the oracle decodes what the sample meant: positive, zero, the extremes, re-created
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
