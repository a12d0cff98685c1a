"""The multi-File DMS scenario of the customers entity (test_apply on local Spark and
PostgreSQL, test_bigquery on the emulator): its Files round by round (several changes per key,
rows out of order, deletes, re-inserts, late Files, partial updates, a truncate, a broken File),
and the plain-Python oracles of its current state and change history."""

from __future__ import annotations

import csv
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from helpers.oracles import naive
from helpers.project import link_package, make_project
from runner.contract import lineage_columns

HEADER = ["Op", "AR_H_CHANGE_SEQ", "customer_id", "name", "email", "tier", "balance", "updated_at"]


def seq(n: int) -> str:
    """A DMS change sequence: its time part (yyyyMMddHHmmss) grows with n, a minute a step."""
    return f"20260301{8 + n // 60:02d}{n % 60:02d}00{n:021d}"


def change_time(sequence: str) -> datetime:
    """The time part of a DMS change sequence (what cdc.dms_change_time reads)."""
    return datetime.strptime(sequence[:14], "%Y%m%d%H%M%S")


def change(op: str, n: int, key: int, tag: str = "") -> list[str]:
    if op == "D":
        return [op, seq(n), str(key), "", "", "", "", ""]
    return [
        op,
        seq(n),
        str(key),
        f'Name {key}, "{tag}" Zoë',
        f"k{key}.{tag}@example.com",
        "gold" if n % 2 else "",
        f"{key * 100 + n}.{n % 100:02d}",
        f"2026-03-01 08:{n % 60:02d}:00.{n:06d}",
    ]


def write(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle, lineterminator="\n")
        w.writerow(HEADER)
        w.writerows(rows)
    return path


ROUND_1 = {
    "LOAD00000001.csv": [change("I", k, k, "load") for k in range(1, 7)],
    # Several changes per key, rows out of sequence order, a delete, a new key.
    "20260301-080500000.csv": [
        change("U", 20, 1, "b"),
        change("U", 10, 1, "a"),
        change("D", 15, 2),
        change("I", 12, 7, "new"),
        change("U", 18, 3, "x"),
    ],
}
ROUND_2 = {
    # A re-insert of a deleted key, deletes, an update.
    "20260301-081000000.csv": [
        change("I", 30, 2, "back"),
        change("D", 31, 4),
        change("U", 32, 5, "y"),
        change("D", 33, 7),
    ],
    "20260301-081500000.csv": [],  # header only: applies as zero rows
}
LATE = {
    # A late File, applied after the Files above: older sequences than what is applied. k4 and
    # k7 stay deleted (their tombstones), k1 and k5 keep their newer values, k8 is new, and the
    # delete of k6 is newer than its load.
    "20260301-075900000.csv": [
        change("U", 8, 4, "late"),
        change("U", 11, 1, "late"),
        change("I", 9, 8, "late"),
        change("U", 13, 7, "late"),
        change("U", 4, 5, "late"),
        change("D", 7, 6),
    ],
}
ROUND_3 = {
    "20260301-082000000.csv": [
        change("U", 40, 2, "again"),
        change("D", 41, 3),
        change("I", 42, 9, "nine"),
        change("U", 43, 9, "nine2"),
    ],
}


def oracle(files: list[Path]) -> dict[int, tuple]:
    """Current state by plain Python: per key, the change with the highest sequence wins."""
    last: dict[int, tuple[str, dict[str, str], str]] = {}
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                key = int(row["customer_id"])
                if key not in last or row["AR_H_CHANGE_SEQ"] > last[key][0]:
                    last[key] = (row["AR_H_CHANGE_SEQ"], row, path.name)
    out = {}
    for key, (s, row, name) in last.items():
        if row["Op"] == "D":
            continue
        v = {k: (x if x != "" else None) for k, x in row.items()}
        out[key] = (
            v["name"],
            v["email"],
            v["tier"],
            Decimal(v["balance"]),
            datetime.fromisoformat(v["updated_at"]),
            s,
            name,
        )
    return out


