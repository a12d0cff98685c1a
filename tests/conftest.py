"""Shared fixtures: a real SparkSession, a real PostgreSQL server, fresh Audit DBs.

A missing server is a failure that says how to start it, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
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


# The embedded default keeps its Spark catalog in a PostgreSQL schema (profiles.example.yml,
# CDC_CATALOG_SCHEMA). Each project root a test makes gets its own (new_catalog_schema), so a
# table of one project's warehouse is never found by another; this process's SparkSession (the
# `spark` fixture) has the one set here. All are dropped when the session ends.
CATALOG_SCHEMAS: list[str] = []


def new_catalog_schema() -> str:
    name = f"cdc_catalog_test_{uuid.uuid4().hex[:10]}"
    CATALOG_SCHEMAS.append(name)
    return name


os.environ["CDC_CATALOG_SCHEMA"] = new_catalog_schema()


@pytest.fixture(scope="session", autouse=True)
def _drop_catalog_schemas() -> Iterator[None]:
    yield
    try:
        import psycopg2

        conn = psycopg2.connect(PG_URL.replace("postgresql+psycopg2", "postgresql"))
    except Exception:  # noqa: BLE001 - no server: the tests that needed it said so
        return
    try:
        with conn, conn.cursor() as cur:
            for name in CATALOG_SCHEMAS:
                cur.execute(f'drop schema if exists "{name}" cascade')
    finally:
        conn.close()


def make_project(root: Path, without: tuple[str, ...] = (), shop: bool = False) -> Path:
    """A throwaway copy of the repository's configuration: runner.yml, profiles, dbt_project;
    `without`: sample models left out of the copy (their SQL file and their YAML entry);
    `shop`: keep the sample's transaction group (SHOP)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "profiles.example.yml", root / "profiles.yml")
    shutil.copy(REPO / "runner.yml", root / "runner.yml")
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
    (packages / "cdc").symlink_to(root / "macros", target_is_directory=True)


@pytest.fixture(scope="session")
def pg_url() -> str:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_URL)
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{PG_START_HINT}\n(connection failed: {exc})", pytrace=False)
    return PG_URL


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema name, dropped after the test."""
    import sqlalchemy as sa

    name = f"cdc_test_{uuid.uuid4().hex[:10]}"
    yield name
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def audit_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    """(URL, schema) of an empty, migrated Audit DB on each backend."""
    from audit import AuditDB

    if request.param == "sqlite":
        url, schema = f"sqlite:///{tmp_path / 'audit.db'}", None
    else:
        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")
    db = AuditDB(url, schema=schema)
    db.upgrade()
    db.dispose()
    yield url, schema


@pytest.fixture
def audit_db(audit_url: tuple[str, str | None]) -> Iterator[AuditDB]:  # noqa: F821
    from audit import AuditDB

    url, schema = audit_url
    db = AuditDB(url, schema=schema, max_attempts=3, lease_seconds=60)
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def spark_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project the session's SparkSession belongs to (its warehouse and metastore)."""
    root = make_project(tmp_path_factory.mktemp("spark_project"))
    from runner.spark_session import link_iceberg_jar

    link_iceberg_jar(root)
    return root


@pytest.fixture(scope="session")
def spark(spark_project: Path) -> Iterator[SparkSession]:  # noqa: F821
    """One local SparkSession for the whole test session, built by the runner's own module."""
    from runner.project import Project
    from runner.spark_session import get_spark

    project = Project.load(spark_project, target="local")
    session = get_spark(project, app_name="cdc-tests")
    yield session
    session.stop()


def drop_database(spark, name: str) -> None:
    """Iceberg's Hive catalog refuses DROP DATABASE ... CASCADE: drop the tables first."""
    if not spark.catalog.databaseExists(name):
        return
    for row in spark.sql(f"show tables in {name}").collect():
        spark.sql(f"drop table if exists {name}.{row['tableName']} purge")
    spark.sql(f"drop database {name}")


def query(target: str, spark, project, sql: str) -> list[dict]:  # noqa: ANN001
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


def read_table(target: str, spark, project, schema: str, table: str) -> list[dict]:  # noqa: ANN001
    """Every row of schema.table on the destination under test."""
    q = "`" if target == "local" else '"'
    return query(target, spark, project, f"select * from {q}{schema}{q}.{q}{table}{q}")


class Cli:
    """The documented commands as real processes, from a fresh project root (as a user types
    them: options after the subcommand where dbt users put them)."""

    def __init__(self, root: Path, target: str, schema: str, **env: str) -> None:
        import sys

        self.root = root
        self.target = target
        self.schema = schema
        self.bin = Path(sys.executable).parent
        self.env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", CDC_SCHEMA=schema)
        self.env["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
        self.env.pop("CDC_HOME", None)
        self.env["CDC_CATALOG_SCHEMA"] = new_catalog_schema()
        self.env.update(env)
        if target == "postgres":
            self.env["CDC_AUDIT_SCHEMA"] = schema + "_audit"

    def start(self, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,  # type: ignore[arg-type]
        )

    def __call__(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            args, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900
        )
        assert out.returncode in ok, f"{args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        return out

    def runner(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        """`runner COMMAND ARGS --target T`: the target after the subcommand, as documented."""
        return self("runner", *args, "--target", self.target, ok=ok)

    def dbt(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        return self("dbt", *args, "--project-dir", "dbt_project", "--target", self.target, ok=ok)

    def table(self, relation: str) -> list[dict]:
        """Every row of a model or source through `dbt show` (the destination's own answer)."""
        import json

        out = self.dbt(
            "show",
            "-q",
            "--output",
            "json",
            "--limit",
            "-1",
            "--inline",
            f"select * from {relation}",
        )
        return [{k.lower(): v for k, v in r.items()} for r in json.loads(out.stdout)["show"]]


@pytest.fixture
def cli_project(tmp_path: Path, request: pytest.FixtureRequest):  # noqa: ANN201
    """A function making a Cli on a fresh project root for a target, with its schemas dropped
    after the test on PostgreSQL."""
    from runner.spark_session import link_iceberg_jar

    def make(target: str, without: tuple[str, ...] = (), shop: bool = False) -> Cli:
        root = make_project(tmp_path / "repo", without, shop)
        link_iceberg_jar(root)
        env: dict[str, str] = {}
        if target == "postgres":
            schema = request.getfixturevalue("pg_schema")
            request.addfinalizer(lambda: drop_pg_schema(request, schema + "_audit"))
        elif target == "bigquery":
            env["CDC_BQ_ENDPOINT"] = request.getfixturevalue("bq_emulator").endpoint
            schema = f"cdc_test_{uuid.uuid4().hex[:10]}"  # a dataset of its own
        else:
            schema = "cli_test"
        cli = Cli(root, target, schema, **env)
        link_package(root)
        return cli

    return make


def drop_pg_schema(request: pytest.FixtureRequest, name: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(request.getfixturevalue("pg_url"))
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
    engine.dispose()


@pytest.fixture(scope="session")
def bq_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The local BigQuery emulator (tools/bq_emulator.py) on a free port, for the session.

    Missing is a failure that says how to install it, never a skip."""
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    import bq_emulator

    try:
        emulator = bq_emulator.start(log=tmp_path_factory.mktemp("bq") / "emulator.log")
    except RuntimeError as exc:
        pytest.fail(
            f"the BigQuery emulator could not start: {exc}\n(`make setup` installs it in "
            ".venv-bq; `python tools/bq_emulator.py install` does only that)",
            pytrace=False,
        )
    yield emulator
    emulator.stop()
