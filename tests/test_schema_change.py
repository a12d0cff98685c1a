"""A File with a column its entity does not declare (meta.cdc.on_schema_change), on local Spark
and PostgreSQL. By default (fail) it is quarantined with the column named and what to do; after
the declaration says `on_schema_change: ignore` and the File is retried, it is staged without
the column (a warning names it) and the table equals the plain-Python oracle of every File."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle, shown_customers
from helpers.project import CHANGES_HISTORY
from helpers.scenario import HEADER, ROUND_1, change, write

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
    assert "on_schema_change: ignore" in reason, reason
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
