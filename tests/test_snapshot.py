"""Snapshot mode (meta.cdc.mode: snapshot): daily full extracts of `accounts`, turned into
inserts, updates and deletes by key and row hashes, checked after every run against a plain
Python expectation that applies the extracts in effective-date order.

Run through the documented commands (`runner run`, `dbt build`, `dbt show`, in this process),
on local Spark, PostgreSQL and BigQuery (the local emulator): two extracts in one run (the
intermediate state counts), a third in the next run, then a late extract older than what was
applied (stale: nothing changes), then a rerun; the markers' counts each time. Plus the
documented hash algorithm recomputed here from its description, and the staging errors of
snapshot Files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.faults import SPARK_COMMITS, stopped_before, walk_the_stops
from helpers.project import CHANGES_HISTORY, REPO, Cli

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

KEY = "account_id"
COMPARED = ["owner", "plan", "monthly_fee", "opened_on"]  # all but the key and extracted_at
COLUMNS = ["account_id", "owner", "plan", "monthly_fee", "opened_on", "extracted_at"]


# -- the expectation ----------------------------------------------------------------------


def _text(value: str, kind: str) -> str:
    """A CSV value as the documented hash text of its typed value (runner/staging/row_hash.py)."""
    if kind == "decimal":
        return f"{Decimal(value):.2f}"
    return value  # bigint digits, strings, yyyy-MM-dd dates as the generator writes them


def documented_hash(values: list[tuple[str | None, str]]) -> str:
    """SHA-256 of ``<length>:<text>`` per value (``~`` for NULL), joined with ``|``."""
    parts = ["~" if v is None else f"{len(_text(v, k))}:{_text(v, k)}" for v, k in values]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def row_hash(row: dict[str, str]) -> str:
    kinds = {"monthly_fee": "decimal"}
    return documented_hash([(row[c] or None, kinds.get(c, "text")) for c in COMPARED])


def key_hash(row: dict[str, str]) -> str:
    return documented_hash([(row[KEY], "bigint")])


@dataclass
class Version:
    row: dict[str, str]
    effective: date  # of the extract that last inserted or updated it
    operation: str  # I or U
    file_name: str


@dataclass
class Expected:
    """The table, its history and each applied File's counts, applying whole extracts in date
    order. ``pids``: the process id that staged each File (from `runner run --json`)."""

    state: dict[int, Version]
    counts: dict[str, tuple[int, int, int, int]]  # file -> inserted, updated, deleted, skipped
    pids: dict[str, str] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)  # every version, as read back
    watermark: date | None = None
    kind: str = "full"  # delta: a key missing from an extract is unchanged
    dates: dict[str, date] = field(default_factory=dict)  # given dates (effective_date: option)

    def date_of(self, path: Path) -> date:
        return self.dates.get(path.name) or extract_date(path)

    def _open(self, key: int, v: Version) -> None:
        self.history.append(
            {
                "key": key,
                "version": v,
                "valid_to": None,
                "closed_by": None,
                "pid": self.pids[v.file_name],
            }
        )

    def _close(self, key: int, when: date, file_name: str) -> None:
        (open_,) = [h for h in self.history if h["key"] == key and h["valid_to"] is None]
        open_["valid_to"], open_["closed_by"] = when, self.pids[file_name]

    def apply(self, files: list[Path]) -> None:
        for path in sorted(files, key=lambda p: (self.date_of(p), p.name)):
            when = self.date_of(path)
            with open(path, encoding="utf-8", newline="") as handle:
                rows = {int(r[KEY]): r for r in csv.DictReader(handle)}
            if self.watermark is not None and when < self.watermark:
                self.counts[path.name] = (0, 0, 0, len(rows))  # stale
                continue
            inserted = updated = unchanged = 0
            new_state: dict[int, Version] = {}
            for key, row in rows.items():
                old = self.state.get(key)
                if old is None:
                    inserted += 1
                    new_state[key] = Version(row, when, "I", path.name)
                    self._open(key, new_state[key])
                elif row_hash(old.row) != row_hash(row):
                    updated += 1
                    new_state[key] = Version(row, when, "U", path.name)
                    self._close(key, when, path.name)
                    self._open(key, new_state[key])
                else:
                    unchanged += 1
                    new_state[key] = old  # untouched, lineage included
            if self.kind == "delta":  # the keys not in the extract stay as they are
                new_state = {**self.state, **new_state}
            gone = set(self.state) - set(new_state)
            for key in gone:
                self._close(key, when, path.name)
            deleted = len(gone)
            self.state = new_state
            self.counts[path.name] = (inserted, updated, deleted, unchanged)
            self.watermark = when


def extract_date(path: Path) -> date:
    return datetime.strptime(path.stem.split("_")[1], "%Y-%m-%d").date()


# -- reading the destination back ---------------------------------------------------------


def shown(cli: Cli, sql: str) -> list[dict]:
    out = cli(
        "dbt",
        "show",
        "--project-dir",
        "dbt_project",
        "--target",
        cli.target,
        "--inline",
        sql,
        "--limit",
        "-1",
        "--output",
        "json",
        "-q",
    )
    return json.loads(out.stdout)["show"]


def _cents(value: object) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


def _day(value: object) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


Counts = dict[str, tuple[int, ...]]


@dataclass
class ReadBack:
    table: dict[int, tuple]  # accounts: key -> values
    counts: Counts  # accounts' markers: file -> inserted, updated, deleted, skipped
    history_counts: Counts  # accounts_history's markers
    history: list[tuple]  # accounts_history's rows, sorted


TABLE = ["owner", "plan", "monthly_fee", "opened_on", "_cdc_sequence", "_cdc_operation"]
TABLE += ["_cdc_file_name", "_cdc_key_hash", "_cdc_row_hash"]
HISTORY = ["_cdc_valid_from", "_cdc_valid_to", "owner", "plan", "monthly_fee", "opened_on"]
HISTORY += ["_cdc_operation", "_cdc_file_name", "_cdc_process_id", "_cdc_closed_process_id"]
HISTORY += ["_cdc_row_hash"]
MARKER = ["file_name", "rows_inserted", "rows_updated", "rows_deleted", "rows_skipped"]


def read_back(cli: Cli) -> ReadBack:
    """accounts, accounts_history and both tables' markers, in one `dbt show` (a process,
    as a user would run it; every value as text)."""
    s = "{{ dbt.type_string() }}"
    width = max(len(TABLE), len(HISTORY), len(MARKER))

    def items(cols: list[str]) -> str:
        out = [f"cast({c} as {s}) as v{i}" for i, c in enumerate(cols)]
        return ", ".join(out + [f"cast(null as {s}) as v{i}" for i in range(len(cols), width)])

    markers = "{{ source('cdc_state', 'applied_files') }}"
    rows = shown(
        cli,
        f"select 'row' as kind, cast(account_id as {s}) as k, {items(TABLE)}"
        " from {{ ref('accounts') }}"
        f" union all select 'version', cast(account_id as {s}), {items(HISTORY)}"
        " from {{ ref('accounts_history') }}"
        f" union all select case when target_table like '%.accounts' then 'marker'"
        f" else 'history marker' end, cast(null as {s}), {items(MARKER)}"
        f" from {markers}"
        " where target_table like '%.accounts' or target_table like '%.accounts_history'",
    )
    got = ReadBack({}, {}, {}, [])
    for r in rows:
        v = [r[f"v{i}"] for i in range(width)]
        if r["kind"] == "row":
            got.table[int(r["k"])] = (v[0], v[1], _cents(v[2]), _day(v[3]), _day(v[4]), *v[5:9])
        elif r["kind"] == "version":
            valid_to = None if v[1] is None else _day(v[1])
            got.history.append(
                (int(r["k"]), _day(v[0]), valid_to, v[2], v[3], _cents(v[4]), _day(v[5]), *v[6:11])
            )
        else:
            counts = got.counts if r["kind"] == "marker" else got.history_counts
            counts[v[0]] = tuple(int(x) for x in v[1:5])
    got.history.sort(key=repr)
    return got


def expected_history(exp: Expected) -> list[tuple]:
    out = []
    for h in exp.history:
        v: Version = h["version"]
        out.append(
            (
                h["key"],
                v.effective,
                h["valid_to"],
                v.row["owner"] or None,
                v.row["plan"] or None,
                Decimal(v.row["monthly_fee"]).quantize(Decimal("0.01")),
                date.fromisoformat(v.row["opened_on"]),
                v.operation,
                v.file_name,
                h["pid"],
                h["closed_by"],
                row_hash(v.row),
            )
        )
    return sorted(out, key=repr)


def expected_table(exp: Expected) -> dict[int, tuple]:
    return {
        k: (
            v.row["owner"] or None,
            v.row["plan"] or None,
            Decimal(v.row["monthly_fee"]).quantize(Decimal("0.01")),
            date.fromisoformat(v.row["opened_on"]),
            v.effective,
            v.operation,
            v.file_name,
            key_hash(v.row),
            row_hash(v.row),
        )
        for k, v in exp.state.items()
    }


# -- the scenario ---------------------------------------------------------------------------


def extracts(tmp_path: Path) -> list[Path]:

    from runner.entities import load_entities
    from runner.project import Project
    from runner.samples.generate import SnapshotSpec, generate_snapshots

    entity = load_entities(Project.load(REPO, target="local"))["accounts"]
    spec = SnapshotSpec(initial=30, incremental=32, days=3, seed=5)
    return generate_snapshots(entity, tmp_path / "generated", spec)


@pytest.mark.parametrize(
    "target",
    [
        "local",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("bigquery", marks=pytest.mark.bigquery),
    ],
)
def test_daily_extracts_give_the_expected_table_and_counts(
    tmp_path: Path, target: str, cli_project: Callable[[str], Cli]
) -> None:
    cli = cli_project(target, without=CHANGES_HISTORY)
    day1, day2, day3 = extracts(tmp_path)
    landing = tmp_path / "landing"
    folder = landing / "accounts"
    folder.mkdir(parents=True)
    exp = Expected({}, {})
    t = ("--target", target)

    def run(*new: Path, check: bool = True) -> None:
        """Land and run; with ``check``, read everything back against the expectation."""
        for path in new:
            shutil.copy(path, folder / path.name)
        out = cli(
            "runner",
            "run",
            "--json",
            "--landing",
            str(landing),
            "--entity",
            "accounts",
            *t,
            "--",
            "--select",
            "+accounts +accounts_history",
            "--exclude",
            "resource_type:test",  # the data tests run once, with the rerun below
        )
        exp.pids.update({p.name: json.loads(out.stdout)["process_id"] for p in new})
        exp.apply(list(new))
        if check:
            got = read_back(cli)
            assert got.table == expected_table(exp)
            assert got.counts == exp.counts
            assert got.history == expected_history(exp)
            assert got.history_counts == exp.counts  # the history applies the same Files

    def walked(path: Path) -> None:
        """Land and ingest; the apply of both models stopped before each of its statements
        in turn, then run to the end; reconcile."""
        from dbt.cli.main import dbtRunner

        shutil.copy(path, folder / path.name)
        out = cli("runner", "ingest", "--landing", str(landing), "--entity", "accounts", *t)
        exp.pids[path.name] = re.search(r"process ([0-9a-f-]{36})", out.stdout).group(1)
        exp.apply([path])
        args = ["build", "--project-dir", "dbt_project", "--select", "accounts accounts_history",
                "--exclude", "resource_type:test", *t]  # fmt: skip

        def build() -> object:
            with cli._environment():
                return dbtRunner().invoke(args)

        # On local Spark before each commit (SPARK_COMMITS): what a kill can leave there.
        only = SPARK_COMMITS if target == "local" else None
        stops = walk_the_stops(build, ("accounts", "accounts_history"), only=only)
        end = "drop table" if target == "local" else "COMMIT"
        for model in ("accounts", "accounts_history"):
            stopped_before(stops[model], "merge into", "cdc_applied_files", end)
        cli("runner", "reconcile", *t)

    def late_run(path: Path) -> None:
        """Land, ingest and build both models (two builds of them at once, and a snapshot
        history held between its MERGE and its markers while another build runs:
        tests/test_concurrency.py)."""
        shutil.copy(path, folder / path.name)
        out = cli("runner", "ingest", "--landing", str(landing), "--entity", "accounts", *t)
        exp.pids[path.name] = re.search(r"process ([0-9a-f-]{36})", out.stdout).group(1)
        exp.apply([path])
        select = ("--select", "accounts accounts_history", "--exclude", "resource_type:test")
        cli("dbt", "build", "--project-dir", "dbt_project", *t, *select)

    # Two extracts in one run: the second is compared with the first, not with the target.
    run(day1, day2)
    assert all(exp.counts[day2.name][:3]), exp.counts  # inserts, updates and deletes
    # The next extract, its apply stopped before every statement in turn (not on BigQuery: one
    # script); then a late extract, older than what was applied, with changed values: stale,
    # it changes nothing. Read back once, after a rerun of the apply (dbt build with its data
    # tests): one read covers the three.
    if target == "bigquery":
        run(day3, check=False)
    else:
        walked(day3)
    # On Spark the counts in a marker written by a replay describe that replay (documented):
    # the stopped extract's are compared on PostgreSQL, where a stopped apply left nothing.
    before = expected_table(exp)
    late = tmp_path / "accounts_2026-03-02_resent.csv"
    text = day2.read_text(encoding="utf-8").replace(",2026-", ",2025-")
    late.write_text(text, encoding="utf-8")
    if target == "bigquery":
        run(late, check=False)
    else:
        late_run(late)
    assert expected_table(exp) == before and any(exp.counts[day3.name][:3])
    assert exp.counts[late.name] == (0, 0, 0, len(text.splitlines()) - 1)
    # (the walked extract's, replayed by the build after the stops on Spark, are stale there)
    replayed = {day3.name} if target == "local" else set()
    cli("dbt", "build", "--project-dir", "dbt_project", "--select", "accounts accounts_history", *t)
    got = read_back(cli)
    counts = {k: v for k, v in exp.counts.items() if k not in replayed}
    assert got.table == before
    assert {k: v for k, v in got.counts.items() if k not in replayed} == counts
    assert {k: v for k, v in got.history_counts.items() if k not in replayed} == counts
    assert got.history == expected_history(exp)


@pytest.mark.postgres
def test_delta_extracts_with_given_dates_never_delete(
    tmp_path: Path, cli_project: Callable[[str], Cli]
) -> None:
    """`snapshot_kind: delta` with `effective_date: option`: each extract holds only some rows
    (changed, unchanged and new ones); a key it lacks is unchanged, never deleted; the dates
    come from `runner run --effective-date`, the file names carry none."""
    cli = cli_project("postgres", without=CHANGES_HISTORY)
    decl = cli.root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    text = decl.read_text()
    pattern = "            effective_date:\n              file_pattern: '(\\d{4}-\\d{2}-\\d{2})'\n"
    assert text.count(pattern) == 1 and text.count("snapshot_kind: full") == 1
    text = text.replace(pattern, "            effective_date: option\n")
    decl.write_text(text.replace("snapshot_kind: full", "snapshot_kind: delta"))

    day1, day2, _ = extracts(tmp_path)
    with open(day1, encoding="utf-8", newline="") as handle:
        first = {r[KEY]: r for r in csv.DictReader(handle)}
    with open(day2, encoding="utf-8", newline="") as handle:
        second = list(csv.DictReader(handle))
    # the delta: every changed and new row of day 2, and every other unchanged one
    unchanged = [r for r in second if r[KEY] in first and row_hash(first[r[KEY]]) == row_hash(r)]
    delta = [r for r in second if r not in unchanged] + unchanged[::2]
    assert len(delta) < len(second) and len(first.keys() - {r[KEY] for r in delta}) > 0
    folder = tmp_path / "landing" / "accounts"
    folder.mkdir(parents=True)
    a, b = tmp_path / "accounts_initial.csv", tmp_path / "accounts_changes.csv"
    shutil.copy(day1, a)
    with open(b, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(delta)

    exp = Expected({}, {}, kind="delta", dates={a.name: date(2026, 4, 1), b.name: date(2026, 4, 2)})
    for path in (a, b):
        shutil.copy(path, folder / path.name)
        out = cli(
            "runner", "run", "--json", "--landing", str(folder.parent), "--entity", "accounts",
            "--effective-date", exp.dates[path.name].isoformat(), "--target", "postgres",
            "--", "--select", "+accounts +accounts_history",
        )  # fmt: skip
        exp.pids[path.name] = json.loads(out.stdout)["process_id"]
        exp.apply([path])
    got = read_back(cli)  # once, at the end (the history shows the first extract's state)
    assert got.table == expected_table(exp)
    assert got.history == expected_history(exp)
    assert got.counts == got.history_counts == exp.counts
    assert exp.counts[b.name][2] == 0 and len(got.table) == len(
        first.keys() | {r[KEY] for r in delta}
    )


def test_hashes_follow_the_documented_algorithm(spark, tmp_path: Path) -> None:  # noqa: ANN001
    """The staged hashes of typed values against this file's own reading of the algorithm,
    for NULLs, empty strings, separators inside values, decimals, dates and timestamps."""
    from pyspark.sql import functions as F

    from runner.staging.row_hash import hash_of

    rows = [
        ("a|b", None, "10.5", "2026-03-01", "2026-03-01 08:00:00"),
        ("", "x", "-0.01", "1999-12-31", "2026-03-01 08:00:00.123456"),
        ("1:", "~", "0", None, None),
    ]
    df = spark.createDataFrame(rows, "s1 string, s2 string, d string, dt string, ts string")
    typed = df.select(
        "s1",
        "s2",
        F.col("d").cast("decimal(12,2)").alias("d"),
        F.col("dt").cast("date").alias("dt"),
        F.col("ts").cast("timestamp").alias("ts"),
    )
    types = [
        ("s1", "string"),
        ("s2", "string"),
        ("d", "decimal(12,2)"),
        ("dt", "date"),
        ("ts", "timestamp"),
    ]
    got = [r[0] for r in typed.select(hash_of(types)).collect()]

    def text(v: str | None, kind: str) -> str | None:
        if v is None:
            return None
        if kind == "d":
            return f"{Decimal(v):.2f}"
        if kind == "ts":
            return datetime.fromisoformat(v).strftime("%Y-%m-%d %H:%M:%S.%f")
        return v

    def mine(row: tuple) -> str:
        parts = []
        for v, (name, _) in zip(row, types, strict=True):
            t = text(v, name)
            parts.append("~" if t is None else f"{len(t)}:{t}")
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    assert got == [mine(r) for r in rows]
    assert len(set(got)) == 3


BAD = {
    # two rows for one key
    "accounts_2026-03-01.csv": (
        "1,a,p,1.00,2026-01-01,2026-03-01 00:00:00\n"
        "2,b,p,1.00,2026-01-01,2026-03-01 00:00:00\n"
        "1,c,p,1.00,2026-01-01,2026-03-01 00:00:00\n",
        "line 4: same key (account_id=1) as line 2; a snapshot File has one row per key",
    ),
    # no date in the name
    "accounts_latest.csv": (
        "1,a,p,1.00,2026-01-01,2026-03-01 00:00:00\n",
        "the file name does not match effective_date file_pattern",
    ),
    # a NULL key
    "accounts_2026-03-02.csv": (
        "1,a,p,1.00,2026-01-01,2026-03-01 00:00:00\n,b,p,1.00,2026-01-01,2026-03-01 00:00:00\n",
        "line 3, column 'account_id': NULL in a key",
    ),
}


def test_bad_snapshot_files_are_quarantined_with_their_lines(
    tmp_path: Path, cli_project: Callable[[str], Cli]
) -> None:
    cli = cli_project("local", without=CHANGES_HISTORY)
    folder = tmp_path / "landing" / "accounts"
    folder.mkdir(parents=True)
    header = ",".join(COLUMNS) + "\n"
    for name, (rows, _) in BAD.items():
        (folder / name).write_text(header + rows, encoding="utf-8")
    cli("runner", "ingest", "--landing", str(tmp_path / "landing"), "--entity", "accounts", ok=(1,))
    files = {Path(f["path"]).name: f for f in json.loads(cli("runner", "status", "--json").stdout)}
    assert {n: f["state"] for n, f in files.items()} == dict.fromkeys(BAD, "QUARANTINED")
    for name, (_, expected) in BAD.items():
        assert expected in files[name]["last_error"], files[name]["last_error"]
        assert name in files[name]["last_error"]
