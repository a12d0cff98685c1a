"""The command-line contract an independent check uses, run as real processes from a fresh
project root: `runner ingest`, `dbt build`, `runner reconcile`, `runner status --json` and
`dbt show ... --output json`, on the local and postgres targets."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import drop_pg_schema, make_project

from runner.generate import generate_customers
from runner.spark_session import link_iceberg_jar

pytestmark = [pytest.mark.spark, pytest.mark.dbt]
BIN = Path(sys.executable).parent


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


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_documented_commands_produce_the_expected_table(
    tmp_path: Path, target: str, request: pytest.FixtureRequest
) -> None:
    root = make_project(tmp_path / "repo")
    link_iceberg_jar(root)
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    env.pop("CDC_HOME", None)
    if target == "postgres":
        schema = request.getfixturevalue("pg_schema")
        env["CDC_SCHEMA"] = schema
        env["CDC_AUDIT_SCHEMA"] = schema + "_audit"
        request.addfinalizer(lambda: drop_pg_schema(request, schema + "_audit"))
    else:
        env["CDC_SCHEMA"] = "contract"

    stderr: list[str] = []

    def sh(*args: str, ok: tuple[int, ...] = (0,)) -> str:
        out = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode in ok, f"{args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        stderr.append(out.stderr)
        return out.stdout

    landing = tmp_path / "landing"
    files = generate_customers(landing / "customers", initial=40, files=3, changes_per_file=25)
    shutil.copy(files[1], landing / "customers" / "copy.csv")
    (landing / "customers" / "broken.csv").write_text(
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\nI,1,x,,,,,\n"
    )
    sh("dbt", "deps", "--project-dir", "dbt_project")
    t = ["--target", target]
    sh("runner", *t, "ingest", "--landing", str(landing), ok=(1,))  # 1: a File was quarantined
    # Not a terminal: progress comes as plain key=value log lines.
    n = len(files) + 2
    assert f"progress phase=hash entity=customers files={n}/{n} bytes=" in stderr[-1]
    assert "progress phase=stage entity=customers files=" in stderr[-1]
    sh("dbt", "build", "--project-dir", "dbt_project", *t)
    sh("runner", *t, "reconcile")
    status = {
        Path(f["path"]).name: f["state"] for f in json.loads(sh("runner", *t, "status", "--json"))
    }
    assert status == {
        **{p.name: "COMMITTED" for p in files},
        "copy.csv": "DUPLICATE",
        "broken.csv": "QUARANTINED",
    }
    shown = json.loads(
        sh(
            "dbt",
            "show",
            "--project-dir",
            "dbt_project",
            *t,
            "-q",
            "--output",
            "json",
            "--limit",
            "-1",
            "--inline",
            "select * from {{ ref('customers') }}",
        )
    )["show"]
    actual = {
        r["customer_id"]: (
            r["name"],
            r["email"],
            r["tier"],
            Decimal(str(r["balance"])),
            datetime.fromisoformat(r["updated_at"]),
        )
        for r in shown
    }
    assert actual == oracle(files)
