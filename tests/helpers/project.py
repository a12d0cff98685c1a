"""Project copies, destinations read back, and the documented commands (`runner ...`,
`dbt ...`) run either as real processes or in this process.

In this process, `runner` goes through click's own test runner and `dbt` through `dbtRunner`,
with the project root as the working folder and the command's environment, so both reuse the
session's one SparkSession (dbt-spark's session method and the runner both `getOrCreate()` it).
Tests about the process boundary itself (the documented command forms, kills, two processes at
once, the installed wheel, the cluster) ask for processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("CDC_TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
PG_START_HINT = (
    "PostgreSQL is needed on 127.0.0.1:5432 (database 'test', user 'postgres', trust auth). "
    "Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start "
    "(or install Debian's 'postgresql' package), or point CDC_TEST_PG_URL at another server."
)

# The sample's change-history model: built and checked by test_apply, test_bigquery,
# test_contract and test_state_schema; the tests of other features leave it out of their copy
# (on Spark it adds about ten seconds to every build that applies customers Files).
CHANGES_HISTORY = ("customers_changes_history",)

# The sample's transaction group (Debezium orders and order lines): its declarations and
# models. Only the tests of that feature keep it (make_project(shop=True)); on Spark it adds
# six models to every build.
SHOP = ("models/staging/shop.yml", "models/shop")

# Files of the shipped landing folder that the sample project does not declare: the examples
# of docs/examples (AWS DMS and Debezium with default settings; tests/test_real_sources.py).
EXAMPLE_FILES = ("dms-defaults", "debezium-defaults")

# The embedded default keeps its Spark catalog in a PostgreSQL schema (profiles.example.yml,
# CDC_CATALOG_SCHEMA). The session's SparkSession has one (set by conftest), shared by every
# test that runs in this process (each in a schema of its own); each test that starts
# processes gets its own (new_catalog_schema). All are dropped when the session ends.
CATALOG_SCHEMAS: list[str] = []


def new_catalog_schema() -> str:
    name = f"cdc_catalog_test_{uuid.uuid4().hex[:10]}"
    CATALOG_SCHEMAS.append(name)
    return name


def new_schema(prefix: str = "cdc_test") -> str:
    """A schema (dataset, Iceberg namespace) name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# Every JVM of the suite (each worker's SparkSession, conftest's `spark`, and the `runner` and
# `dbt` processes a test starts) compiles with C1 alone: on tiny test data the C2 compiler costs
# more CPU than it saves, and two test workers share two cores. Semantics are
# the same; a user's runner asks for the same only on small work (session.with_quick_jit; the
# copies below make every test JVM do so, whatever its data). C1 alone
# shrinks the JVM's default code cache to 48 MB, which a long-lived JVM fills (then it stops
# compiling): the tiered default's 240 MB is kept.
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
PROFILE_JVM_ANCHOR = '        spark.ui.enabled: "false"\n'


def _with_test_jvm(source: Path, dest: Path, anchor: str | None) -> None:
    """Copy profiles.yml (its Spark settings, after ``anchor``) or runner.yml (staging's Spark
    settings, appended) with TEST_JAVA_OPTIONS for the driver JVM (and, in profiles, for a
    cluster's executors; local mode has none)."""
    text = source.read_text()
    line = f'spark.driver.extraJavaOptions: "{TEST_JAVA_OPTIONS}"\n'
    if anchor is not None:
        assert anchor in text, f"{source.name} changed: {anchor!r} is gone"
        executors = f'spark.executor.extraJavaOptions: "{TEST_JAVA_OPTIONS}"\n'
        text = text.replace(anchor, anchor + "        " + line + "        " + executors, 1)
    else:
        assert "staging_spark_conf" not in text, f"{source.name} sets staging_spark_conf now"
        text += "staging_spark_conf:\n  " + line
    dest.write_text(text)


def make_project(root: Path, without: tuple[str, ...] = (), shop: bool = False) -> Path:
    """A throwaway copy of the repository's configuration: runner.yml, profiles, dbt_project;
    `without`: sample models left out of the copy (their SQL file and their YAML entry);
    `shop`: keep the sample's transaction group (SHOP). Its JVMs run with TEST_JAVA_OPTIONS."""
    root.mkdir(parents=True, exist_ok=True)
    _with_test_jvm(REPO / "profiles.example.yml", root / "profiles.yml", PROFILE_JVM_ANCHOR)
    _with_test_jvm(REPO / "runner.yml", root / "runner.yml", None)
    shutil.copytree(
        REPO / "dbt_project",
        root / "dbt_project",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("target", "logs", "dbt_packages"),
    )
    shutil.copytree(REPO / "macros", root / "macros", dirs_exist_ok=True)
    if not shop:
        for part in SHOP:
            path = root / "dbt_project" / part
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    models = root / "dbt_project" / "models"
    for name in without:
        (models / f"{name}.sql").unlink()
        for conf in models.glob("*.yml"):
            doc = yaml.safe_load(conf.read_text())
            kept = [m for m in doc.get("models") or [] if m["name"] != name]
            if len(kept) != len(doc.get("models") or []):
                doc["models"] = kept
                conf.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return root


