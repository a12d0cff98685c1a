"""Partial updates (null_means: unchanged, with a placeholder) and truncates, in the current-state
apply and the change history, on local Spark + Iceberg and on PostgreSQL: after every build of a
scenario (the multi-File rounds of test_apply, a File of partial updates, a late File with a
partial update, a File with a truncate between changes, a late File older than the truncate)
both tables equal a plain-Python fold of the changes in order (oracles below), and the
markers count what the truncate removed."""

from __future__ import annotations

import csv
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Cli, drop_database, make_project, read_table
from test_apply import (
    HEADER,
    LATE,
    ROUND_1,
    ROUND_2,
    ROUND_3,
    change,
    change_time,
    dbt_build,
    for_table,
    naive,
    seq,
    write,
)

from audit import AuditDB
from runner.contract import lineage_columns, state_tables
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.project import Project

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

PARTIAL = ("email", "tier", "balance")  # unchanged_columns of the scenario's declaration
PLACEHOLDER = "__unavailable__"


def partial(n: int, key: int, tag: str, **values: str) -> list[str]:
    """An update that sets name and updated_at and only the partial columns given; the others
    are empty (NULL: unchanged) or the placeholder."""
    row = change("U", n, key, tag)
    cols = dict(zip(HEADER, row, strict=True))
    for c in PARTIAL:
        cols[c] = values.get(c, "")
    return [cols[h] for h in HEADER]


def truncate(n: int) -> list[str]:
    return ["T", seq(n)] + [""] * (len(HEADER) - 2)


PARTIAL_FILE = {
    "20260301-081100000.csv": [
        partial(34, 5, "p"),  # only name and updated_at: email, tier, balance kept
        partial(35, 1, "p", email="k1.p@example.com", balance=PLACEHOLDER),
        change("I", 36, 10, "ten"),
        partial(37, 10, "p", tier="silver"),  # filled from the insert in the same File
        change("D", 38, 6),
        partial(39, 6, "p", balance="1.50"),  # back after a delete: nothing to keep
    ],
}
LATE_PARTIAL = {
    # Older than k3's applied row (stale in the current state); its history version is filled
    # from k3's earlier versions.
    "20260301-080100000.csv": [partial(14, 3, "latep", tier="bronze")],
}
TRUNCATE_FILE = {
    "20260301-083000000.csv": [
        partial(44, 2, "p", email="k2.p@example.com"),  # before the truncate: removed by it
        truncate(45),
        change("I", 46, 11, "eleven"),
        partial(47, 9, "p", balance="9.99"),  # after the truncate: a new row, NULLs stay
    ],
}
LATE_TRUNCATED = {
    # Older than the truncate: stale in the current state, closed by it in the history.
    "20260301-082500000.csv": [change("U", 21, 1, "late2"), change("I", 22, 12, "twelve")],
}
BUILDS = [
    ROUND_1,
    ROUND_2 | PARTIAL_FILE,
    LATE | LATE_PARTIAL,
    ROUND_3 | TRUNCATE_FILE,
    LATE_TRUNCATED,
]


def declare(root: Path) -> None:
    """The scenario's declaration: customers with partial updates and a truncate operation."""
    path = root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    doc = yaml.safe_load(path.read_text())
    table = next(t for t in doc["sources"][0]["tables"] if t["name"] == "customers")
    cdc = table["meta"]["cdc"]
    cdc["operation"] = {"column": "Op", "values": {"I": "I", "U": "U", "D": "D", "T": "T"}}
    cdc["null_means"] = "unchanged"
    cdc["unchanged_columns"] = list(PARTIAL)
    cdc["unchanged_placeholder"] = PLACEHOLDER
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def value(column: str, raw: str) -> Any:
    if raw in ("", PLACEHOLDER):
        return None
    if column == "balance":
        return Decimal(raw)
    if column == "updated_at":
        return datetime.fromisoformat(raw)
    return raw


def changes(files: list[Path]) -> list[dict[str, Any]]:
    """Every change of `files`, in sequence order: op, seq, key, file, values (None: NULL)."""
    out = []
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                out.append(
                    {
                        "op": row["Op"],
                        "seq": row["AR_H_CHANGE_SEQ"],
                        "key": int(row["customer_id"]) if row["customer_id"] else None,
                        "file": path.name,
                        "values": {c: value(c, row[c]) for c in HEADER[3:]},
                    }
                )
    return sorted(out, key=lambda c: c["seq"])


