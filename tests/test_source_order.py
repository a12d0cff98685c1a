"""Order as a source defines it, through the documented run on local Spark and PostgreSQL
against a plain-Python fold of the Files.

Debezium's MySQL connector (docs/examples/debezium_mysql): events ordered by binlog file,
position and row. The Files hold a snapshot (op r, one shared position), changes across a
binlog rotation in the middle of a File (positions start again in the new file), a multi-row
event (one position, rows 0..2), an event of an earlier binlog file arriving in a later File,
and the rotation from mysql-bin.999999 to mysql-bin.1000000 (by number, not as text). The
current state and the change-log history (versions in binlog order, each closed by the next
event of its key) both follow that order.

AWS DMS table reloads (docs/examples/dms_defaults, `reloads: true`): a reload after two rounds
of changes, its Files landing over two runs, ordered by DMS's file names (date folders, three
runs) and by timestampColumnName, then a reload whose Files hold bytes their paths held before.
Beside them: Debezium's SQL Server connector (`preset: sqlserver`: commit LSN, change LSN,
serial number; its initial snapshot's read events, without the last two, before every
change), and DMS Files ordered by a sequence of two columns (a commit time, then the change's
number in its transaction): the current state and the change-log history of each.

All of them are entities of one project, run four times per target: a project and a run cost
their setup once for every entity in them. On local Spark the timestampColumnName entity has
its history model only."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any

import pytest
import yaml
from helpers.project import REPO, audit_rows

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


def history(
    files: list[tuple[str, list[dict]]], order: Any = None
) -> dict[int, list[tuple[str, bool]]]:
    """id -> its versions in the source's order (``order``, binlog's by default): (first_name,
    open), a version closed by the next event of its id (a change or a delete), the last one
    open unless a delete follows it."""
    by_key: dict[int, list[dict]] = {}
    for e in in_order(files, order or binlog):
        by_key.setdefault((e["after"] or e["before"])["id"], []).append(e)
    out: dict[int, list[tuple[str, bool]]] = {}
    for key, es in by_key.items():
        out[key] = [
            (e["after"]["first_name"], n == len(es) - 1) for n, e in enumerate(es) if e["op"] != "d"
        ]
    return out


def versions(
    rows: list[dict], key: str = "id", name: str = "first_name"
) -> dict[int, list[tuple[str, bool]]]:
    """id -> its history rows by valid-from: (name, open); each closed one ends where the id's
    next version begins, when there is one."""
    out: dict[int, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["_cdc_valid_from"]):
        out.setdefault(int(r[key]), []).append(r)
    for rs in out.values():
        for a, b in zip(rs, rs[1:], strict=False):
            assert a["_cdc_valid_to"] is not None and a["_cdc_valid_to"] <= b["_cdc_valid_from"]
    return {k: [(r[name], r["_cdc_valid_to"] is None) for r in rs] for k, rs in out.items()}


def binlog(e: dict) -> tuple:
    """MySQL's order: the binlog file's number, the position, the row; then ts_ms."""
    s = e["source"]
    number = int(re.search(r"(\d+)$", s["file"]).group(1))  # type: ignore[union-attr]
    return (number, s["pos"], s["row"], e["ts_ms"])


def install_mysql(cli: Any) -> Any:
    """docs/examples/debezium_mysql, installed as a user installs the example; its landing."""
    shutil.copytree(EXAMPLE, cli.root / "dbt_project" / "models" / "debezium_mysql")
    landing = cli.root / "landing" / "debezium-mysql" / "customers"
    landing.mkdir(parents=True)
    return landing


def land_mysql(landing: Any, run: int, written: list[tuple[str, list[dict]]]) -> None:
    for (name, when), events in FILES.items():
        if when == run:
            (landing / name).write_text("".join(json.dumps(e) + "\n" for e in events))
            written.append((name, events))


def check_mysql(cli: Any, written: list[tuple[str, list[dict]]], run: int) -> None:
    """The MySQL entity's current state and history against the fold of the Files landed so
    far in binlog order; the scenario tells the orders apart (by position alone, or the file
    name as text, another customer wins)."""
    rows = cli.table("{{ ref('mysql_customers_current') }}")
    got = {int(r["id"]): r["first_name"] for r in rows}
    assert got == fold(written, binlog), (run, got)
    assert versions(cli.table("{{ ref('mysql_customers_history') }}")) == history(written)
    everything = [(n, es) for (n, _), es in FILES.items()]
    for wrong in (
        lambda e: (e["source"]["pos"], e["source"]["row"], e["ts_ms"]),
        lambda e: (e["source"]["file"], e["source"]["pos"], e["source"]["row"], e["ts_ms"]),
    ):
        assert fold(everything, wrong) != fold(everything, binlog)


def sqlserver_event(
    op: str, key: int, name: str | None, commit: int, change: int | None, serial: int | None
) -> dict:
    """One change event as the SQL Server connector writes it (schemas.enable=false): LSNs as
    fixed-width hexadecimal text. A snapshot's read event (op r, the connector's default
    snapshot.mode initial) carries the snapshot's LSN as its commit LSN, and no change LSN or
    serial number."""

    def lsn(n: int | None) -> str | None:
        return None if n is None else f"00000027:{n:08x}:0003"

    image = None if name is None else {"id": key, "first_name": name, "email": f"{name}@x.org"}
    return {
        "before": {"id": key, "first_name": None, "email": None} if op in ("u", "d") else None,
        "after": None if op == "d" else image,
        "source": {
            "version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
            "ts_ms": 1000 + (change or 0), "snapshot": "true" if op == "r" else "false",
            "db": "testDB", "sequence": None, "schema": "dbo", "table": "customers",
            "change_lsn": lsn(change), "commit_lsn": lsn(commit), "event_serial_no": serial,
        },
        "op": op,
        "ts_ms": 2000 + (change or 0),
        "transaction": None,
    }  # fmt: skip


SQLSERVER_FILES = [
    ("server1.testDB.dbo.customers+0+0000000000.json", [
        sqlserver_event("r", 4, "dee", 0x07, None, None),  # the snapshot, at LSN 0x07
        sqlserver_event("r", 5, "eve", 0x07, None, None),
        sqlserver_event("c", 1, "ann", 0x09, 0x08, 1),
        sqlserver_event("c", 2, "bob", 0x09, 0x09, 1),
        sqlserver_event("u", 1, "ann-a", 0x0B, 0x0A, 1),  # 0x0a after 0x09, as hex text
        sqlserver_event("d", 2, None, 0x1F, 0x1E, 1),  # id 2 becomes id 3: delete, create
        sqlserver_event("c", 3, "bob-3", 0x1F, 0x1E, 2),
    ]),
    ("server1.testDB.dbo.customers+0+0000000007.json", [
        sqlserver_event("u", 3, "bob-late", 0x1D, 0x1C, 1),  # committed before the move
        sqlserver_event("u", 1, "ann-b", 0x21, 0x20, 1),
        sqlserver_event("u", 4, "dee-2", 0x0D, 0x0C, 1),
        sqlserver_event("d", 5, None, 0x22, 0x21, 1),
    ]),
]  # fmt: skip


def lsns(e: dict) -> tuple:
    """SQL Server's order: commit LSN, change LSN, serial number (then ts_ms); a snapshot's
    read event, without the last two, before any change at its LSN."""
    s = e["source"]
    return (s["commit_lsn"], s["change_lsn"] or "", s["event_serial_no"] or 0, e["ts_ms"])


def install_sqlserver(root: Any) -> Any:
    """The MySQL example's declaration and models (current state, history) renamed for SQL
    Server's connector with `debezium: {preset: sqlserver}` (which declares the position's
    columns); its landing."""
    models = root / "dbt_project" / "models" / "sqlserver"
    models.mkdir()
    text = (EXAMPLE / "mysql_customers.yml").read_text().replace("mysql_", "sqlserver_")
    doc = yaml.safe_load(text)
    table = doc["sources"][0]["tables"][0]
    table["meta"]["cdc"] = {
        "landing": "sqlserver/customers/*.json", "format": "debezium", "keys": ["id"],
        "debezium": {"preset": "sqlserver"},
    }  # fmt: skip
    table["columns"] = [c for c in table["columns"] if c["name"] in ("id", "first_name", "email")]
    (models / "sqlserver_customers.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for model in ("current", "history"):
        sql = (EXAMPLE / f"mysql_customers_{model}.sql").read_text().replace("mysql_", "sqlserver_")
        (models / f"sqlserver_customers_{model}.sql").write_text(sql)
    landing = root / "landing" / "sqlserver" / "customers"
    landing.mkdir(parents=True)
    return landing


# --- AWS DMS table reloads ---------------------------------------------------------------

DMS_EXAMPLE = REPO / "docs" / "examples" / "dms_defaults"
LOAD_TIME, RELOAD_TIME = "2026-03-01 07:00:00.000001", "2026-03-02 12:00:00.000001"
# (run, name, rows): a row is (Op or None in a LOAD File, commit or transfer time, id, name).
# Run 1: the full load and two rounds of changes (date folders 2026/03/01 and 03/02). Run 2:
# the table reloaded, its first File (DMS writes LOAD00000001 again: new bytes at the same
# path); key 4 was deleted at the source without a change, key 1 changed without one. Run 3:
# the reload's second File (key 7 missed before) and changes after the reload (2026/03/03).
RELOAD_FILES = [
    (1, "LOAD00000001.csv", [(None, LOAD_TIME, k, n) for k, n in
                             ((1, "Ann"), (2, "Bob"), (3, "Cid"), (4, "Dot"))]),
    (1, "2026/03/01/20260301-080000000.csv", [
        ("U", "2026-03-01 07:59:00.000000", 1, "Ann-1"),
        ("D", "2026-03-01 07:59:01.000000", 2, "Bob"),
        ("I", "2026-03-01 07:59:02.000000", 5, "Eve")]),
    (1, "2026/03/02/20260302-090000000.csv", [
        ("U", "2026-03-02 08:59:00.000000", 3, "Cid-2"),
        ("I", "2026-03-02 08:59:01.000000", 6, "Fay"),
        ("U", "2026-03-02 08:59:02.000000", 5, "Eve-2")]),
    (2, "LOAD00000001.csv", [(None, RELOAD_TIME, k, n) for k, n in
                             ((1, "Ann-R"), (3, "Cid-2"), (5, "Eve-2"))]),
    (3, "LOAD00000002.csv", [(None, "2026-03-02 12:00:00.000002", k, n) for k, n in
                             ((6, "Fay"), (7, "Gus"))]),
    (3, "2026/03/03/20260303-100000000.csv", [
        ("U", "2026-03-03 09:59:00.000000", 7, "Gus-3"),
        ("D", "2026-03-03 09:59:01.000000", 5, "Eve-2"),
        ("U", "2026-03-03 09:59:02.000000", 1, "Ann-3")]),
]  # fmt: skip
# Run 4: the table reloaded again; its two Files hold bytes their paths held before (the first
# load's, then the last reload's second File): the source is those rows again (key 2 re-inserted
# and Ann's name restored without a change, Eve's delete undone). By the Files' names this is
# a reload; by timestampColumnName the same bytes carry the same transfer times: a copy.
AGAIN = ((1, "LOAD00000001.csv"), (3, "LOAD00000002.csv"))
SAME_BYTES_RELOAD = [(4, name, rows) for run, name, rows in RELOAD_FILES if (run, name) in AGAIN]


RELOADED_AT = "20260302-120000000"  # when DMS reloaded the table (between the change Files)
# By timestampColumnName only: a change File DMS wrote before the reload (key 8 inserted and
# deleted before it), landing in the reload's run: its rows go before the reload, by their times.
BEFORE_THE_RELOAD = (2, "2026/03/02/20260302-113000000.csv", [
    ("I", "2026-03-02 11:00:00.000000", 8, "Hal"),
    ("D", "2026-03-02 11:30:00.000000", 8, "Hal")])  # fmt: skip


def reload_fold(runs: int) -> dict[int, str]:
    """id -> name after ``runs`` runs, as a reload means it: the full load, then the changes
    by their Files' names; once the reload's Files land, the table is their rows (every File of
    it landed so far), then the changes written after the reload on top."""
    landed = [(name, rows) for run, name, rows in RELOAD_FILES if run <= runs]
    reload = [rows for run, name, rows in RELOAD_FILES if 1 < run <= runs and "LOAD" in name]

    def changes(after: bool) -> list[list[tuple]]:
        return [
            rows for name, rows in sorted(landed)
            if name.startswith("2026") and (name.rsplit("/", 1)[1] > RELOADED_AT) == after
        ]  # fmt: skip

    if runs >= 4:  # the same-bytes reload: the table is its rows
        return {key: name for _, _, rows in SAME_BYTES_RELOAD for _, _, key, name in rows}
    state: dict[int, str] = {}
    if reload:
        state = {key: name for rows in reload for _, _, key, name in rows}
        steps = changes(after=True)
    else:
        steps = [rows for name, rows in landed if name.startswith("LOAD")] + changes(after=False)
    for rows in steps:
        apply_rows(state, rows)
    return state


def apply_rows(state: dict[int, str], rows: list[tuple]) -> None:
    """DMS rows (op, time, id, name) applied in order: a delete removes the id."""
    for op, _, key, name in rows:
        if op == "D":
            state.pop(key, None)
        else:
            state[key] = name


def install_dms(
    cli: Any,
    name: str,
    landing: str,
    timestamp: bool,
    composite: bool = False,
    kinds: tuple[str, ...] = ("current", "history"),
) -> None:
    """docs/examples/dms_defaults as entity ``name``, with a history model beside the current
    state (``kinds``: which of the two); ``timestamp``: timestampColumnName=changed_at orders
    the changes instead of the Files' names; ``composite``: changed_at then change_no (no
    reloads)."""
    models = cli.root / "dbt_project" / "models" / name
    models.mkdir()
    doc = yaml.safe_load((DMS_EXAMPLE / "dms_customers.yml").read_text())
    table = doc["sources"][0]["tables"][0]
    table["name"], table["identifier"] = name, f"{name}__staged"
    table["meta"]["cdc"]["landing"] = landing
    if timestamp:
        table["meta"]["cdc"]["sequence"] = {"column": "changed_at", "ties": "line"}
        table["columns"].insert(1, {"name": "changed_at", "data_type": "timestamp"})
    if composite:
        table["meta"]["cdc"]["sequence"] = ["changed_at", "change_no"]
        table["meta"]["cdc"].pop("reloads")
        table["columns"][1:1] = [
            {"name": "changed_at", "data_type": "timestamp"},
            {"name": "change_no", "data_type": "bigint"},
        ]
    current = dict(doc["models"][0], name=f"{name}_current")
    history = dict(current, name=f"{name}_history")
    history["config"] = dict(current["config"], meta={"cdc": {"apply": True, "history": True}})
    doc["models"] = [m for m in (current, history) if m["name"].rsplit("_", 1)[1] in kinds]
    (models / f"{name}.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    sql = (DMS_EXAMPLE / "dms_customers_current.sql").read_text().replace("dms_customers", name)
    for model in doc["models"]:
        (models / f"{model['name']}.sql").write_text(sql)


# A sequence of two columns: the commit time, then the change's number in its transaction (it
# starts again in each one). (run, File, rows): a row is (Op, commit time, change number, id,
# name); the second File holds an earlier transaction's change of id 1.
T = "2026-03-01 08:00:0"
COMPOSITE_FILES = [
    (1, "20260301-080000000.csv", [
        ("I", T + "0", 1, 1, "Ann"), ("I", T + "0", 2, 2, "Bob"),
        ("U", T + "5", 1, 1, "Ann-5"),
        ("U", T + "5", 10, 2, "Bob-5b"),  # change 10 after change 9: as numbers, not as text
        ("U", T + "5", 9, 2, "Bob-5a"),
        ("I", T + "5", 11, 3, "Cid")]),
    (1, "20260301-080100000.csv", [("U", T + "3", 50, 1, "Ann-3")]),
    (1, "20260301-080200000.csv", [("U", T + "6", 3, 1, "Ann-6"), ("D", T + "7", 1, 3, "Cid")]),
]  # fmt: skip


def in_turn(row: tuple) -> tuple:
    """The declared order: the commit time, then the change's number."""
    return (row[1], row[2])


