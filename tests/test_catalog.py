"""The embedded default's catalog (Iceberg JDBC on PostgreSQL) opened by several processes at
once, `dbt docs generate` showing the staging views, and moving a Derby-era warehouse over
(issue "Operate and scale").

Two `runner run` processes, one per entity, start together, and `dbt docs generate` runs while
they work: all three succeed; each table equals an independent expectation (customers: the
latest change per key from the landing Files; accounts, a snapshot entity: the last daily
extract); dbt's catalog lists the staging views with their columns and types.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import time
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle as oracle
from helpers.oracles import shown_customers
from helpers.project import (
    CHANGES_HISTORY,
    REPO,
    Cli,
    drop_pg_schemas,
    link_package,
    make_project,
    new_schema,
)

from runner.destinations.spark.destination import STATE_TABLE_PROPERTIES
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]


def last_extract(folder: Path) -> dict[int, tuple]:
    """accounts as its newest daily extract has it (snapshot_kind full: the table is the
    extract)."""
    newest = sorted(folder.iterdir())[-1]
    with open(newest, encoding="utf-8", newline="") as handle:
        return {
            int(r["account_id"]): (r["owner"] or None, r["plan"] or None, Decimal(r["monthly_fee"]))
            for r in csv.DictReader(handle)
        }


def both_working(cli, runs: list, timeout: float = 600) -> None:  # noqa: ANN001
    """Wait until both runs are recorded as running and each has leased a File of its entity
    (they are staging or applying), or one of them has ended."""
    audit = cli.root / ".cdc" / "local" / "audit.db"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.poll() is not None for r in runs):
            return
        if audit.exists():
            try:
                with closing(sqlite3.connect(audit, timeout=5)) as conn:
                    running = conn.execute(
                        "select count(*) from runs where outcome = 'running'"
                    ).fetchone()[0]
                    started = conn.execute(
                        "select count(distinct entity) from files where state <> 'PENDING'"
                    ).fetchone()[0]
            except sqlite3.OperationalError:  # tables not created yet, or busy
                running = started = 0
            if running >= 2 and started >= 2:
                return
        time.sleep(0.2)
    raise AssertionError(f"the two runs never both started working within {timeout} s")


def test_two_runners_on_different_entities_and_docs_generate_during_a_run(cli_project) -> None:  # noqa: ANN001
    cli = cli_project("local", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    files = generate_customers(landing / "customers", initial=400, files=4, changes_per_file=150)
    shutil.copytree(REPO / "landing" / "accounts", landing / "accounts")

    def runner_run(entity: str):  # noqa: ANN202
        return cli.start(
            "runner",
            "run",
            "--landing",
            "landing",
            "--entity",
            entity,
        )

    runs = [runner_run("customers"), runner_run("accounts")]
    both_working(cli, runs)
    early = [r for r in runs if r.poll() is not None]
    docs = cli.start("dbt", "docs", "generate", "--project-dir", "dbt_project")
    outs = [p.communicate(timeout=900) for p in [*runs, docs]]
    for p, (out, err) in zip([*runs, docs], outs, strict=True):
        assert p.returncode == 0, f"{p.args}: exit {p.returncode}\n{out}\n{err}"
    assert not early, "a run ended before docs generate started: no overlap was tested"

    assert shown_customers(cli.table("{{ ref('customers') }}")) == oracle(files)
    accounts = {
        r["account_id"]: (r["owner"], r["plan"], Decimal(str(r["monthly_fee"])))
        for r in cli.table("{{ ref('accounts') }}")
    }
    assert accounts == last_extract(landing / "accounts")
    status = json.loads(cli.runner("status", "--json").stdout)
    assert {f["state"] for f in status} == {"COMMITTED"}, status

    # dbt's catalog, generated again now that both runs built their views: the staging views,
    # as views, with typed columns (the one above may have run before they existed).
    cli.dbt("docs", "generate")
    catalog = json.loads((cli.root / "dbt_project" / "target" / "catalog.json").read_text())
    nodes = {k.split(".")[-1]: v for k, v in catalog["nodes"].items()}
    for view in ("stg_customers", "stg_accounts"):
        assert nodes[view]["metadata"]["type"] == "view", nodes.get(view)
    columns = {c["name"]: c["type"] for c in nodes["stg_customers"]["columns"].values()}
    assert columns["customer_id"] == "bigint" and columns["_cdc_file_hash"] == "string", columns
    assert columns["balance"].startswith("decimal"), columns


def test_a_derby_era_warehouse_is_registered_in_the_jdbc_catalog(spark, tmp_path: Path) -> None:
    """`runner migrate-catalog`'s work: Iceberg tables laid out as the Hive (Derby) catalog laid
    them out (<warehouse>/<namespace>.db/<table>) are registered with their newest metadata,
    rows and history intact; a second pass registers nothing."""
    from runner.destinations.spark.catalog import migrate_derby

    warehouse = tmp_path / "warehouse"
    location = warehouse / "derby_era.db" / "items"
    spark.sql("create namespace if not exists derby_era")
    spark.sql(
        f"create table derby_era.items (id int, v string) using iceberg location '{location}'"
    )
    spark.sql("insert into derby_era.items values (1, 'a'), (2, 'b')")
    spark.sql("insert into derby_era.items values (3, 'c')")  # a newer metadata file
    spark.sql("drop table derby_era.items")  # forget it in the catalog, keep its files
    assert not spark.catalog.tableExists("derby_era.items")

    assert migrate_derby(spark, warehouse) == ["derby_era.items"]
    rows = {(r["id"], r["v"]) for r in spark.sql("select * from derby_era.items").collect()}
    assert rows == {(1, "a"), (2, "b"), (3, "c")}
    assert spark.sql("select * from derby_era.items.snapshots").count() == 2
    assert migrate_derby(spark, warehouse) == []
    spark.sql("drop table derby_era.items purge")
    spark.sql("drop namespace derby_era")


def test_two_writers_of_the_shared_manifest_at_once_both_land(spark) -> None:  # noqa: ANN001
    """Runners of two entities share the state schema and the staged-files manifest: started
    together on an empty catalog, both create them and both MERGE their rows, in threads of
    one SparkContext, each with a session of its own (its own catalog instance and temporary
    views, as two processes have): the JDBC catalog's commits race as between processes. Every
    round ends with every File's manifest row, none twice."""
    import threading
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from helpers.project import drop_database, new_schema

    from runner.destinations.base import FileToStage, StagedBatch
    from runner.destinations.spark.destination import SparkTableWriter

    schema = new_schema("race")
    writer = SparkTableWriter("iceberg", state_schema=schema)
    expected: set[str] = set()
    try:
        for round_ in range(4):
            batches = []
            for entity in ("customers", "accounts"):
                files = [
                    FileToStage(
                        i, Path(f"{entity}_{round_}_{i}.csv"), f"{entity[0]}{round_}{i}" * 8
                    )
                    for i in range(3)
                ]
                expected |= {f.content_hash for f in files}
                batches.append(
                    StagedBatch(
                        entity=SimpleNamespace(name=entity),  # type: ignore[arg-type]
                        rows=None,  # type: ignore[arg-type]
                        files=files,
                        counts={f.content_hash: 1 for f in files},
                        process_id=f"p{round_}",
                        staged_at=datetime.now(UTC).replace(tzinfo=None),
                    )
                )
            errors: list[BaseException] = []
            gate = threading.Barrier(2)

            def write(
                batch: StagedBatch,
                gate: threading.Barrier = gate,
                errors: list[BaseException] = errors,
            ) -> None:
                gate.wait()
                try:
                    writer._manifest(spark.newSession(), batch)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(b,)) for b in batches]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            assert not errors, [str(e)[:600] for e in errors]
            rows = spark.sql(f"select file_hash from {schema}.cdc_staged_files").collect()
            hashes = [r["file_hash"] for r in rows]
            assert sorted(hashes) == sorted(expected), round_
    finally:
        drop_database(spark, schema)