class CurrentOracle:
    """The current state, build by build: each batch's changes in sequence order; a change not
    newer than its key's row, its key's delete or the last truncate is stale; an insert sets
    every column, an update every column but a partial one it leaves NULL (that keeps the
    row's value, if the key has a row); a truncate removes every row not newer than it."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.tombs: dict[int, str] = {}
        self.watermark = ""
        self.removed: dict[str, int] = {}  # File -> rows its truncate removed

    def apply(self, batch: list[Path]) -> None:
        before = {k: r["seq"] for k, r in self.rows.items()}
        for c in changes(batch):
            s, key = c["seq"], c["key"]
            if s <= self.watermark:
                continue
            if c["op"] == "T":
                self.watermark = s
                self.removed[c["file"]] = sum(1 for x in before.values() if x <= s)
                self.rows = {k: r for k, r in self.rows.items() if r["seq"] > s}
                continue
            if (key in self.rows and s <= self.rows[key]["seq"]) or s <= self.tombs.get(key, ""):
                continue
            if c["op"] == "D":
                self.rows.pop(key, None)
                self.tombs[key] = s
                continue
            new = dict(c["values"])
            if c["op"] == "U" and key in self.rows:
                for col in PARTIAL:
                    if new[col] is None:
                        new[col] = self.rows[key][col]
            self.rows[key] = {**new, "seq": s, "file": c["file"]}
            self.tombs.pop(key, None)

    def table(self) -> dict[int, tuple]:
        return {
            k: (
                r["name"],
                r["email"],
                r["tier"],
                r["balance"],
                r["updated_at"],
                r["seq"],
                r["file"],
            )
            for k, r in self.rows.items()
        }


class HistoryOracle:
    """The change history, build by build: per key, its changes and every truncate in sequence
    order; each insert or update is a version valid from its change time until the key's next
    change, delete or truncate. A version's partial column left NULL takes the last value set
    since the key's last insert, delete or truncate, as the history held it when the version
    was applied (a late change does not re-fill versions applied before it)."""

    def __init__(self, pids: dict[str, str]) -> None:
        self.pids = pids
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.truncates: list[dict[str, Any]] = []

    def apply(self, batch: list[Path]) -> None:
        new = changes(batch)
        for c in new:
            if c["op"] == "T":
                self.truncates.append({**c, "stored": None})
            else:
                self.events.setdefault(c["key"], []).append({**c, "stored": None})
        for key in {c["key"] for c in new if c["op"] != "T"} | (
            set(self.events) if any(c["op"] == "T" for c in new) else set()
        ):
            ordered = sorted(self.events[key] + self.truncates, key=lambda e: e["seq"])
            for i, e in enumerate(ordered):
                if e["stored"] is not None or e["op"] not in ("I", "U"):
                    continue
                filled = dict(e["values"])
                for col in PARTIAL:
                    j = i
                    while filled[col] is None and j > 0 and ordered[j]["op"] == "U":
                        j -= 1
                        if ordered[j]["op"] in ("D", "T"):
                            break
                        prior = ordered[j]["stored"] or ordered[j]["values"]
                        filled[col] = prior[col]
                e["filled"] = filled
            for e in ordered:
                if e["op"] in ("I", "U") and e["stored"] is None:
                    e["stored"] = e.pop("filled")

    def table(self) -> list[tuple]:
        out = []
        for key, own in self.events.items():
            ordered = sorted(own + self.truncates, key=lambda e: e["seq"])
            for i, e in enumerate(ordered):
                if e["op"] not in ("I", "U"):
                    continue
                nxt = ordered[i + 1] if i + 1 < len(ordered) else None
                v = e["stored"]
                out.append(
                    (key, e["seq"], e["op"], v["name"], v["email"], v["tier"], v["balance"],
                     e["file"], change_time(e["seq"]),
                     change_time(nxt["seq"]) if nxt else None,
                     self.pids[e["file"]], self.pids[nxt["file"]] if nxt else None)
                )  # fmt: skip
        return sorted(out, key=str)


def history_rows(rows: list[dict]) -> list[tuple]:
    lin = lineage_columns()
    return sorted(
        (
            (r["customer_id"], r[lin["sequence"]], r[lin["operation"]], r["name"], r["email"],
             r["tier"], r["balance"], r[lin["file_name"]], naive(r[lin["valid_from"]]),
             naive(r[lin["valid_to"]]), r[lin["process_id"]], r[lin["closed_process_id"]])
            for r in rows
        ),
        key=str,
    )  # fmt: skip


def current_rows(rows: list[dict]) -> dict[int, tuple]:
    lin = lineage_columns()
    return {
        r["customer_id"]: (r["name"], r["email"], r["tier"], r["balance"], naive(r["updated_at"]),
                           r[lin["sequence"]], r[lin["file_name"]])
        for r in rows
    }  # fmt: skip


def run_scenario(
    ingest: Callable[[list[Path]], dict[str, str]],
    build: Callable[[], None],
    read: Callable[[str], list[dict]],
    folder: Path,
) -> None:
    """Ingest and build the scenario's Files build by build, checking both tables after each.
    `ingest` stages the landing folder and gives each File's process id."""
    pids: dict[str, str] = {}
    now, hist = CurrentOracle(), HistoryOracle(pids)
    for files in BUILDS:
        batch = [write(folder / n, rows) for n, rows in files.items()]
        pids.update(ingest(batch))
        build()
        now.apply(batch)
        hist.apply(batch)
        assert current_rows(read("customers")) == now.table(), files.keys()
        assert history_rows(read("customers_changes_history")) == hist.table(), files.keys()
    markers = read(state_tables()["applied_files"]["identifier"])
    cut = "20260301-083000000.csv"
    applied = {m["file_name"]: m for m in for_table(markers, "customers")}[cut]
    # The truncate removed the rows not newer than it (k2's update before it was stale).
    assert now.removed[cut] > 0
    assert (applied["rows_inserted"], applied["rows_deleted"]) == (2, now.removed[cut])
    versions = {m["file_name"]: m for m in for_table(markers, "customers_changes_history")}[cut]
    assert (versions["rows_inserted"], versions["rows_updated"], versions["rows_deleted"]) == (
        1,
        2,
        1,
    )


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    schema = request.getfixturevalue("pg_schema") if request.param == "postgres" else "partial_test"
    monkeypatch.setenv("CDC_SCHEMA", schema)
    return request.param


