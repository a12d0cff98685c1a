"""docs/tutorial.md followed as written: each `sh` block's commands run in order, as processes,
from a project root with the shipped tutorial Files (`make setup` is the one command skipped:
the test's project is a set-up copy). The orders table equals a plain-Python oracle of the Files
applied at each step, on the embedded default and on PostgreSQL."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from decimal import Decimal

import pytest
from helpers.project import CHANGES_HISTORY, REPO, drop_pg_schemas, pg_connect

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]

PAGE = REPO / "docs" / "tutorial.md"
FILES = REPO / "docs" / "tutorial" / "orders"


def oracle(names: list[str]) -> dict[int, tuple[str, Decimal]]:
    """order_id -> (status, amount) after the named Files' changes in sequence order."""
    rows = []
    for name in names:
        with open(FILES / name, encoding="utf-8", newline="") as handle:
            rows += list(csv.DictReader(handle))
    now: dict[int, tuple[str, Decimal]] = {}
    for r in sorted(rows, key=lambda r: r["AR_H_CHANGE_SEQ"]):
        if r["Op"] == "D":
            now.pop(int(r["order_id"]), None)
        else:
            now[int(r["order_id"])] = (r["status"], Decimal(r["amount"]))
    return now


def test_the_tutorial_runs_as_written(cli_project) -> None:  # noqa: ANN001
    cli = cli_project("local", without=CHANGES_HISTORY, processes=True)
    # The postgres target's Audit DB in a schema of this test's own (the only difference from
    # what a user's environment has: runner.yml's default is shared by every project).
    on_postgres = dict(cli.env, CDC_AUDIT_SCHEMA=cli.schema + "_audit")
    shutil.copytree(FILES, cli.root / "docs" / "tutorial" / "orders")
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    commands = [[ln for ln in b.splitlines() if ln.strip()] for b in blocks]
    assert commands[0] == ["make setup"], commands[0]
    ran: list[str] = []
    try:
        for block in commands[1:]:
            for line in block:
                env = on_postgres if line.endswith("--target postgres") else cli.env
                done = subprocess.run(["bash", "-c", line], cwd=cli.root, env=env,
                                      capture_output=True, text=True, timeout=900)  # fmt: skip
                assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr}"
                ran.append(line)
                if line.startswith("dbt show"):  # step 4: the first two Files applied
                    shown = re.findall(r"\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)\s*\|", done.stdout)
                    got = {int(i): (s, Decimal(a)) for i, s, a in shown}
                    assert got == oracle(["LOAD00000001.csv", "20260301-090000000.csv"]), (
                        done.stdout
                    )
        assert any(ln.endswith("--target postgres") for ln in ran), ran
        everything = oracle(sorted(p.name for p in FILES.glob("*.csv")))
        local = cli.table("{{ ref('orders') }}")
        assert {int(r["order_id"]): (r["status"], Decimal(str(r["amount"]))) for r in local} == (
            everything
        )
        conn = pg_connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f'select order_id, status, amount from "{cli.schema}".orders')
                assert {int(i): (s, a) for i, s, a in cur.fetchall()} == everything
        finally:
            conn.close()
        again = subprocess.run(["bash", "-c", "runner run --landing landing"], cwd=cli.root,
                               env=cli.env, capture_output=True, text=True)  # fmt: skip
        assert again.returncode == 0 and "nothing new" in again.stdout, again.stdout
    finally:
        drop_pg_schemas(cli.schema, cli.schema + "_audit")