def test_two_applies_of_different_tables_add_their_markers_at_once(cli_project, spark) -> None:  # noqa: ANN001
    """The applies of two entities write the shared state tables at once: each adds its
    Applied File Markers with the package's own MERGE (spark__write_markers_sql) into the
    markers table as the package creates it, in threads of one SparkContext with a session
    each (their own catalog instances, as two processes have). Every MERGE lands: a commit by
    the other table's apply between planning and writing is no error. Two applies of one
    table adding the same markers still conflict: one fails, no marker is there twice."""
    import threading

    cli = cli_project("local")
    spark.sql(f"create namespace if not exists {cli.schema}")  # as `runner ingest` makes it
    cli("dbt", "run-operation", "cdc.create_state_tables", "--project-dir", "dbt_project")
    markers = f"{cli.schema}.cdc_applied_files"
    columns = [c.name for c in spark.table(markers).schema]
    properties = dict(spark.sql(f"show tblproperties {markers}").collect())
    for key, value in STATE_TABLE_PROPERTIES.items():  # the runner's manifest is made alike
        assert properties.get(key) == value, (key, properties)

    def merge(table: str, file_hash: str) -> str:
        values = {c: "null" for c in columns}
        values.update(target_table=f"'{table}'", file_hash=f"'{file_hash}'")
        select = ", ".join(f"{v} as `{c}`" for c, v in values.items())
        names = ", ".join(f"`{c}`" for c in columns)
        return (
            f"merge into {markers} as m using (select {select}) as n "
            f"on m.target_table = '{table}' and m.file_hash = n.file_hash "
            "when matched and 1 = 0 then update set m.file_hash = n.file_hash "
            f"when not matched then insert ({names}) values "
            f"({', '.join(f'n.`{c}`' for c in columns)})"
        )

    def race(tables: tuple[str, str], rounds: int) -> list[str]:
        errors: list[str] = []
        gate = threading.Barrier(2)

        def work(table: str) -> None:
            session = spark.newSession()
            gate.wait(timeout=300)
            for i in range(rounds):
                try:
                    session.sql(merge(table, f"h{i}"))
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(f"{table} h{i}: {str(exc)[:300]}")

        threads = [threading.Thread(target=work, args=(t,)) for t in tables]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        return errors

    # Names alike in their first 16 characters, as one entity's current state and history are.
    apart = (f"{cli.schema}.customers", f"{cli.schema}.customers_changes_history")
    assert race(apart, rounds=12) == []
    rows = spark.sql(f"select target_table, file_hash from {markers}").collect()
    expected = {(t, f"h{i}") for t in apart for i in range(12)}
    assert sorted(tuple(r) for r in rows) == sorted(expected)

    lost = race(("cdc.orders", "cdc.orders"), rounds=5)
    assert len(lost) >= 1, "two applies of one table added the same markers without a conflict"
    twice = spark.sql(
        f"select file_hash from {markers} where target_table = 'cdc.orders' "
        "group by file_hash having count(*) > 1"
    ).collect()
    assert twice == []


