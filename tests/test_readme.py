"""The README's recipe, "Your own entity in four files", followed as written: its four code
blocks put where it says, a new entity's Files landed, the command it gives run as a process;
the table equals a plain-Python oracle of the Files' changes."""

from __future__ import annotations

import csv
import json
import re
import textwrap
from decimal import Decimal

import pytest
import yaml
from helpers.project import CHANGES_HISTORY, REPO
from helpers.scenario import seq

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

RECIPE = "## Your own entity in four files"
FILES = [  # (name, rows): Op, sequence, order_id, amount
    ("LOAD00000001.csv", [("I", 1, 1, "10.00"), ("I", 2, 2, "20.50"), ("I", 3, 3, "7.25")]),
    ("20260301-080500000.csv", [("U", 5, 2, "21.00"), ("D", 4, 3, ""), ("I", 6, 4, "99.99"),
                                ("U", 7, 2, "22.00")]),
]  # fmt: skip


def recipe() -> list[tuple[str, str]]:
    """The recipe's code blocks, in order: (language, text)."""
    section = (REPO / "README.md").read_text().split(RECIPE, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_the_readmes_recipe_adds_an_entity_that_applies(cli_project) -> None:  # noqa: ANN001
    blocks = recipe()
    assert [lang for lang, _ in blocks] == ["yaml", "sql", "sql", "yaml"], blocks
    cli = cli_project("local", without=CHANGES_HISTORY, processes=True)
    project = cli.root / "dbt_project"
    sources = project / "models" / "staging" / "cdc_sources.yml"
    doc = yaml.safe_load(sources.read_text())
    staging = next(s for s in doc["sources"] if s["name"] == "cdc_staging")
    staging["tables"].extend(yaml.safe_load(textwrap.dedent(blocks[0][1])))  # 1. declared
    sources.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    (project / "models" / "staging" / "stg_orders.sql").write_text(blocks[1][1])  # 2.
    (project / "models" / "orders.sql").write_text(blocks[2][1])  # 3.
    (project / "models" / "orders.yml").write_text(blocks[3][1])  # 4.

    folder = cli.root / "landing" / "orders"
    folder.mkdir(parents=True)
    expected: dict[int, Decimal] = {}
    for name, rows in FILES:
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            w = csv.writer(handle, lineterminator="\n")
            w.writerow(["Op", "AR_H_CHANGE_SEQ", "order_id", "amount"])
            w.writerows([op, seq(n), key, amount] for op, n, key, amount in rows)
        for op, _, key, amount in sorted(rows, key=lambda r: r[1]):  # in sequence order
            if op == "D":
                expected.pop(key, None)
            else:
                expected[key] = Decimal(amount)

    done = cli("runner", "run", "--landing", "landing")  # the recipe's command, as written
    assert "orders" in done.stdout, done.stdout
    got = {int(r["order_id"]): Decimal(str(r["amount"])) for r in cli.table("{{ ref('orders') }}")}
    assert got == {k: v for k, v in expected.items()}
    status = json.loads(cli.runner("status", "--json", "--entity", "orders").stdout)
    assert sorted(f["state"] for f in status) == ["COMMITTED", "COMMITTED"], status
