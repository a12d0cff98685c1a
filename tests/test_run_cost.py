"""A run costs what its new Files cost. With nothing to stage and nothing waiting for an apply,
`runner run` starts no JVM and no dbt and changes no table (run as a process whose Java does not
exist: starting Spark would fail it), and imports neither (Python's import report). With new
Files for one entity, dbt builds that entity's source and what depends on it, and nothing of the
other entities (dbt's own run results, against dbt's own lineage graph); the tables equal the
fold of the landing Files."""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle, shown_customers
from helpers.project import CHANGES_HISTORY, REPO

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]


def _snapshots(spark, schema: str) -> dict[str, int]:  # noqa: ANN001
    """Each Iceberg table of the schema -> its current snapshot id (what any write changes)."""
    out = {}
    for row in spark.sql(f"show tables in {schema}").collect():
        name = f"{schema}.{row['tableName']}"
        if row["isTemporary"]:
            continue
        try:
            latest = spark.sql(
                f"select snapshot_id from {name}.snapshots order by committed_at desc limit 1"
            ).first()
        except Exception:  # noqa: BLE001 - a view has no snapshots
            continue
        out[name] = latest[0] if latest else None
    return out


def _no_java_run(cli, spark) -> None:  # noqa: ANN001
    """`runner run` with nothing new, as processes that cannot start Java (a SparkSession would
    fail them with exit 2): exit 0, "nothing new", no table and no dbt run result changed."""
    before = _snapshots(spark, cli.schema)
    assert before, "the tables the earlier runs built"
    results = cli.root / "dbt_project" / "target" / "run_results.json"
    results_before = results.read_bytes()
    # Python reports every module the process imports (stderr): neither dbt nor PySpark, nor
    # Alembic while the Audit DB is at the newest revision.
    env = dict(cli.env, JAVA_HOME="/nonexistent/java", PYTHONPROFILEIMPORTTIME="1")
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "java").exists())
    for args in (["run", "--landing", "landing"], ["run", "--landing", "landing", "--json"]):
        out = subprocess.run(
            ["runner", *args, "--target", "local"],
            cwd=cli.root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, f"{args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        imported = {
            line.rsplit("|", 1)[1].strip().split(".")[0]
            for line in out.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "sqlalchemy" in imported, out.stderr[-2000:]  # the report is there
        assert not imported & {"dbt", "dbt_common", "pyspark", "py4j", "alembic"}, sorted(imported)
        if "--json" in args:
            summary = json.loads(out.stdout)
            assert summary["nothing_new"] is True and summary["built"] == [], summary
            assert "dbt_nodes" not in summary["phases"], summary["phases"]
        else:
            assert "nothing new" in out.stdout, out.stdout
    assert results.read_bytes() == results_before, "dbt ran: its run results changed"
    assert _snapshots(spark, cli.schema) == before


def _downstream(manifest: dict, start: str) -> set[str]:
    """Every node reachable from ``start`` in dbt's own child map."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for child in manifest["child_map"].get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def test_new_files_of_one_entity_build_it_alone_and_a_run_with_nothing_new_starts_nothing(
    cli_project, spark
) -> None:  # noqa: ANN001
    cli = cli_project("local", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    shutil.copytree(REPO / "landing" / "customers", landing / "customers")
    shutil.copytree(REPO / "landing" / "accounts", landing / "accounts")
    files = sorted((landing / "customers").iterdir())
    held = {f: cli.root / f.name for f in files[-2:]}
    for path, away in held.items():
        path.rename(away)
    first = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert first["ok"], first
    assert set(first["to_apply"]) == {"customers", "accounts"}, first

    held[files[-2]].rename(files[-2])  # one new customers File, nothing new for accounts
    second = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert second["ok"] and second["ingest"]["staged"] == 1, second
    assert second["to_apply"] == {"customers": 1}, second

    target = cli.root / "dbt_project" / "target"
    manifest = json.loads((target / "manifest.json").read_text())
    source = next(k for k, v in manifest["sources"].items() if v["name"] == "customers")
    expected = {n for n in _downstream(manifest, source) if n in manifest["nodes"]}
    ran = {r["unique_id"] for r in json.loads((target / "run_results.json").read_text())["results"]}
    assert ran == expected, (sorted(ran - expected), sorted(expected - ran))
    assert not any("accounts" in n for n in ran), sorted(ran)
    nodes = manifest["nodes"]
    assert set(second["built"]) == {f"{nodes[n]['resource_type']}.{nodes[n]['name']}" for n in ran}

    # The user's own selection wins over the runner's.
    held[files[-1]].rename(files[-1])
    third = json.loads(
        cli.runner("run", "--json", "--landing", "landing", "--", "--select", "customers").stdout
    )
    assert third["ok"] and third["selected"] == [], third
    assert [n for n in third["built"] if not n.startswith("test.")] == ["model.customers"], third

    assert shown_customers(cli.table("{{ ref('customers') }}")) == customers_oracle(files)
    fees = {
        r["account_id"]: Decimal(str(r["monthly_fee"])) for r in cli.table("{{ ref('accounts') }}")
    }
    assert fees, "accounts: built by the first run"


def test_files_held_by_their_group_wait_without_a_build_until_the_group_moves(
    cli_project,  # noqa: ANN001
    spark,  # noqa: ANN001
) -> None:
    """The shop sample ends with transaction 5023:1616 open (its END waits in
    shop/transactions/late/, outside the glob): its two Files stay STAGED after a run. Runs with
    nothing new then start nothing (no JVM, no dbt); once the END lands, the run builds the
    group and applies them: order 13 appears, line 11 is deleted and line 36 inserted."""
    cli = cli_project("local", without=CHANGES_HISTORY, shop=True)
    shop = cli.root / "landing" / "shop"
    shutil.copytree(REPO / "landing" / "shop", shop)
    first = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert first["ok"] and first["audit"].get("STAGED") == 2, first

    _no_java_run(cli, spark)  # held Files alone: no build, no marker read, no JVM

    orders = {r["order_id"] for r in cli.table("{{ ref('orders') }}")}
    assert 13 not in orders
    late = shop / "transactions" / "late" / "shop_transactions-late.json"
    late.rename(shop / "transactions" / late.name)
    third = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert third["ok"] and third["to_apply"] == {"shop_transactions": 1}, third
    assert {"model.orders", "model.order_lines"} <= set(third["built"]), third
    assert set(third["audit"]) == {"COMMITTED"}, third["audit"]
    assert 13 in {r["order_id"] for r in cli.table("{{ ref('orders') }}")}
    lines = {r["line_id"] for r in cli.table("{{ ref('order_lines') }}")}
    assert 36 in lines and 11 not in lines, sorted(lines)