def link_package(root: Path) -> None:
    """What `dbt deps` does for packages.yml's `local: ../macros` (a symlink), without its
    three seconds per project; test_lineage_column and test_install run dbt deps itself."""
    packages = root / "dbt_project" / "dbt_packages"
    packages.mkdir(exist_ok=True)
    link = packages / "cdc"
    if not link.is_symlink():
        link.symlink_to(root / "macros", target_is_directory=True)


def drop_database(spark: Any, name: str) -> None:
    """Iceberg's catalog refuses DROP DATABASE ... CASCADE: drop the tables first."""
    if not spark.catalog.databaseExists(name):
        return
    for row in spark.sql(f"show tables in {name}").collect():
        spark.sql(f"drop table if exists {name}.{row['tableName']} purge")
    spark.sql(f"drop database {name}")


def env_pg_connect(env: dict[str, str]) -> Any:
    """A connection to the PostgreSQL server a command's environment names (profiles.yml's
    CDC_PG_* variables)."""
    import psycopg2

    return psycopg2.connect(
        host=env.get("CDC_PG_HOST", "127.0.0.1"),
        port=int(env.get("CDC_PG_PORT", "5432")),
        user=env.get("CDC_PG_USER", "postgres"),
        dbname=env.get("CDC_PG_DATABASE", "test"),
        password=env.get("CDC_PG_PASSWORD", ""),
    )


def pg_connect(url: str = PG_URL) -> Any:
    import psycopg2

    return psycopg2.connect(url.replace("postgresql+psycopg2", "postgresql"))


def drop_pg_schemas(*names: str, url: str = PG_URL) -> None:
    conn = pg_connect(url)
    try:
        with conn, conn.cursor() as cur:
            for name in names:
                cur.execute(f'drop schema if exists "{name}" cascade')
    finally:
        conn.close()


def query(target: str, spark: Any, project: Any, sql: str) -> list[dict]:
    """Run SQL on the destination under test (local Spark or PostgreSQL); rows as dicts with
    lowercase column names."""
    if target == "local":
        return [{k.lower(): v for k, v in r.asDict().items()} for r in spark.sql(sql).collect()]
    from runner.destinations.postgres import connect

    conn = connect(project.target)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql)
            if cur.description is None:
                return []
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()


def key_indexes(project: Any, schema: str, table: str) -> list[str]:
    """PostgreSQL: the unique indexes of schema.table (the apply's on its key columns)."""
    return [r["indexname"] for r in query("postgres", None, project,
        "select indexname from pg_indexes where schemaname = "
        f"'{schema}' and tablename = '{table}' and indexdef like 'CREATE UNIQUE%'")]  # fmt: skip


def drop_key_index(project: Any, schema: str, table: str) -> None:
    """PostgreSQL: drop the apply's unique index of schema.table, as a table an earlier release
    made has none (so rows can be copied into it by hand)."""
    (index,) = key_indexes(project, schema, table)
    query("postgres", None, project, f'drop index "{schema}"."{index}"')


def read_table(target: str, spark: Any, project: Any, schema: str, table: str) -> list[dict]:
    """Every row of schema.table on the destination under test."""
    q = "`" if target == "local" else '"'
    return query(target, spark, project, f"select * from {q}{schema}{q}.{q}{table}{q}")


def dbt_build(proj: Path, target: str, *extra: str) -> Any:
    """`dbt build` of the dbt project at ``proj`` in this process (its profiles beside it)."""
    from dbt.cli.main import dbtRunner

    return dbtRunner().invoke(
        ["build", "--project-dir", str(proj), "--profiles-dir", str(proj.parent),
         "--target", target, *extra]
    )  # fmt: skip


