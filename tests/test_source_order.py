"""Order as a source defines it, through the documented run on local Spark and PostgreSQL
against a plain-Python fold of the Files.

Debezium's MySQL connector (docs/examples/debezium_mysql): events ordered by binlog file,
position and row. The Files hold a snapshot (op r, one shared position), changes across a
binlog rotation in the middle of a File (positions start again in the new file), a multi-row
event (one position, rows 0..2), an event of an earlier binlog file arriving in a later File,
and the rotation from mysql-bin.999999 to mysql-bin.1000000 (by number, not as text). The
current state and the change-log history (versions in binlog order, each closed by the next
event of its key) both follow that order."""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import pytest
import yaml
from helpers.project import REPO

pytestmark = pytest.mark.spark

EXAMPLE = REPO / "docs" / "examples" / "debezium_mysql"
TOPIC = "dbserver1.inventory.customers"


def event(op: str, key: int, name: str | None, file: str, pos: int, row: int, ts: int) -> dict:
    """One change event as the MySQL connector writes it with schemas.enable=false."""
    image = None if name is None else {"id": key, "first_name": name, "email": f"{name}@x.org"}
    before = {"id": key, "first_name": None, "email": None} if op in ("u", "d") else None
    return {
        "before": before,
        "after": None if op == "d" else image,
        "source": {
            "version": "2.7.3.Final", "connector": "mysql", "name": "dbserver1", "ts_ms": ts,
            "snapshot": "true" if op == "r" else "false", "db": "inventory", "sequence": None,
            "table": "customers", "server_id": 223344, "gtid": None, "file": file, "pos": pos,
            "row": row, "thread": None if op == "r" else 7, "query": None,
        },
        "op": op,
        "ts_ms": ts + 5,
        "transaction": None,
    }  # fmt: skip


BIN3, BIN4 = "mysql-bin.000003", "mysql-bin.000004"
FILES = {  # (name, run): events in the order the sink wrote them
    (f"{TOPIC}+0+0000000000.json", 1): [
        event("r", k, f"snap{k}", BIN3, 154, 0, 1000 + k) for k in (1001, 1002, 1003, 1004)
    ],
    (f"{TOPIC}+0+0000000004.json", 1): [
        event("u", 1001, "ann", BIN3, 800, 0, 2000),
        event("d", 1002, None, BIN3, 900, 0, 2001),
        event("u", 1003, "cy", BIN3, 1200, 0, 2002),  # one UPDATE of three rows
        event("u", 1004, "dee", BIN3, 1200, 1, 2002),
        event("c", 1005, "eve", BIN3, 1200, 2, 2002),
        event("u", 1001, "ann-rotated", BIN4, 154, 0, 2100),  # the binlog rotated here
        event("u", 1003, "cy-rotated", BIN4, 230, 0, 2101),
    ],
    (f"{TOPIC}+0+0000000011.json", 2): [
        event("u", 1004, "dee-4", BIN4, 500, 0, 2200),
        event("u", 1001, "ann-late", BIN3, 5000, 0, 2050),  # an older binlog file, delivered late
        event("u", 1005, "eve-999999", "mysql-bin.999999", 9000, 0, 3000),
        event("u", 1005, "eve-1000000", "mysql-bin.1000000", 4, 0, 3001),
        event("c", 1006, "fay", "mysql-bin.1000000", 90, 0, 3002),
    ],
}


def in_order(files: list[tuple[str, list[dict]]], order: Any) -> list[dict]:
    """Every event of ``files``, sorted by ``order``, then File and line."""
    events = [(order(e), i, j, e) for i, (_, es) in enumerate(files) for j, e in enumerate(es)]
    return [e for *_, e in sorted(events, key=lambda t: t[:3])]


def fold(files: list[tuple[str, list[dict]]], order: Any) -> dict[int, str]:
    """id -> first_name after the events, sorted by ``order`` (then File and line)."""
    now: dict[int, str] = {}
    for e in in_order(files, order):
        if e["op"] == "d":
            now.pop(e["before"]["id"], None)
        else:
            now[e["after"]["id"]] = e["after"]["first_name"]
    return now


def history(files: list[tuple[str, list[dict]]]) -> dict[int, list[tuple[str, bool]]]:
    """id -> its versions in binlog order: (first_name, open), a version closed by the next
    event of its id (a change or a delete), the last one open unless a delete follows it."""
    by_key: dict[int, list[dict]] = {}
    for e in in_order(files, binlog):
        by_key.setdefault((e["after"] or e["before"])["id"], []).append(e)
    out: dict[int, list[tuple[str, bool]]] = {}
    for key, es in by_key.items():
        out[key] = [
            (e["after"]["first_name"], n == len(es) - 1) for n, e in enumerate(es) if e["op"] != "d"
        ]
    return out


def versions(rows: list[dict]) -> dict[int, list[tuple[str, bool]]]:
    """id -> its history rows by valid-from: (first_name, open); each closed one ends where the
    id's next version begins, when there is one."""
    out: dict[int, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["_cdc_valid_from"]):
        out.setdefault(int(r["id"]), []).append(r)
    for rs in out.values():
        for a, b in zip(rs, rs[1:], strict=False):
            assert a["_cdc_valid_to"] is not None and a["_cdc_valid_to"] <= b["_cdc_valid_from"]
    return {k: [(r["first_name"], r["_cdc_valid_to"] is None) for r in rs] for k, rs in out.items()}