def test_a_deleted_warehouse_is_said_at_once_and_drop_catalog_starts_over(cli_project) -> None:  # noqa: ANN001
    """`rm -rf .cdc` (start over): the catalog in PostgreSQL still lists the tables whose files
    went with the folder. The next run says so in one line with the fix, before any JVM starts;
    `runner drop-catalog --yes` then the same run applies everything from scratch."""
    cli = cli_project("local", without=CHANGES_HISTORY, processes=True)
    landing = cli.root / "landing"
    files = generate_customers(landing / "customers", initial=30, files=2, changes_per_file=10)
    cli.runner("ingest", "--landing", "landing")  # the staging and state tables in the catalog
    shutil.rmtree(cli.root / ".cdc")

    # With no Java to start, the error is still this one: it is said before any JVM starts.
    java_home = cli.env.get("JAVA_HOME")
    cli.env["JAVA_HOME"] = "/nonexistent"
    try:
        failed = cli.runner("run", "--landing", "landing", ok=(2,))
    finally:
        cli.env.pop("JAVA_HOME")
        if java_home is not None:
            cli.env["JAVA_HOME"] = java_home
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert "files are gone from" in errors[0] and "runner drop-catalog --yes" in errors[0], errors

    cli.runner("drop-catalog", "--yes")
    cli.runner("run", "--landing", "landing")
    assert shown_customers(cli.table("{{ ref('customers') }}")) == oracle(files)
    status = json.loads(cli.runner("status", "--json").stdout)
    assert sorted(f["state"] for f in status) == ["COMMITTED"] * len(files), status


def test_two_checkouts_on_one_server_keep_their_tables_apart(spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Two clones set up by `runner init` (what `make setup` runs), with nothing in the
    environment naming a catalog schema and the same dbt schema: each gets a catalog schema of
    its own, so neither ingest sees (or writes into) the other's tables: each staging table
    holds its own File's rows alone."""
    import re

    clis, expected, catalogs = [], [], []
    schema = new_schema("cli")
    try:
        for n, name in enumerate(("one", "two clone")):
            root = make_project(tmp_path / name, CHANGES_HISTORY)
            # profiles.yml written by `runner init`, as on a new clone, from the example (the
            # repository's, with the tests' JVM options that make_project added)
            (root / "profiles.yml").rename(root / "profiles.example.yml")
            link_package(root)
            cli = Cli(root, "local", schema, spark=lambda: spark)
            cli.env.pop("CDC_CATALOG_SCHEMA")
            cli("runner", "init")
            text = (root / "profiles.yml").read_text()
            catalogs.append(re.search(r"CDC_CATALOG_SCHEMA', '(\w+)'", text).group(1))
            cli.catalog_schema = catalogs[-1]
            landing = root / "landing" / "customers"
            files = generate_customers(landing, initial=20 + n * 5, files=1, seed=n + 1)
            clis.append(cli)
            keys = []
            for path in files:
                with open(path, newline="", encoding="utf-8") as handle:
                    keys += [int(r["customer_id"]) for r in csv.DictReader(handle)]
            expected.append(sorted(keys))
        assert catalogs[0] != catalogs[1], catalogs
        for cli in clis:
            cli("runner", "ingest", "--landing", "landing")
        for cli, want in zip(clis, expected, strict=True):
            staged = cli.table("{{ source('cdc_staging', 'customers') }}")
            assert sorted(int(r["customer_id"]) for r in staged) == want
    finally:
        drop_pg_schemas(*catalogs)
