"""Files whose columns differ from their entity's declaration (meta.cdc.on_schema_change), on
local Spark and PostgreSQL, each table against a plain-Python oracle of the Files.

By default (fail) a File with an undeclared column is quarantined with the column named and what
to do; under `ignore` it is staged without it (a warning names it); under `append_new_columns`
the column is added to the staging table and reaches every apply model that selects it, older
rows NULL; under `sync_all_columns` a declared column a File lacks is NULL too. A declared type
that widens is altered in place; one that narrows quarantines the Files."""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle, naive, shown_customers
from helpers.project import CHANGES_HISTORY, bigquery_rows
from helpers.scenario import HEADER, ROUND_1, change, change_time, write

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


def _with_new_column(path: Path) -> Path:
    """Changes as a source would write them after `loyalty` was added to its table."""
    rows = [change("U", 50, 1, "grown"), change("I", 51, 10, "new"), change("D", 52, 3)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow([*HEADER[:4], "loyalty", *HEADER[4:]])
        for n, r in enumerate(rows):
            out.writerow([*r[:4], f"L{n}", *r[4:]])
    return path


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_new_column_is_quarantined_by_default_and_left_out_when_ignored(
    cli_project, target: str
) -> None:  # noqa: ANN001
    cli = cli_project(target, without=CHANGES_HISTORY)
    landing = cli.root / "landing" / "customers"
    files = [write(landing / n, rows) for n, rows in ROUND_1.items()]
    cli.runner("run", "--landing", "landing")
    grown = _with_new_column(landing / "20260301-090000000.csv")

    out = cli.runner("run", "--landing", "landing", ok=(1,))
    status = json.loads(cli.runner("status", "--json").stdout)
    reason = next(f["last_error"] for f in status if f["path"].endswith(grown.name))
    assert reason.startswith(
        f"{grown.name}: line 1, column 'loyalty': not declared for entity 'customers'"
    ), reason
    assert "on_schema_change: append_new_columns to add it" in reason, reason
    assert "or ignore to stage the File without it" in reason, reason
    assert shown_customers(cli.table("{{ ref('customers') }}")) == customers_oracle(files), (
        out.stdout
    )

    declared = cli.root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    text = declared.read_text()
    assert text.count("            mode: cdc\n") >= 1
    declared.write_text(
        text.replace(
            "            mode: cdc\n",
            "            mode: cdc\n            on_schema_change: ignore\n",
            1,
        )
    )
    cli.runner("retry", "--quarantined")
    done = cli.runner("run", "--landing", "landing")
    assert "'loyalty' not declared for customers: staged without" in done.stderr, done.stderr
    shown = shown_customers(cli.table("{{ ref('customers') }}"))
    assert shown == customers_oracle([*files, grown])
    states = {f["path"].rsplit("/", 1)[-1]: f["state"] for f in json.loads(
        cli.runner("status", "--json").stdout)}  # fmt: skip
    assert states[grown.name] == "COMMITTED", states


# The apply models as a user writes them to carry new columns: cdc.entity_columns() selects
# every column of the staging relation (but the operation, sequence and lineage columns).
CARRY_NEW_COLUMNS = {
    "customers.sql": "select {{ cdc.entity_columns(ref('stg_customers')) }},\n"
    "    {{ cdc.lineage_select() }}\nfrom {{ cdc.unapplied(ref('stg_customers')) }}\n",
    "customers_changes_history.sql": "select {{ cdc.entity_columns(ref('stg_customers')) }},\n"
    "    {{ cdc.dms_change_time('AR_H_CHANGE_SEQ') }} as changed_at,\n"
    "    {{ cdc.lineage_select() }}\nfrom {{ cdc.unapplied(ref('stg_customers')) }}\n",
}


def _rows(files: list[Path]) -> list[dict[str, str]]:
    out = []
    for path in files:
        with open(path, encoding="utf-8", newline="") as handle:
            out.extend(csv.DictReader(handle))
    return out


def _current(files: list[Path]) -> dict[int, tuple]:
    """Per key the change with the highest sequence, deletes removed; a column a File lacks is
    NULL in its rows."""
    last: dict[int, dict[str, str]] = {}
    for row in _rows(files):
        key = int(row["customer_id"])
        if key not in last or row["AR_H_CHANGE_SEQ"] > last[key]["AR_H_CHANGE_SEQ"]:
            last[key] = row
    return {
        k: (
            r.get("name") or None,
            r.get("email") or None,
            r.get("tier") or None,
            Decimal(r["balance"]),
            datetime.fromisoformat(r["updated_at"]),
            r.get("loyalty") or None,
        )
        for k, r in last.items()
        if r["Op"] != "D"
    }


def _versions(files: list[Path]) -> list[tuple]:
    """The change history: per key, each insert or update a version from its change time to the
    key's next change (None: still current), with its File's loyalty (None where it had none)."""
    by_key: dict[int, list[dict[str, str]]] = {}
    for row in _rows(files):
        by_key.setdefault(int(row["customer_id"]), []).append(row)
    out = []
    for key, rows in by_key.items():
        rows.sort(key=lambda r: r["AR_H_CHANGE_SEQ"])
        for i, r in enumerate(rows):
            if r["Op"] != "D":
                until = change_time(rows[i + 1]["AR_H_CHANGE_SEQ"]) if i + 1 < len(rows) else None
                out.append(
                    (key, change_time(r["AR_H_CHANGE_SEQ"]), until, r.get("loyalty") or None)
                )
    return sorted(out, key=str)


def _shown(cli, relation: str) -> dict[int, tuple]:  # noqa: ANN001
    return shown_customers(cli.table(relation), extra=("loyalty",))


def _policy(root: Path, policy: str, balance: str | None = None) -> None:
    declared = root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    text = re.sub(r"\n            on_schema_change: \w+", "", declared.read_text())
    text = text.replace("            mode: cdc\n", f"            mode: cdc\n"
                        f"            on_schema_change: {policy}\n", 1)  # fmt: skip
    if balance:
        text = re.sub(r"(- name: balance\n\s+data_type: )\S+", rf"\g<1>{balance}", text, count=1)
    declared.write_text(text)


def _without(path: Path, column: str, row: list[str]) -> Path:
    """A File of one change, written by a source that no longer has ``column``."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle, lineterminator="\n")
        w.writerow([h for h in HEADER if h != column])
        w.writerow([v for h, v in zip(HEADER, row, strict=True) if h != column])
    return path


def _states(cli) -> dict[str, str]:  # noqa: ANN001
    status = json.loads(cli.runner("status", "--json").stdout)
    return {f["path"].rsplit("/", 1)[-1]: f["state"] for f in status}


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_new_columns_are_added_missing_ones_null_and_types_widen_in_place(
    cli_project, target: str
) -> None:  # noqa: ANN001
    """append_new_columns: a File's new column reaches the staging table, the current state, the
    change history and the dbt snapshot (older rows NULL), said with the YAML to declare it;
    sync_all_columns: a File without a declared column stages it as NULL, never a key or the
    sequence; a declared type that widens is applied in place to every table, one that narrows
    quarantines the entity's Files with the column named."""
    cli = cli_project(target)
    models = cli.root / "dbt_project" / "models"
    for name, sql in CARRY_NEW_COLUMNS.items():
        (models / name).write_text(sql)
    _policy(cli.root, "append_new_columns")
    landing = cli.root / "landing" / "customers"
    files = [write(landing / n, rows) for n, rows in ROUND_1.items()]
    cli.runner("run", "--landing", "landing")
    grown = _with_new_column(landing / "20260301-090000000.csv")
    files.append(grown)

    out = cli.runner("run", "--landing", "landing")
    assert "schema change: customers: loyalty added to staging table customers__staged" in (
        out.stdout
    ), out.stdout
    assert "  - name: loyalty\n    data_type: string" in out.stdout, out.stdout
    assert _shown(cli, "{{ ref('customers') }}") == _current(files)
    history = cli.table("{{ ref('customers_changes_history') }}")
    shown = [(r["customer_id"], naive(r["_cdc_valid_from"]),
              r["_cdc_valid_to"] and naive(r["_cdc_valid_to"]), r["loyalty"])
             for r in history]  # fmt: skip
    assert sorted(shown, key=str) == _versions(files)
    snapshot = cli.table("{{ ref('customers_history') }} where dbt_valid_to is null")
    assert {r["customer_id"]: r["loyalty"] for r in snapshot} == {
        k: v[-1] for k, v in _current(files).items()
    }
    assert "loyalty" not in (cli.root / "dbt_project" / "models" / "staging" /
                             "cdc_sources.yml").read_text()  # fmt: skip

    # sync_all_columns, and balance widened from decimal(12,2) to decimal(14,2) in the
    # declaration: a File without `email` (declared) and `loyalty` (added) stages them NULL, one
    # without the sequence is quarantined with what every File must hold; every table's
    # balance is widened in place and holds a value of 14 digits.
    _policy(cli.root, "sync_all_columns", balance="decimal(14,2)")
    thin = _without(landing / "20260301-100000000.csv", "email", change("U", 60, 2, "thin"))
    no_seq = _without(landing / "20260301-110000000.csv", "AR_H_CHANGE_SEQ", change("U", 61, 4))
    wide = change("U", 70, 5, "wide")
    wide[HEADER.index("balance")] = "123456789012.34"
    files += [thin, write(landing / "20260301-120000000.csv", [wide])]
    cli.runner("run", "--landing", "landing", ok=(1,))
    status = json.loads(cli.runner("status", "--json").stdout)
    reason = next(f["last_error"] for f in status if f["path"].endswith(no_seq.name))
    assert reason.startswith(
        f"{no_seq.name}: line 1, column 'AR_H_CHANGE_SEQ': declared column missing"
    ), reason
    assert "keys, sequence and operation columns" in reason, reason
    assert _shown(cli, "{{ ref('customers') }}") == _current(files)
    snapshot = cli.table("{{ ref('customers_history') }} where dbt_valid_to is null")
    assert {r["customer_id"]: Decimal(str(r["balance"])) for r in snapshot} == {
        k: v[3] for k, v in _current(files).items()
    }

    # A narrowing (to decimal(10,2)): the entity's Files are quarantined, the tables untouched.
    _policy(cli.root, "sync_all_columns", balance="decimal(10,2)")
    narrow = write(landing / "20260301-130000000.csv", [change("U", 80, 6, "narrow")])
    cli.runner("run", "--landing", "landing", ok=(1,))
    status = json.loads(cli.runner("status", "--json").stdout)
    reason = next(f["last_error"] for f in status if f["path"].endswith(narrow.name))
    assert reason.startswith(
        f"{narrow.name}: column 'balance': declared decimal(10,2), but the staging table "
        "customers__staged holds decimal(14,2)"
    ), reason
    states = _states(cli)  # (its File quarantined: nothing was applied)
    assert states[narrow.name] == "QUARANTINED", states
    assert {states[p.name] for p in files} == {"COMMITTED"}, states


@pytest.mark.bigquery
def test_a_new_column_reaches_the_tables_on_the_bigquery_emulator(cli_project) -> None:  # noqa: ANN001
    """append_new_columns on BigQuery's emulator: the staging table gains the column and the
    current state gains it at the next build (older rows NULL), equal to the oracle. (The change
    history and dbt snapshots are left out here: docs/declarations.md, Schema changes.)"""
    cli = cli_project("bigquery", CHANGES_HISTORY)
    (cli.root / "dbt_project" / "snapshots" / "customers_history.yml").unlink()
    (cli.root / "dbt_project" / "models" / "customers.sql").write_text(
        CARRY_NEW_COLUMNS["customers.sql"]
    )
    _policy(cli.root, "append_new_columns")
    landing = cli.root / "landing" / "customers"
    files = [write(landing / n, rows) for n, rows in ROUND_1.items()]
    cli.runner("run", "--landing", "landing")
    files.append(_with_new_column(landing / "20260301-090000000.csv"))
    out = cli.runner("run", "--landing", "landing")
    assert "schema change: customers: loyalty added to staging table" in out.stdout, out.stdout
    current = {
        r["customer_id"]: (r["name"], r["email"], r["tier"], Decimal(str(r["balance"])),
                           naive(r["updated_at"]), r["loyalty"])
        for r in bigquery_rows(cli, "customers")
    }  # fmt: skip
    assert current == _current(files)
