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


def fold(files: list[tuple[str, list[dict]]], order: Any) -> dict[int, str]:
    """id -> first_name after the events, sorted by ``order`` (then File and line)."""
    events = [(order(e), i, j, e) for i, (_, es) in enumerate(files) for j, e in enumerate(es)]
    now: dict[int, str] = {}
    for *_, e in sorted(events, key=lambda t: t[:3]):
        if e["op"] == "d":
            now.pop(e["before"]["id"], None)
        else:
            now[e["after"]["id"]] = e["after"]["first_name"]
    return now


def history(files: list[tuple[str, list[dict]]]) -> dict[int, list[tuple[str, bool]]]:
    """id -> its versions in binlog order: (first_name, open), a version closed by the next
    event of its id (a change or a delete), the last one open unless a delete follows it."""
    events = sorted(
        (binlog(e), i, j, e) for i, (_, es) in enumerate(files) for j, e in enumerate(es)
    )
    by_key: dict[int, list[dict]] = {}
    for *_, e in events:
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
