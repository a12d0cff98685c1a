"""Transaction-consistent apply of a group (orders and their lines) from Debezium JSON lines and
the transaction metadata: after every build, both tables hold exactly the transactions an
independent expectation releases (complete, and committed before the earliest one still
open), folded in source order; nothing of an incomplete or rolled-back transaction, and no
line without its order.

The scenario (times are the events' ts_ms; the sample's quarantine_after_seconds is 3600):
  T1 1000-1010  order 1 and two lines                   complete in run 1
  T2 1020-1030  order 1 paid, line 13                   its line arrives in run 2 (a late File)
  T3 1040-1100  order 2 and its line                    END two runs late (run 3)
  T4 1050-1060  order 3 and its line                    complete in run 1, waits for T2, T3
  T5 1070-      order 4 and its line                    never ends (rolled back)
  T6 1000000-   order 2 shipped, line 12 deleted        BEGIN in run 4 (T3 and T5 overdue),
                (events at 4000000)                     the rest in run 5: the clock passes
                                                        T5's limit
Released after each run, worked out by hand from those rules:
  run 1: T1 (T2 lacks a line)   run 2: + T2 (T3 open)   run 3: + T4 (T5 open before T3's END)
  run 4: nothing more (T5 open)  run 5: + T3, T6 (T5 quarantined)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers.faults import stopped_before, walk_the_stops
from helpers.oracles import only_lost_races
from helpers.project import (
    Cli,
    bigquery_rows,
    dbt_build,
    drop_database,
    link_package,
    make_project,
    read_table,
)

from audit import AuditDB
from runner.contract import state_tables
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project
from runner.transactions import group_status

pytestmark = pytest.mark.spark

COLLECTION = {"orders": "shop.public.orders", "order_lines": "shop.public.order_lines"}

# (table, op, key, values) per transaction, in commit order within it.
TX: dict[str, tuple[int, int | None, list[tuple[str, str, int, dict[str, Any]]]]] = {
    "T1": (
        1000,
        1010,
        [
            ("orders", "c", 1, {"customer_id": 7, "status": "new", "total": "10.00"}),
            ("order_lines", "c", 11, {"order_id": 1, "sku": "A", "quantity": 1, "price": "1.50"}),
            ("order_lines", "c", 12, {"order_id": 1, "sku": "B", "quantity": 2, "price": "2.50"}),
        ],
    ),
    "T2": (
        1020,
        1030,
        [
            ("orders", "u", 1, {"customer_id": 7, "status": "paid", "total": "15.00"}),
            ("order_lines", "c", 13, {"order_id": 1, "sku": "C", "quantity": 5, "price": "5.50"}),
        ],
    ),
    "T3": (
        1040,
        1100,
        [
            ("orders", "c", 2, {"customer_id": 8, "status": "new", "total": "7.00"}),
            ("order_lines", "c", 21, {"order_id": 2, "sku": "A", "quantity": 7, "price": "7.50"}),
        ],
    ),
    "T4": (
        1050,
        1060,
        [
            ("orders", "c", 3, {"customer_id": 9, "status": "new", "total": "3.00"}),
            ("order_lines", "c", 31, {"order_id": 3, "sku": "D", "quantity": 3, "price": "3.50"}),
        ],
    ),
    "T5": (
        1070,
        None,
        [
            ("orders", "c", 4, {"customer_id": 10, "status": "new", "total": "4.00"}),
            ("order_lines", "c", 41, {"order_id": 4, "sku": "E", "quantity": 4, "price": "4.50"}),
        ],
    ),
    "T6": (
        4_000_000,
        4_000_010,
        [
            ("orders", "u", 2, {"customer_id": 8, "status": "shipped", "total": "7.00"}),
            ("order_lines", "d", 12, {"order_id": 1, "sku": "B", "quantity": 2, "price": "2.50"}),
        ],
    ),
}
KEYS = {"orders": "order_id", "order_lines": "line_id"}
# The statements a group adds to an apply: the held Files and the markers.
GROUP_STATEMENTS = re.compile(r"cdc_held_files|cdc_applied_files", re.I)


def events() -> dict[str, list[dict]]:
    """Every event envelope per transaction, with its lsn (increasing in commit order) and its
    per-table order in the transaction."""
    out: dict[str, list[dict]] = {}
    lsn = 100
    for tx, (begin, _end, changes) in TX.items():
        per_table: dict[str, int] = {}
        for i, (table, op, key, values) in enumerate(changes):
            lsn += 10
            per_table[table] = per_table.get(table, 0) + 1
            image = {KEYS[table]: key, **values}
            out.setdefault(tx, []).append(
                {
                    "__table": table,
                    "before": image if op == "d" else None,
                    "after": None if op == "d" else image,
                    "source": {"lsn": lsn, "table": table},
                    "op": op,
                    "ts_ms": begin + 1 + i,
                    "transaction": {
                        "id": tx,
                        "total_order": i + 1,
                        "data_collection_order": per_table[table],
                    },
                }
            )
    return out


EVENTS = events()


def begin(tx: str) -> dict:
    return {
        "status": "BEGIN",
        "id": tx,
        "ts_ms": TX[tx][0],
        "event_count": None,
        "data_collections": None,
    }


def end(tx: str) -> dict:
    counts: dict[str, int] = {}
    for table, *_ in TX[tx][2]:
        counts[COLLECTION[table]] = counts.get(COLLECTION[table], 0) + 1
    return {
        "schema": {
            "type": "struct",
            "name": "io.debezium.connector.common.TransactionMetadataValue",
        },
        "payload": {
            "status": "END",
            "id": tx,
            "ts_ms": TX[tx][1],
            "event_count": sum(counts.values()),
            "data_collections": [
                {"data_collection": c, "event_count": n} for c, n in counts.items()
            ],
        },
    }


def of(tx: str, table: str) -> list[dict]:
    return [e for e in EVENTS[tx] if e["__table"] == table]


RUNS: list[dict[str, list[dict]]] = [
    {
        "transactions/m1.json": [
            begin("T1"),
            end("T1"),
            begin("T2"),
            end("T2"),
            begin("T3"),
            begin("T4"),
            end("T4"),
            begin("T5"),
        ],
        "orders/o1.json": [e for t in ("T1", "T2", "T3", "T4", "T5") for e in of(t, "orders")],
        "order_lines/l1.json": [e for t in ("T1", "T3", "T4", "T5") for e in of(t, "order_lines")],
    },
    {"order_lines/l2.json": of("T2", "order_lines")},
    {"transactions/m3.json": [end("T3")]},
    # T6 begins at 1,000,000: T3 and T5 have been held 999 s of source time, past the
    # sample's report_after_seconds (300), not its quarantine_after_seconds (3600).
    {"transactions/m3b.json": [{**begin("T6"), "ts_ms": 1_000_000}]},
    {
        "order_lines/l4.json": of("T6", "order_lines"),
        "transactions/m4.json": [end("T6")],
        "orders/o4.json": of("T6", "orders"),
    },
]
HELD = [["T2", "T3", "T4", "T5"], ["T3", "T4", "T5"], ["T3", "T5"], ["T3", "T5", "T6"], []]
OVERDUE = [[], [], [], ["T3", "T5"], []]
RELEASED = [
    {"T1"},
    {"T1", "T2"},
    {"T1", "T2", "T4"},
    {"T1", "T2", "T4"},
    {"T1", "T2", "T3", "T4", "T6"},
]


def expected(released: set[str], table: str) -> dict[int, tuple]:
    """The table after applying the released transactions' events in lsn order."""
    state: dict[int, tuple] = {}
    for e in sorted(
        (e for tx in released for e in of(tx, table)), key=lambda e: e["source"]["lsn"]
    ):
        image = e["before"] if e["op"] == "d" else e["after"]
        key = image[KEYS[table]]
        if e["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = tuple(v for k, v in image.items() if k != KEYS[table])
    return state


def value(v: Any) -> Any:
    return f"{v:.2f}" if isinstance(v, Decimal) else v  # BigQuery's NUMERIC has scale 9


def run_scenario(
    landing: Path,
    ingest_files: Callable[[], None],
    build: Callable[[], None],
    read: Callable[[str], list[dict]],
    groups: Callable[[], list[dict]],
) -> None:
    """The runs above: after each ingest and build, the ledger's released set, both tables and
    the markers are checked against the expectation."""
    markers_table = state_tables()["applied_files"]["identifier"]
    held_table = state_tables()["held_files"]["identifier"]
    for n, (run, released) in enumerate(zip(RUNS, RELEASED, strict=True), start=1):
        for name, records in run.items():
            path = landing / "shop" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                "".join(
                    json.dumps({k: v for k, v in r.items() if k != "__table"}) + "\n"
                    for r in records
                )
            )
        ingest_files()
        build()
        ledger = {r["transaction_id"]: r["status"] for r in read("shop_transactions")}
        assert {t for t, s in ledger.items() if s == "released"} == released, (n, ledger)
        orders = {
            r["order_id"]: (r["customer_id"], r["status"], value(r["total"]))
            for r in read("orders")
        }
        lines = {
            r["line_id"]: (r["order_id"], r["sku"], r["quantity"], value(r["price"]))
            for r in read("order_lines")
        }
        assert orders == expected(released, "orders"), n
        assert lines == expected(released, "order_lines"), n
        assert {o for o, *_ in lines.values()} <= set(orders), n  # no line without its order
        if n == len(RUNS):
            assert ledger["T5"] == "quarantined"
        # What `runner status --groups` shows: the watermark (the latest released END) and
        # the transactions held, oldest first, and quarantined.
        (group,) = groups()
        assert group["group"] == "shop_transactions"
        assert group["watermark_ms"] == max(TX[t][1] for t in released)
        assert [h["transaction_id"] for h in group["held"]] == HELD[n - 1], n
        assert [h["transaction_id"] for h in group["held"] if h["overdue"]] == OVERDUE[n - 1], n
        assert group["quarantined"] == (["T5"] if n == len(RUNS) else [])
        markers = {(m["target_table"].split(".")[-1], m["file_name"]) for m in read(markers_table)}
        held = {(h["target_table"].split(".")[-1], h["file_name"]): h for h in read(held_table)}
        if n == 1:  # o1 and l1 hold rows of waiting transactions: no marker yet
            assert not {f for _, f in markers} & {"o1.json", "l1.json"}
            # o1: T1 applied (order 1 inserted); T2 to T5 held. l1: T1's two lines inserted.
            counts = {
                k: (h["rows_held"], h["transactions_held"], h["rows_inserted"])
                for k, h in held.items()
            }
            assert counts == {
                ("orders", "o1.json"): (4, 4, 1),
                ("order_lines", "l1.json"): (3, 3, 2),
            }
    assert not held  # nothing held once T5 is quarantined
    final = {f for t, f in markers if t in ("orders", "order_lines")}
    assert final == {"o1.json", "o4.json", "l1.json", "l2.json", "l4.json"}
    # The ledger's post-hook marks the metadata Files it read (`runner reconcile` commits them).
    assert {f for t, f in markers if t == "shop_transactions"} == {
        "m1.json",
        "m3.json",
        "m3b.json",
        "m4.json",
    }
    # Each File's marker adds up its parts: every row of a released transaction counted once.
    released = RELEASED[-1]
    for m in read(markers_table):
        table = m["target_table"].split(".")[-1]
        if table not in KEYS:
            continue
        name = next(f for run in RUNS for f in run if f.endswith("/" + m["file_name"]))
        rows = [r for r in next(run[name] for run in RUNS if name in run)]
        want = sum(1 for r in rows if r["transaction"]["id"] in released)
        got = m["rows_inserted"] + m["rows_updated"] + m["rows_deleted"] + m["rows_skipped"]
        assert got == want, (table, m["file_name"], m)
    by_file = {
        m["file_name"]: m for m in read(markers_table) if m["target_table"].endswith("lines")
    }
    assert by_file["l1.json"]["rows_inserted"] == 4  # 11, 12 (run 1), 31 (run 3), 21 (run 4)


