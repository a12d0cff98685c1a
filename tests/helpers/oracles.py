"""Plain-Python expectations for the sample `customers` entity (DMS CSV Files as
runner.generate and the tests write them), and the readers that put a destination's answer in
the same shape."""

from __future__ import annotations

import csv
import re
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from helpers.project import PG_URL
from runner.contract import lineage_columns
from runner.run import lost_a_race

HEADER = "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\n"


def customers_oracle(files: list[Path]) -> dict[int, tuple]:
    """The current state: per key, the change with the highest sequence wins; deletes remove."""
    last: dict[int, dict[str, str]] = {}
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                key = int(row["customer_id"])
                if key not in last or row["AR_H_CHANGE_SEQ"] > last[key]["AR_H_CHANGE_SEQ"]:
                    last[key] = row
    return {
        k: (
            r["name"] or None,
            r["email"] or None,
            r["tier"] or None,
            Decimal(r["balance"]),
            datetime.fromisoformat(r["updated_at"]),
        )
        for k, r in last.items()
        if r["Op"] != "D"
    }


def naive(value: Any) -> Any:
    """A timestamp as a naive UTC datetime, whether a destination gives a datetime or ISO text
    (BigQuery's come back with an offset)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def shown_customers(shown: list[dict], extra: tuple[str, ...] = ()) -> dict[int, tuple]:
    """Customers rows (`dbt show --output json`: floats and ISO strings, or a client's) as the
    oracle's tuples, followed by the ``extra`` columns."""
    return {
        r["customer_id"]: (
            r["name"],
            r["email"],
            r["tier"],
            Decimal(str(r["balance"])),
            naive(r["updated_at"]),
            *(r[c] for c in extra),
        )
        for r in shown
    }


def as_current(rows: list[dict]) -> dict[int, tuple]:
    keys = Counter(r["customer_id"] for r in rows)
    assert max(keys.values(), default=1) == 1, "a key has two current rows"
    return shown_customers(rows)


def applied(cli: Any, files: list[Path]) -> dict[int, tuple]:
    """The customers table, after checking it has one marker per File (one `dbt show`, or two
    reads where the Cli reads local tables itself)."""
    markers = cli.read_here("{{ source('cdc_state', 'applied_files') }}")
    rows = cli.read_here("{{ ref('customers') }}") if markers is not None else None
    if markers is not None and rows is not None:
        hashes = [m["file_hash"] for m in markers if m["target_table"].endswith(".customers")]
        counts = {(len(hashes), len(set(hashes)))}
    else:
        rows = cli.table(
            "{{ ref('customers') }} as c cross join (select count(*) as n_markers, "
            "count(distinct file_hash) as n_files from {{ source('cdc_state', 'applied_files') }} "
            "where target_table like '%.customers') as m"
        )
        counts = {(r["n_markers"], r["n_files"]) for r in rows}
    assert counts == {(len(files), len(files))}, counts
    return as_current(rows)


# What a `dbt build` that lost a race to write one Iceberg table says: Iceberg's optimistic
# commit (the second writer of a table finds the files it read replaced, and fails), or, when
# both create the table or view on their first run, the catalog refusing the second create.
ICEBERG_CONFLICT = (
    "conflicting files",
    "commitfailedexception",
    "validationexception",
    "missing required files to delete",
    "table uuid does not match",
    "already exists",
    "concurrently modified",  # the copy-on-write MERGE saw the other build's commit first
    "updated concurrently",  # the catalog saw the other build replace the same view first
)


# What else a build racing another one over the same models may lose on: the other build
# dropped the apply's batch table of the same model under it (before or while it is read).
RACE_LOST = (
    *ICEBERG_CONFLICT,
    *(f"__cdc_{scratch}` cannot be found" for scratch in ("batch", "files", "truncate", "dedupe")),
    "dropped by another process",
    "tuple concurrently updated",  # PostgreSQL: two builds replacing one view at once
    "pg_type_typname_nsp_index",
    "drop external if exists",  # dbt-postgres caught the other build's view between states
    "cdc: another build applied files of",  # the snapshot apply's check (snapshot.sql)
)


# Builds of this schema waiting: on the markers table (held by the test), or for the apply's
# advisory lock of one of its tables (cdc.postgres_apply_lock: 'cdc apply <schema>.<table>',
# shown in pg_locks as its high and low 32 bits), which a second build of a table takes first.
WAITING = """
select count(*) from pg_locks l
where not l.granted and (
  l.relation in (select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
                 where n.nspname = %(schema)s)
  or (l.locktype = 'advisory' and exists (
    select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = %(schema)s and c.relkind in ('r', 'p', 'v')
    and ((l.classid::bigint << 32) | l.objid::bigint) in (
      hashtextextended('cdc apply ' || lower(n.nspname || '.' || c.relname), 0),
      hashtextextended('cdc view ' || lower(n.nspname || '.' || c.relname), 0)))))
"""


def builds_at_once(
    cli: Any, *args: str, gate: str = "cdc_applied_files"
) -> tuple[list[tuple[str, str]], list[int]]:
    """Two `dbt build ARGS` processes started together; on PostgreSQL the test holds an
    exclusive lock on the `gate` table (the markers) until both wait (on it, or the second for
    the first: its apply or view lock, or a table or view of the schema it holds), then lets
    them go at the same instant, so that what they do next overlaps every time. Their (stdout,
    stderr) and exit codes."""
    import psycopg2

    def start() -> subprocess.Popen[str]:
        return cli.start(
            "dbt", "build", "--project-dir", "dbt_project", "--target", cli.target, *args
        )

    if cli.target != "postgres":
        builds = [start() for _ in range(2)]
    else:
        schema = cli.env["CDC_SCHEMA"]
        holder = psycopg2.connect(PG_URL.replace("postgresql+psycopg2", "postgresql"))
        holder.autocommit = False
        builds = []
        try:
            with holder.cursor() as cur:
                cur.execute(f'LOCK TABLE "{schema}"."{gate}" IN ACCESS EXCLUSIVE MODE')
                builds = [start() for _ in range(2)]
                deadline = time.monotonic() + 180
                waiting = 0
                while waiting < 2:
                    assert time.monotonic() < deadline, "the two builds never reached the markers"
                    assert all(b.poll() is None for b in builds), "a build ended before the gate"
                    time.sleep(0.2)
                    with holder.cursor() as probe:  # same transaction: the lock stays held
                        probe.execute(WAITING, {"schema": schema})
                        waiting = probe.fetchone()[0]
            holder.commit()  # both go at once
        finally:
            holder.close()
    outs = [b.communicate(timeout=600) for b in builds]
    return outs, [b.returncode for b in builds]


def only_lost_races(outs: list[tuple[str, str]], codes: list[int]) -> None:
    """Each build that failed says it lost a race to a concurrent commit (Iceberg's conflict),
    and the runner would tell so."""
    for code, (out, err) in zip(codes, outs, strict=True):
        if code != 0:
            assert any(c in (out + err).lower() for c in RACE_LOST), error_lines(out + err)
            assert lost_a_race(out + err), error_lines(out + err)


def error_lines(text: str) -> str:
    """What a failed build said, without the JVM's stack frames."""
    said = [
        line
        for line in text.splitlines()
        if re.search(
            r"error|exception|failed|exists|concurrent|duplicate|cannot be found|not found",
            line,
            re.I,
        )
        and not line.strip().startswith("at ")
    ]
    return "\n".join(said[:40]) or text[-3000:]


def staged_oracle(path: Path) -> list[tuple]:
    """Staged rows of one good File, by plain Python: typed, exact duplicates dropped."""
    out, seen = [], set()
    with open(path, encoding="utf-8", newline="") as handle:
        for n, row in enumerate(csv.DictReader(handle), start=1):
            key = tuple(row.values())
            if key in seen:
                continue
            seen.add(key)
            v = {k: (x if x != "" else None) for k, x in row.items()}
            out.append(
                (
                    path.name,
                    n,
                    v["Op"],
                    v["AR_H_CHANGE_SEQ"],
                    int(v["customer_id"]),
                    v["name"],
                    v["email"],
                    v["tier"],
                    Decimal(v["balance"]) if v["balance"] else None,
                    datetime.fromisoformat(v["updated_at"]) if v["updated_at"] else None,
                )
            )
    return out


def staged_tuples(rows: list[dict]) -> list[tuple]:
    """Staged customers rows in the staged oracle's shape, sorted."""
    lin = lineage_columns()
    return sorted(
        (
            r[lin["file_name"]],
            r[lin["row_number"]],
            r["op"],
            r["ar_h_change_seq"],
            r["customer_id"],
            r["name"],
            r["email"],
            r["tier"],
            r["balance"],
            r["updated_at"],
        )
        for r in rows
    )
