"""The command-line contract an independent check uses, run as real processes from a fresh
project root: `runner ingest`, `dbt build`, `runner reconcile`, `runner status --json` and
`dbt show ... --output json`, with `--target T` after the subcommand, on the local, postgres and
bigquery (local emulator) targets."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import Cli

from runner.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


def oracle(files: list[Path]) -> dict[int, tuple]:
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


def naive(value: str | datetime) -> datetime:
    """A timestamp as the oracle has it: naive UTC (BigQuery's come back with an offset)."""
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


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


@pytest.mark.parametrize(
    "target",
    [
        "local",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("bigquery", marks=pytest.mark.bigquery),
    ],
)
def test_the_documented_commands_produce_the_expected_table(
    tmp_path: Path, target: str, cli_project: Callable[[str], Cli]
) -> None:
    """Exactly the forms of the README and the issues, `--target` after the subcommand."""
    cli = cli_project(target)
    landing = tmp_path / "landing"
    files = generate_customers(landing / "customers", initial=40, files=3, changes_per_file=25)
    shutil.copy(files[1], landing / "customers" / "copy.csv")
    (landing / "customers" / "broken.csv").write_text(
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\nI,1,x,,,,,\n"
    )
    t = ("--target", target)
    # 1: a File was quarantined
    out = cli("runner", "ingest", "--landing", str(landing), *t, "-v", ok=(1,))
    # Not a terminal, with -v: progress comes as plain key=value log lines.
    n = len(files) + 2
    assert f"progress phase=hash entity=customers files={n}/{n} bytes=" in out.stderr
    assert "progress phase=stage entity=customers files=" in out.stderr
    cli("dbt", "build", "--project-dir", "dbt_project", *t)
    cli("runner", "reconcile", *t)
    status = {
        Path(f["path"]).name: f["state"]
        for f in json.loads(cli("runner", "status", "--json", *t).stdout)
    }
    assert status == {
        **{p.name: "COMMITTED" for p in files},
        "copy.csv": "DUPLICATE",
        "broken.csv": "QUARANTINED",
    }
    shown = cli(
        "dbt",
        "show",
        "--project-dir",
        "dbt_project",
        *t,
        "--inline",
        "select * from {{ ref('customers') }}",
        "--limit",
        "-1",
        "--output",
        "json",
        "-q",
    )
    assert shown_customers(json.loads(shown.stdout)["show"]) == oracle(files)