def composite_history(runs: int, order: Any) -> dict[int, list[tuple[str, bool]]]:
    """id -> its versions (name, open) after ``runs`` runs, the rows sorted by ``order`` then
    File and line; a delete closes the version before it."""
    rows = [
        (order(r), i, j, r)
        for i, (run, _, rs) in enumerate(COMPOSITE_FILES) if run <= runs
        for j, r in enumerate(rs)
    ]  # fmt: skip
    out: dict[int, list[tuple[str, bool]]] = {}
    for *_, (op, _, _, key, name) in sorted(rows, key=lambda t: t[:3]):
        done = [(n, False) for n, _ in out.get(key, [])]
        out[key] = done + ([] if op == "D" else [(name, True)])
    return out


@pytest.mark.parametrize("target", ["postgres", "local"])
def test_each_source_s_changes_apply_in_the_order_it_defines(cli_project: Any, target: str) -> None:
    """One project, four runs, five entities. A DMS reload after two rounds of changes
    (`reloads: true`), its Files landing over two runs, ordered by DMS's file names and by
    timestampColumnName (on local Spark its history over the first two runs), then a reload
    whose Files hold bytes their paths held before: after each run the current state is the
    fold's, and in the history the keys the reload lacks have no open version; `runner status
    --files` names the same-bytes reload. Beside it: MySQL's binlog positions over the first
    two runs (check_mysql), and in the first run SQL Server's snapshot and changes and a DMS
    entity with a sequence of two columns (check_sqlserver_and_composite)."""
    cli = cli_project(target)
    install_dms(cli, "reload_by_file", "dms-reload/customers/**/*.csv", timestamp=False)
    # By timestampColumnName: on local Spark its history only (its current state is the file
    # order entity's apply; its open versions are the current state), up to the reload's run.
    by_time = ("current", "history") if target == "postgres" else ("history",)
    install_dms(cli, "reload_by_time", "dms-reload-ts/customers/**/*.csv", True, kinds=by_time)
    entities = {"reload_by_file": ("current", "history"), "reload_by_time": by_time}
    last = {"dms-reload": 4, "dms-reload-ts": 4 if target == "postgres" else 2}
    folders = (("dms-reload", False), ("dms-reload-ts", True))
    land_sqlserver_and_composite(cli)
    mysql, mysql_files = install_mysql(cli), []
    written = 0
    for run in (1, 2, 3, 4):
        land_mysql(mysql, run, mysql_files)
        for when, name, rows in [*RELOAD_FILES, *SAME_BYTES_RELOAD, BEFORE_THE_RELOAD]:
            if when != run:
                continue
            for folder, timestamp in folders:
                if ((when, name, rows) == BEFORE_THE_RELOAD and not timestamp) or run > last[
                    folder
                ]:
                    continue
                path = cli.root / "landing" / folder / "customers" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                lines = [
                    ",".join([*([op] if op else []), *([t] if timestamp else []),
                              str(key), name_, "gold", "1.00", "2026-03-01 00:00:00"])
                    for op, t, key, name_ in rows
                ]  # fmt: skip
                path.write_text("\n".join(lines) + "\n")
                written += 1  # written a minute apart, as DMS writes them
                os.utime(path, (time.time() - 86400 + 60 * written,) * 2)
        cli.runner("run")
        if run <= 2:
            check_mysql(cli, mysql_files, run)
        if run == 1:
            check_sqlserver_and_composite(cli)
        for entity, kinds in entities.items():
            if entity == "reload_by_time" and run > last["dms-reload-ts"]:
                continue
            # by a commit-time column, run 4's Files are copies: the table stays
            expected = reload_fold(run if entity == "reload_by_file" else min(run, 3))
            if "current" in kinds:
                rows_now = cli.table(f"{{{{ ref('{entity}_current') }}}}")
                got = {int(r["customer_id"]): r["name"] for r in rows_now}
                assert got == expected, (run, entity, got)
            versions_ = cli.table(f"{{{{ ref('{entity}_history') }}}}")
            open_ = {
                int(r["customer_id"]): r["name"] for r in versions_ if r["_cdc_valid_to"] is None
            }
            assert open_ == expected, (run, entity, open_)
            if entity == "reload_by_time" and run >= 2:  # key 8's version ends before the reload
                (hal,) = [r for r in versions_ if int(r["customer_id"]) == 8]
                reloaded = [r["_cdc_valid_from"] for r in versions_ if r["name"] == "Ann-R"]
                assert hal["_cdc_valid_to"] is not None and hal["_cdc_valid_to"] < reloaded[0]
    assert reload_fold(3) == {1: "Ann-3", 3: "Cid-2", 6: "Fay", 7: "Gus-3"}
    assert reload_fold(4) == {1: "Ann", 2: "Bob", 3: "Cid", 4: "Dot", 6: "Fay", 7: "Gus"}
    # The same-bytes reload is two new Files, each naming the File at its path with its bytes;
    # the copies under a commit-time column are the earlier Files seen again.
    rows = audit_rows(cli, "select id, entity, path, reload_of, state, content_hash from files")
    by_id = {r[0]: r for r in rows}
    again = [r for r in rows if r[3] is not None]
    assert sorted(r[2].rsplit("/", 1)[1] for r in again) == ["LOAD00000001.csv", "LOAD00000002.csv"]
    shown = cli.runner("status", "--files").stdout
    for _, entity, path, of, state, digest in again:
        assert (entity, state, by_id[of][2]) == ("reload_by_file", "COMMITTED", path)
        assert digest != by_id[of][5]  # staged, applied and marked as a File of its own
        assert f"reload: the bytes of File {of} again" in shown, shown
    # Without the reload's meaning (its rows as inserts in DMS's order), another table: key 4
    # stays, and the reload's rows sort before every change.
    assert 4 in naive_dms_fold() and naive_dms_fold() != reload_fold(3)