def bigquery_client(endpoint: str, dataset: str | None = None) -> Any:
    """A client of the local BigQuery emulator (project cdc-local, no credentials)."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    config = bigquery.QueryJobConfig(default_dataset=f"cdc-local.{dataset}") if dataset else None
    return bigquery.Client(
        project="cdc-local",
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=endpoint),
        default_query_job_config=config,
    )


def bigquery_rows(cli: Cli, table: str) -> list[dict]:
    """Every row of a table of the test's dataset, read with the BigQuery client (faster than
    `dbt show`, which the contract test uses); values as `dbt show --output json` gives them."""
    from datetime import datetime

    client = bigquery_client(cli.env["CDC_BQ_ENDPOINT"])
    rows = client.query(f"select * from `cdc-local`.`{cli.schema}`.`{table}`").result()
    return [
        {k: v.isoformat() if isinstance(v, datetime) else v for k, v in r.items()} for r in rows
    ]


class Cli:
    """The documented commands from a project root, as a user types them (options after the
    subcommand where dbt users put them): real processes, or with ``in_process`` click's and
    dbt's own runners in this process (same arguments, exit codes, stdout and stderr)."""

    def __init__(
        self,
        root: Path,
        target: str,
        schema: str,
        *,
        in_process: bool = False,
        spark: Callable[[], Any] | None = None,
        **env: str,
    ) -> None:
        self.root = root
        self.target = target
        self.schema = schema
        self.in_process = in_process
        self.spark = spark  # the worker's session, for `table` of processes' local tables
        self.bin = Path(sys.executable).parent
        self.env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", CDC_SCHEMA=schema)
        self.env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
        self.env.pop("CDC_HOME", None)
        if in_process:
            # This process's SparkSession keeps the catalog it was built with, shared with the
            # processes started here; their warehouse paths must be absolute for it to read
            # their tables (`dbt` alone would write `./.cdc/...`, relative to its own folder).
            self.env["CDC_HOME"] = str(root)
        else:
            self.env["CDC_CATALOG_SCHEMA"] = new_catalog_schema()
        self.env.update(env)
        # The Spark catalog's schema of this project's processes (None: profiles.yml's own).
        self.catalog_schema = self.env.get("CDC_CATALOG_SCHEMA")
        if target == "postgres":
            self.env["CDC_AUDIT_SCHEMA"] = schema + "_audit"

    def start(self, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        """Always a process: for two commands at once, or one to kill."""
        return subprocess.Popen(
            args,
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,  # type: ignore[arg-type]
        )

    def __call__(
        self, *args: str, ok: tuple[int, ...] = (0,), cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``args`` as a command from the project root (``cwd``: from that folder, always as a
        process)."""
        if self.in_process and args[0] in ("runner", "dbt") and cwd is None:
            out = self._here(args)
        else:
            out = subprocess.run(
                args, cwd=cwd or self.root, env=self.env, capture_output=True, text=True,
                timeout=900,
            )  # fmt: skip
        assert out.returncode in ok, f"{args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        """The command's working folder, environment and logging, restored after it."""
        env, cwd = dict(os.environ), os.getcwd()
        root_log = logging.getLogger()
        handlers, level = list(root_log.handlers), root_log.level
        runner_level = logging.getLogger("runner").level
        os.environ.clear()
        os.environ.update(self.env)
        os.chdir(self.root)
        try:
            yield
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            root_log.handlers[:] = handlers
            root_log.setLevel(level)
            logging.getLogger("runner").setLevel(runner_level)

    def _here(self, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        with self._environment():
            if args[0] == "runner":
                from click.testing import CliRunner

                from runner.cli import main

                res = CliRunner().invoke(main, list(args[1:]), catch_exceptions=False)
                return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)
            from dbt.cli.main import dbtRunner

            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                done = dbtRunner().invoke(list(args[1:]))
            code = 0 if done.success else 2 if done.exception is not None else 1
            if done.exception is not None:
                err.write(f"{type(done.exception).__name__}: {done.exception}\n")
            return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

    def runner(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        """`runner COMMAND ARGS --target T`: the target after the subcommand, as documented."""
        return self("runner", *args, "--target", self.target, ok=ok)

    def dbt(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        return self("dbt", *args, "--project-dir", "dbt_project", "--target", self.target, ok=ok)

    def table(self, relation: str) -> list[dict]:
        """Every row of a model or source through `dbt show` (the destination's own answer),
        values as `dbt show --output json` gives them. Local tables are read by this process's
        SparkSession, PostgreSQL's by a query from this process (see `read_here`)."""
        here = self.read_here(relation)
        if here is not None:
            return here
        out = self.dbt(
            "show", "-q", "--output", "json", "--limit", "-1", "--inline",
            f"select * from {relation}",
        )  # fmt: skip
        return [{k.lower(): v for k, v in r.items()} for r in json.loads(out.stdout)["show"]]

    def read_here(self, relation: str) -> list[dict] | None:
        """`dbt show` costs a JVM in a process and a parse in this one; a table is as
        readable from this process: on the local target by its SparkSession, at the metadata
        file the project's JDBC catalog schema names for it, on PostgreSQL by a query of the
        server. A plain `ref`, a state or staging table's `source` or schema.table, with an
        optional `where`. The rows go through the agate table `dbt show` makes, so the values
        are the same. None: read it with `dbt show` (not such a relation, or not a table of
        this name where the project keeps it: an alias, a view, a custom schema). (The cluster
        target's warehouse is a folder of this machine too.)"""
        if self.target == "postgres":
            return self._read_postgres(relation)
        if self.target not in ("local", "cluster") or None in (self.spark, self.catalog_schema):
            return None
        found = self._plain_table(relation)
        if found is None:
            return None
        table, where = found
        conn = env_pg_connect(self.env)  # the server the catalog is on
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f'select metadata_location from "{self.catalog_schema}".iceberg_tables '
                    "where catalog_name = 'spark_catalog' and table_namespace = %s "
                    "and table_name = %s and iceberg_type = 'TABLE'",
                    table.split("."),
                )
                found_tables = cur.fetchall()
        finally:
            conn.close()
        if len(found_tables) != 1:
            return None  # an alias, a snapshot elsewhere, a view: as dbt resolves it
        spark = self.spark()  # type: ignore[misc]
        df = spark.read.format("iceberg").load(found_tables[0][0])
        if where:
            df = df.where(where)
        columns = list(df.columns)
        return as_dbt_shows(columns, [dict(zip(columns, row, strict=True)) for row in df.collect()])

    def _read_postgres(self, relation: str) -> list[dict] | None:
        """A table of the project on PostgreSQL, read as dbt-postgres reads a query's result
        (psycopg2 rows, then agate's table)."""
        found = self._plain_table(relation)
        if found is None:
            return None
        (schema, name), where = found[0].split("."), found[1]
        conn = env_pg_connect(self.env)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "select 1 from information_schema.tables where table_schema = %s "
                    "and table_name = %s and table_type = 'BASE TABLE'",
                    (schema, name),
                )
                if cur.fetchone() is None:
                    return None
                cur.execute(
                    f'select * from "{schema}"."{name}"' + (f" where {where}" if where else "")
                )
                columns = [c[0] for c in cur.description]
                rows = cur.fetchall()
        finally:
            conn.close()
        return as_dbt_shows(columns, [dict(zip(columns, row, strict=True)) for row in rows])

    def _plain_table(self, relation: str) -> tuple[str, str | None] | None:
        """``schema.table`` and the where clause of a relation `read_here` reads, or None."""
        match = SIMPLE_RELATION.fullmatch(relation.strip())
        if match is None:
            return None
        ref, source, member, schema, name, where = match.groups()
        table = f"{schema}.{name}" if name else f"{self.schema}.{ref}"
        if source == "cdc_state":
            from runner.contract import state_tables

            table = f"{self.schema}.{state_tables()[member]['identifier']}"
        elif source == "cdc_staging":  # as the project declares it
            from runner.entities import load_entities
            from runner.project import Project

            with self._environment():
                entity = load_entities(Project.load(self.root, target=self.target)).get(member)
            if entity is None:
                return None
            table = f"{entity.staging_schema}.{entity.staging_table}"
        return table, where


def as_dbt_shows(columns: list[str], data: list[dict]) -> list[dict]:
    """Rows as `dbt show --output json` gives them: through the agate table dbt makes of a
    query's result, keys in lower case."""
    from dbt_common.clients.agate_helper import table_from_data_flat

    shown = io.StringIO()
    table_from_data_flat(data, columns).to_json(shown)
    return [{k.lower(): v for k, v in r.items()} for r in json.loads(shown.getvalue())]


# What Cli.read_here reads without dbt: {{ ref('m') }}, {{ source('cdc_state' or
# 'cdc_staging', 't') }} or schema.table, then an optional where clause.
SIMPLE_RELATION = re.compile(
    r"(?:\{\{ ref\('(\w+)'\) \}\}|\{\{ source\('(cdc_state|cdc_staging)', '(\w+)'\) \}\}"
    r"|(\w+)\.(\w+))"
    r"(?:\s+where\s(.+))?",
    re.S,
)


def ingest_here(project: Any, spark: Any, audit_file: Path, landing: Path, *entities: str) -> Any:
    """`runner ingest` of ``entities`` from ``landing`` in this process, on the session's
    SparkSession, into a fresh SQLite Audit DB at ``audit_file``; returns the AuditDB."""
    from audit import AuditDB
    from runner.ids import new_process_id
    from runner.ingest import ingest
    from runner.invocation import Invocation

    db = AuditDB(f"sqlite:///{audit_file}")
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "ingest", "local")
    ingest(
        Invocation.of(project, db, spark), pid, landing=[str(landing)], entity_names=list(entities)
    )
    return db


def audit_rows(cli: Cli, sql: str) -> list[tuple]:
    """Rows of the project's Audit DB (read directly: quicker than a process per check)."""
    import sqlite3

    if cli.target != "postgres":  # SQLite, one file per target
        with sqlite3.connect(cli.root / ".cdc" / cli.target / "audit.db") as conn:
            return list(conn.execute(sql))
    conn = env_pg_connect(cli.env)
    try:
        with conn.cursor() as cur:
            cur.execute(f'set search_path to "{cli.env["CDC_AUDIT_SCHEMA"]}"')
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()