SAMPLE_SNAPSHOTS = ("accounts", "accounts_history")  # not this scenario's


def test_partial_updates_and_truncates_equal_the_oracles(
    spark, tmp_path: Path, target: str
) -> None:
    root = make_project(tmp_path / "repo", without=SAMPLE_SNAPSHOTS)
    declare(root)
    (root / "dbt_project" / "dbt_packages").mkdir()
    (root / "dbt_project" / "dbt_packages" / "cdc").symlink_to(root / "macros")
    project = Project.load(root, target=target)
    schema = project.target["schema"]
    if target == "local":
        drop_database(spark, schema)
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    folder = tmp_path / "landing" / "customers"

    def stage(batch: list[Path]) -> dict[str, str]:
        pid = new_process_id()
        db.start_run(pid, "ingest", target)
        ingest(project, db, pid, spark=spark, landing=[str(folder.parent)])
        states = {Path(f.path).name: f.state for f in db.files()}
        assert not {states[p.name] for p in batch} & {"QUARANTINED", "FAILED"}, states
        return {p.name: pid for p in batch}

    def build() -> None:
        res = dbt_build(
            root / "dbt_project", target, "--select", "+customers", "+customers_changes_history"
        )
        assert res.success, res.exception

    run_scenario(
        stage, build, lambda table: read_table(target, spark, project, schema, table), folder
    )
    db.dispose()


@pytest.mark.bigquery
def test_partial_updates_and_truncates_on_bigquery(
    tmp_path: Path, cli_project: Callable[..., Cli]
) -> None:
    """The same scenario on the BigQuery emulator, through the commands a user runs."""
    from test_bigquery import read

    cli = cli_project("bigquery", SAMPLE_SNAPSHOTS)
    declare(cli.root)
    landing = tmp_path / "landing"

    def stage(batch: list[Path]) -> dict[str, str]:
        cli("runner", "ingest", "--landing", str(landing), "--target", "bigquery")
        pids = {m["file_name"]: m["process_id"] for m in read(cli, "cdc_staged_files")}
        return {p.name: pids[p.name] for p in batch}

    def build() -> None:
        cli("dbt", "build", "--project-dir", "dbt_project", "--target", "bigquery", "--select",
            "+customers", "+customers_changes_history")  # fmt: skip

    run_scenario(stage, build, lambda table: read(cli, table), landing / "customers")