def two_group_builds_at_once(root: Path, target: str) -> None:
    """Two `dbt build` processes of the group (ledger and members) started together, sharing
    this process's catalog and schema (environment): each either succeeds or fails saying it
    lost a race to a concurrent commit (Iceberg), never otherwise."""
    from runner.destinations.spark.session import link_iceberg_jar, link_jdbc_driver

    link_iceberg_jar(root)  # a process builds its own SparkSession from the profile
    link_jdbc_driver(root)
    env = dict(os.environ, CDC_HOME=str(root), DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    bin_dir = Path(sys.executable).parent
    args = [str(bin_dir / "dbt"), "build", "--project-dir", "dbt_project", "--profiles-dir", ".",
            "--target", target, "--select", "+orders", "+order_lines",
            "--exclude", "resource_type:test"]  # fmt: skip
    procs = [
        subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [(proc.communicate(timeout=600)[0], "") for proc in procs]
    only_lost_races(outs, [proc.returncode for proc in procs])


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else "tx_test"
    monkeypatch.setenv("CDC_SCHEMA", schema)
    return request.param


def test_a_group_applies_exactly_the_complete_transactions_up_to_the_watermark(
    spark, tmp_path: Path, target: str
) -> None:
    root = make_project(tmp_path / "repo", without=("customers_changes_history",), shop=True)
    link_package(root)
    project = Project.load(root, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    landing = tmp_path / "landing"

    def ingest_files() -> None:
        pid = new_process_id()
        db.start_run(pid, "ingest", target)
        ingest(
            Invocation.of(project, db, spark),
            pid,
            landing=[str(landing)],
            entity_names=["shop_transactions", "orders", "order_lines"],
        )

    builds: list[dict[str, list[str]]] = []

    def build() -> None:
        def once(*extra: str) -> Any:
            return dbt_build(
                root / "dbt_project", target, "--select", "+orders", "+order_lines", *extra
            )

        if len(builds) == 2 and target == "postgres":
            # The third run (the ledger releases T4, whose order lines were held since the
            # first): two `dbt build` processes of the group at once; a loser says it lost
            # the race, and the same build afterwards converges. (On local Spark a loser is
            # one whose Iceberg commit conflicted, whatever the table: tests/test_concurrency.py
            # and tests/test_crash_recovery.py race builds there.)
            builds.append({})
            two_group_builds_at_once(root, target)
            assert once().success
            return
        if len(builds) != 1:
            builds.append({})
            assert once().success
            return
        # The second run (the ledger releases T2, whose rows are held in o1 and l1 since the
        # first): every model of the group stopped before each of its statements in turn,
        # then the same build to the end. On local Spark only before the group's own commits
        # (held Files, markers): the rest of a member's statements are the apply's, whose
        # every stop tests/test_apply.py walks there.
        models = ("shop_transactions", "orders", "order_lines")
        only = GROUP_STATEMENTS if target == "local" else None
        builds.append(
            walk_the_stops(lambda: once("--exclude", "resource_type:test"), models, only=only)
        )

    run_scenario(
        landing,
        ingest_files,
        build,
        lambda t: read_table(target, spark, project, schema, t),
        lambda: [g.as_json() for g in group_status(Invocation.of(project, spark=spark))],
    )
    stops = builds[1]
    for model in ("orders", "order_lines"):
        stopped_before(stops[model], "cdc_held_files", "cdc_applied_files")
        if target != "local":
            stopped_before(stops[model], "merge into", "COMMIT")
    stopped_before(stops["shop_transactions"], "cdc_applied_files")
    db.dispose()


@pytest.mark.bigquery
def test_a_group_on_bigquery_through_the_commands(
    tmp_path: Path, cli_project: Callable[..., Cli]
) -> None:
    """The same runs on the BigQuery emulator, through the documented commands."""
    cli = cli_project("bigquery", ("customers_changes_history",), shop=True)
    landing = tmp_path / "landing"

    def ingest_files() -> None:
        cli("runner", "ingest", "--landing", str(landing), "--target", "bigquery")

    def build() -> None:
        cli(
            "dbt",
            "build",
            "--project-dir",
            "dbt_project",
            "--target",
            "bigquery",
            "--select",
            "+orders",
            "+order_lines",
        )

    def groups() -> list[dict]:
        out = cli("runner", "status", "--groups", "--json", "--target", "bigquery")
        return json.loads(out.stdout)

    run_scenario(landing, ingest_files, build, lambda t: bigquery_rows(cli, t), groups)
    # The readable form, as a user reads it: after `runner reconcile` (which keeps the groups'
    # state in the Audit DB), from the Audit DB alone.
    cli("runner", "reconcile", "--target", "bigquery")
    endpoint = cli.env["CDC_BQ_ENDPOINT"]
    cli.env["CDC_BQ_ENDPOINT"] = "http://127.0.0.1:9"  # no destination answers there
    try:
        text = cli("runner", "status", "--target", "bigquery").stdout
    finally:
        cli.env["CDC_BQ_ENDPOINT"] = endpoint
    assert "transaction groups, as of " in text, text
    # the watermark as the source's commit time: T6's END, 4,000,010 ms after the epoch
    assert "group shop_transactions (order_lines, orders): " in text, text
    assert "\n  applied up to 1970-01-01 01:06:40.010 UTC (source time)\n" in text, text
    assert "quarantined T5: never ended in time; none of it applied" in text
