"""The embedded Spark + Iceberg default: one source of settings, MERGE into existing tables."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.destinations import destination_for
from runner.project import Project

pytestmark = pytest.mark.spark


def test_runner_session_realises_the_profile_settings(spark, spark_project: Path) -> None:
    conf = destination_for(Project.load(spark_project, target="local")).spark_conf()
    ctx_conf = dict(spark.sparkContext.getConf().getAll())
    for key, value in conf.items():
        actual = ctx_conf.get(key) or spark.conf.get(key, None)
        if key.endswith(".extraJavaOptions"):  # Spark appends its own --add-opens
            assert value in (actual or ""), f"{key}: {value!r} missing from {actual!r}"
            continue
        if key == "spark.sql.warehouse.dir":  # Spark qualifies it once a table is written
            actual = (actual or "").removeprefix("file:")
        assert actual == value, f"{key}: session has {actual!r}, profile says {value!r}"
    # The properties the platform promises, read back from the live session.
    assert spark.sparkContext.master == "local[2]"
    assert ctx_conf["spark.ui.enabled"] == "false"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert (
        spark.conf.get("spark.sql.catalog.spark_catalog") == "org.apache.iceberg.spark.SparkCatalog"
    )
    # The catalog several processes can open (Iceberg JDBC on PostgreSQL), not Derby; tables
    # land in the project's warehouse folder.
    assert spark.conf.get("spark.sql.catalog.spark_catalog.type") == "jdbc"
    assert spark.conf.get("spark.sql.catalogImplementation") == "in-memory"
    spark.sql("create namespace if not exists platform_check")
    spark.sql("create or replace table platform_check.t (id int) using iceberg")
    location = (
        spark.sql("describe table extended platform_check.t")
        .where("col_name = 'Location'")
        .collect()[0]["data_type"]
    )
    warehouse = spark_project / ".cdc" / "local" / "warehouse"
    assert Path(location.removeprefix("file:")).is_relative_to(warehouse), location
    spark.sql("drop table platform_check.t purge")


def test_the_session_jvm_maps_the_class_archive_setup_wrote(spark) -> None:
    """`make setup` (`runner init`) writes the environment's Spark class archive, and the JVM of
    a session the runner builds maps it: the JVM accepted it (it runs without an archive of
    another build or class path, silently)."""
    from runner.destinations.spark.class_archive import archive_path

    path = archive_path()
    assert path is not None and path.is_file(), f"no class archive at {path}: run `runner init`"
    proc = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    # the launcher's pid is the JVM's: spark-submit execs java
    assert str(path) in maps, f"the session's JVM did not map {path}"


def test_a_small_project_gets_a_jvm_that_compiles_for_a_short_run(
    spark_project: Path, audit_db
) -> None:
    """While the Files the Audit DB has registered add up to at most SMALL_WORK_BYTES, the
    runner's session asks its local JVM for the first compiler tier only; past that size, on a
    cluster, or where the profile chose the JVM's compilers itself, the JVM is as configured."""
    from audit import utcnow
    from runner.destinations.spark.session import (
        CODE_CACHE,
        QUICK_JIT,
        SMALL_WORK_BYTES,
        with_quick_jit,
    )
    from runner.ids import new_process_id
    from runner.invocation import Invocation

    project = Project.load(spark_project, target="local")
    assert not Invocation.of(project).small_work  # no Audit DB opened: the JVM as configured
    inv = Invocation.of(project, audit_db)
    pid = new_process_id()
    audit_db.start_run(pid, "test", "local")

    def land(name: str, size: int) -> None:
        audit_db.register_file(entity="customers", path=f"/landing/customers/{name}", size=size,
                               mtime=utcnow(), content_hash=name * 64, process_id=pid)  # fmt: skip

    assert inv.small_work  # nothing landed yet
    land("a", SMALL_WORK_BYTES - 100)
    land("b", 100)  # exactly the bound
    assert inv.small_work
    land("c", 1)
    assert not inv.small_work

    def options(conf: dict[str, str]) -> str:
        return with_quick_jit(conf).get("spark.driver.extraJavaOptions", "")

    plain = {"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-Xss4m"}
    assert options(plain) == f"-Xss4m {QUICK_JIT} {CODE_CACHE}"
    assert options({}) == f"{QUICK_JIT} {CODE_CACHE}"  # pyspark's default master is local
    assert options({**plain, "spark.driver.extraJavaOptions": "-XX:ReservedCodeCacheSize=1g"}) == (
        f"-XX:ReservedCodeCacheSize=1g {QUICK_JIT}"
    )
    assert options({**plain, "spark.master": "spark://cluster:7077"}) == "-Xss4m"
    for chosen in ("-XX:TieredStopAtLevel=4", "-XX:-TieredCompilation", "-Xint"):
        assert options({**plain, "spark.driver.extraJavaOptions": chosen}) == chosen
    # the tests' own profiles choose the compilers (helpers/project.py): theirs stay
    conf = inv.destination.spark_conf()
    assert with_quick_jit(conf) == conf