def history_oracle(
    files: list[Path], pids: dict[str, str], new_record: bool = False, current: Any = None
) -> list[tuple]:
    """Change history by plain Python: per key, every change in sequence order; each insert or
    update is a version valid from its change time until the key's next change or delete
    (hard_deletes: invalidate), closed by the process that staged that next change. With
    `new_record`, each delete is a version too (a deletion record); `current`: the open
    versions' valid_to (dbt_valid_to_current), else None."""
    events: dict[int, list[tuple[str, dict[str, str], str]]] = {}
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                key = int(row["customer_id"])
                events.setdefault(key, []).append((row["AR_H_CHANGE_SEQ"], row, path.name))
    out = []
    for key, changes in events.items():
        changes.sort(key=lambda e: e[0])
        for i, (s, row, name) in enumerate(changes):
            if row["Op"] == "D" and not new_record:
                continue
            nxt = changes[i + 1] if i + 1 < len(changes) else None
            out.append(
                (
                    key,
                    s,
                    row["Op"],
                    row["name"] or None,
                    name,
                    change_time(s),
                    change_time(nxt[0]) if nxt else current,
                    pids[name],
                    pids[nxt[2]] if nxt else None,
                )
            )
    return sorted(out)


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
        change("D", 38, 10),
        partial(39, 10, "p", balance="1.50"),  # back after a delete: nothing to keep
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
BROKEN = {
    # Quarantined whole: its second row's operation is unknown (k13 must never appear).
    "20260301-081200000.csv": [change("I", 50, 13, "z"), ["X", seq(51), "11"] + [""] * 5],
}
LATE_TRUNCATED = {
    # Older than the truncate: stale in the current state, closed by it in the history.
    "20260301-082500000.csv": [change("U", 21, 1, "late2"), change("I", 22, 12, "twelve")],
}
SAMPLE_SNAPSHOTS = ("accounts", "accounts_history")  # not this scenario's


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


def history(rows: list[dict], names: dict[str, str] | None = None) -> list[tuple]:
    """The change-history table as the history oracle's tuples; `names`: renamed history
    columns (valid_from, valid_to, closed_process_id)."""
    lin = {**lineage_columns(), **(names or {})}
    return sorted(
        (
            r["customer_id"],
            r[lin["sequence"]],
            r[lin["operation"]],
            r["name"],
            r[lin["file_name"]],
            naive(r[lin["valid_from"]]),
            naive(r[lin["valid_to"]]),
            r[lin["process_id"]],
            r[lin["closed_process_id"]],
        )
        for r in rows
    )


def for_table(markers: list[dict], table: str) -> list[dict]:
    """The markers of one apply model (target_table is schema.identifier)."""
    return [m for m in markers if m["target_table"].rsplit(".", 1)[-1].strip('"`') == table]


def current(rows: list[dict]) -> dict[int, tuple]:
    lin = lineage_columns()
    return {
        r["customer_id"]: (
            r["name"],
            r["email"],
            r["tier"],
            r["balance"],
            r["updated_at"],
            r[lin["sequence"]],
            r[lin["file_name"]],
        )
        for r in rows
    }


def scenario_project(root: Path) -> Path:
    """A project copy for the scenario: customers declared with partial updates and a truncate
    operation (declare), the cdc package linked, the sample's snapshot entity left out."""
    make_project(root, without=SAMPLE_SNAPSHOTS)
    declare(root)
    link_package(root)
    return root


def check_truncate_markers(markers: list[dict], now: CurrentOracle) -> None:
    """The truncate's File: in customers, the rows it removed as deleted (k2's update before it
    was stale; k11 and k9, back after it, inserted); in the history, its changes as events."""
    cut = next(iter(TRUNCATE_FILE))
    applied = {m["file_name"]: m for m in for_table(markers, "customers")}[cut]
    assert now.removed[cut] > 0
    assert (applied["rows_inserted"], applied["rows_deleted"]) == (2, now.removed[cut])
    versions = {m["file_name"]: m for m in for_table(markers, "customers_changes_history")}[cut]
    counts = (versions["rows_inserted"], versions["rows_updated"], versions["rows_deleted"])
    assert counts == (1, 2, 1)