def binlog(e: dict) -> tuple:
    """MySQL's order: the binlog file's number, the position, the row; then ts_ms."""
    s = e["source"]
    number = int(re.search(r"(\d+)$", s["file"]).group(1))  # type: ignore[union-attr]
    return (number, s["pos"], s["row"], e["ts_ms"])


@pytest.mark.parametrize("target", ["postgres", "local"])
def test_mysql_binlog_positions_order_changes_across_files_and_rotations(
    cli_project: Any, target: str
) -> None:
    cli = cli_project(target)
    models = cli.root / "dbt_project" / "models" / "debezium_mysql"
    shutil.copytree(EXAMPLE, models)  # as a user installs the example
    landing = cli.root / "landing" / "debezium-mysql" / "customers"
    landing.mkdir(parents=True)
    written: list[tuple[str, list[dict]]] = []
    for run in (1, 2):
        for (name, when), events in FILES.items():
            if when == run:
                (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))
                written.append((name, events))
        cli.runner("run")
        rows = cli.table("{{ ref('mysql_customers_current') }}")
        got = {int(r["id"]): r["first_name"] for r in rows}
        assert got == fold(written, binlog), (run, got)
        assert versions(cli.table("{{ ref('mysql_customers_history') }}")) == history(written)
    # The scenario tells the orders apart: by position alone, or the file name as text,
    # another customer wins.
    everything = [(n, es) for (n, _), es in FILES.items()]
    for wrong in (
        lambda e: (e["source"]["pos"], e["source"]["row"], e["ts_ms"]),
        lambda e: (e["source"]["file"], e["source"]["pos"], e["source"]["row"], e["ts_ms"]),
    ):
        assert fold(everything, wrong) != fold(everything, binlog)


def sqlserver_event(
    op: str, key: int, name: str | None, commit: int, change: int, serial: int
) -> dict:
    """One change event as the SQL Server connector writes it (schemas.enable=false): LSNs as
    fixed-width hexadecimal text."""

    def lsn(n: int) -> str:
        return f"00000027:{n:08x}:0003"

    image = None if name is None else {"id": key, "first_name": name, "email": f"{name}@x.org"}
    return {
        "before": {"id": key, "first_name": None, "email": None} if op in ("u", "d") else None,
        "after": None if op == "d" else image,
        "source": {
            "version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
            "ts_ms": 1000 + change, "snapshot": "false", "db": "testDB", "sequence": None,
            "schema": "dbo", "table": "customers", "change_lsn": lsn(change),
            "commit_lsn": lsn(commit), "event_serial_no": serial,
        },
        "op": op,
        "ts_ms": 2000 + change,
        "transaction": None,
    }  # fmt: skip


def test_sql_server_lsns_order_changes_through_the_preset(cli_project: Any) -> None:
    """`debezium: {preset: sqlserver}` on PostgreSQL: commit LSN, change LSN, serial number.
    A key's primary-key update arrives as a delete and a create at one change LSN (serial 1,
    2); LSNs pass 0x...9 -> 0x...a (hexadecimal text); a later File holds an earlier
    transaction's change of a key."""
    cli = cli_project("postgres")
    models = cli.root / "dbt_project" / "models" / "sqlserver"
    models.mkdir()
    doc = yaml.safe_load((EXAMPLE / "mysql_customers.yml").read_text())
    table = doc["sources"][0]["tables"][0]
    table["meta"]["cdc"] = {
        "landing": "sqlserver/customers/*.json", "format": "debezium", "keys": ["id"],
        "debezium": {"preset": "sqlserver"},
    }  # fmt: skip
    table["columns"] = [c for c in table["columns"] if c["name"] in ("id", "first_name", "email")]
    doc["models"] = doc["models"][:1]
    (models / "mysql_customers.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(EXAMPLE / "mysql_customers_current.sql", models)
    landing = cli.root / "landing" / "sqlserver" / "customers"
    landing.mkdir(parents=True)
    files = [
        ("server1.testDB.dbo.customers+0+0000000000.json", [
            sqlserver_event("c", 1, "ann", 0x09, 0x08, 1),
            sqlserver_event("c", 2, "bob", 0x09, 0x09, 1),
            sqlserver_event("u", 1, "ann-a", 0x0B, 0x0A, 1),  # 0x0a after 0x09, as hex text
            sqlserver_event("d", 2, None, 0x1F, 0x1E, 1),  # id 2 becomes id 3: delete, create
            sqlserver_event("c", 3, "bob-3", 0x1F, 0x1E, 2),
        ]),
        ("server1.testDB.dbo.customers+0+0000000005.json", [
            sqlserver_event("u", 3, "bob-late", 0x1D, 0x1C, 1),  # committed before the move
            sqlserver_event("u", 1, "ann-b", 0x21, 0x20, 1),
        ]),
    ]  # fmt: skip
    for name, events in files:
        (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))
    cli.runner("run")
    got = {int(r["id"]): r["first_name"] for r in cli.table("{{ ref('mysql_customers_current') }}")}

    def lsns(e: dict) -> tuple:
        s = e["source"]
        return (s["commit_lsn"], s["change_lsn"], s["event_serial_no"], e["ts_ms"])

    assert got == fold(files, lsns) == {1: "ann-b", 3: "bob-3"}, got
    assert fold(files, lambda e: 0) != got  # in the order the Files arrived, another table