def test_runner_and_dbt_read_the_same_profile(spark_project: Path) -> None:
    """dbt's own profile loader yields exactly the runner's Spark settings."""
    from dbt.adapters.spark.connections import SparkCredentials

    project = Project.load(spark_project, target="local")
    import yaml

    from runner.project import _render_profile_data

    raw = yaml.safe_load((spark_project / "profiles.yml").read_text())["cdc"]["outputs"]["local"]
    rendered = _render_profile_data(raw)
    creds = SparkCredentials.from_dict(
        {k: v for k, v in rendered.items() if k not in ("type", "threads")}
    )
    assert destination_for(project).spark_conf() == creds.server_side_parameters
    assert all("{{" not in v for v in creds.server_side_parameters.values())


def _dbt_project(root: Path, model_sql: str) -> Path:
    proj = root / "merge_project"
    (proj / "models").mkdir(parents=True, exist_ok=True)
    (proj / "dbt_project.yml").write_text(
        textwrap.dedent("""
        name: merge_check
        version: "1.0"
        config-version: 2
        profile: cdc
        models:
          merge_check:
            +file_format: iceberg
    """)
    )
    (proj / "models" / "sources.yml").write_text(
        textwrap.dedent("""
        sources:
          - name: src
            schema: merge_src
            tables: [{name: items}]
    """)
    )
    (proj / "models" / "items_current.sql").write_text(model_sql)
    return proj


def _table(spark, name: str) -> dict[int, str]:
    return {r["id"]: r["v"] for r in spark.sql(f"select id, v from {name}").collect()}


def test_second_dbt_build_merges_into_the_existing_iceberg_table(
    spark, spark_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbt.cli.main import dbtRunner

    monkeypatch.setenv("CDC_HOME", str(spark_project))
    monkeypatch.setenv("CDC_SCHEMA", "merge_test")
    proj = _dbt_project(
        spark_project,
        "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}\n"
        "select id, v from {{ source('src', 'items') }}\n",
    )
    spark.sql("create database if not exists merge_src")
    spark.sql("create or replace table merge_src.items (id int, v string) using iceberg")
    spark.sql("insert into merge_src.items values (1, 'a'), (2, 'b')")
    args = [
        "build",
        "--project-dir",
        str(proj),
        "--profiles-dir",
        str(spark_project),
        "--target",
        "local",
    ]
    first = dbtRunner().invoke(args)
    assert first.success, first.exception
    target = "merge_test.items_current"
    assert _table(spark, target) == {1: "a", 2: "b"}
    snapshots_before = spark.sql(f"select snapshot_id from {target}.snapshots").count()

    # A row only the existing table has: a recreate would lose it, a MERGE keeps it.
    spark.sql(f"insert into {target} values (99, 'only in the target')")
    spark.sql("insert overwrite merge_src.items values (2, 'B'), (3, 'c')")
    second = dbtRunner().invoke(args)
    assert second.success, second.exception
    assert _table(spark, target) == {1: "a", 2: "B", 3: "c", 99: "only in the target"}

    # And the statement dbt ran was a MERGE into the same Iceberg table, whose history grew.
    compiled = (
        proj / "target" / "run" / "merge_check" / "models" / "items_current.sql"
    ).read_text()
    assert "merge into" in compiled.lower()
    ops = [
        r["operation"]
        for r in spark.sql(
            f"select operation from {target}.snapshots order by committed_at"
        ).collect()
    ]
    assert len(ops) == snapshots_before + 2  # our insert, then dbt's MERGE


def test_state_tables_are_made_partitioned_and_an_unpartitioned_one_gains_its_field(
    spark,
) -> None:
    """The runner makes the missing state tables partitioned by their first key column, and a
    state table an earlier version made without it gains the field, keeping its rows."""
    from helpers.project import drop_database, new_schema

    from runner.contract import contract, state_table
    from runner.destinations.spark.destination import SparkTableWriter

    schema = new_schema("state")
    markers = state_table("applied_files")
    columns = ", ".join(f"`{c}` {kind}" for c, kind in markers.columns.items())
    spark.sql(f"CREATE NAMESPACE {schema}")
    try:
        spark.sql(f"CREATE TABLE {schema}.{markers.identifier} ({columns}) USING iceberg")
        row = {c: None for c in markers.columns} | {markers.key[0]: "x.customers"}
        spark.createDataFrame([row], columns).writeTo(f"{schema}.{markers.identifier}").append()
        SparkTableWriter("iceberg", state_schema=schema)._state_tables(spark)
        for spec in contract().state_tables.values():
            ddl = spark.sql(f"SHOW CREATE TABLE {schema}.{spec.identifier}").first()[0]
            assert f"PARTITIONED BY ({spec.key[0]})" in ddl, ddl
        kept = spark.table(f"{schema}.{markers.identifier}").collect()
        assert [r[markers.key[0]] for r in kept] == ["x.customers"]
    finally:
        drop_database(spark, schema)