def naive_dms_fold() -> dict[int, str]:
    state: dict[int, str] = {}
    files = sorted(RELOAD_FILES, key=lambda f: (not f[1].startswith("LOAD"), f[1], f[0]))
    for _, _, rows in files:
        apply_rows(state, rows)
    return state


def land_sqlserver_and_composite(cli: Any) -> None:
    """Two more entities' Files, applied by the first run: `debezium: {preset: sqlserver}`
    (SQLSERVER_FILES) and DMS CSV with `sequence: [changed_at, change_no]` (COMPOSITE_FILES)."""
    sqlserver = install_sqlserver(cli.root)
    for name, events in SQLSERVER_FILES:
        (sqlserver / name).write_text("".join(json.dumps(e) + "\n" for e in events))
    install_dms(cli, "by_two", "dms-composite/customers/*.csv", timestamp=False, composite=True)
    composite = cli.root / "landing" / "dms-composite" / "customers"
    composite.mkdir(parents=True)
    for _, name, rows in COMPOSITE_FILES:
        lines = [f"{op},{t},{n},{key},{who},gold,1.00,2026-03-01 00:00:00"
                 for op, t, n, key, who in rows]  # fmt: skip
        (composite / name).write_text("\n".join(lines) + "\n")


def check_sqlserver_and_composite(cli: Any) -> None:
    """Against folds of the Files, the current state and the change-log history of the two.
    SQL Server: the connector's initial snapshot (read events with no change LSN or serial
    number) before every streamed change; LSNs past 0x...9 -> 0x...a as hexadecimal text; a
    key's primary-key update as a delete and a create at one change LSN; a later File holding
    an earlier transaction's change. Composite: the commit time decides, then the change's
    number as a number, which neither column alone (nor the number as text) gives. On
    PostgreSQL, a `--full-refresh` of the first builds the same table again from every staged
    File."""
    rows = cli.table("{{ ref('sqlserver_customers_current') }}")
    got = {int(r["id"]): r["first_name"] for r in rows}
    assert got == fold(SQLSERVER_FILES, lsns) == {1: "ann-b", 3: "bob-3", 4: "dee-2"}, got
    assert fold(SQLSERVER_FILES, lambda e: 0) != got  # in the order the Files arrived: another
    # the history: each change a version in LSN order, the snapshot's rows the first versions
    # of their keys (id 3's late-committed update before its create)
    got_history = versions(cli.table("{{ ref('sqlserver_customers_history') }}"))
    assert got_history == history(SQLSERVER_FILES, lsns), got_history
    assert got_history[3] == [("bob-late", False), ("bob-3", True)], got_history
    assert history(SQLSERVER_FILES, lambda e: 0) != got_history  # in arrival order: another
    if cli.target == "postgres":
        # --full-refresh forgets the table's markers and tombstones and applies every File again
        cli.dbt("build", "--full-refresh", "--select", "sqlserver_customers_current")
        again = cli.table("{{ ref('sqlserver_customers_current') }}")
        assert {int(r["id"]): r["first_name"] for r in again} == got, again

    want = composite_history(1, in_turn)
    rows = cli.table("{{ ref('by_two_current') }}")
    current = {int(r["customer_id"]): r["name"] for r in rows}
    assert (
        current == {k: v[-1][0] for k, v in want.items() if v[-1][1]} == {1: "Ann-6", 2: "Bob-5b"}
    ), current
    history_rows = cli.table("{{ ref('by_two_history') }}")
    assert versions(history_rows, "customer_id", "name") == want, history_rows
    for wrong in (lambda r: r[1], lambda r: r[2], lambda r: (r[1], str(r[2]))):
        assert composite_history(1, wrong) != want
