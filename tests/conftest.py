"""Fixtures: a real SparkSession, a real PostgreSQL server, fresh Audit DBs, project roots with
the documented commands; the test tiers and the suite's time budget.

A missing server is a failure that says how to start it, never a skip.

Tiers: a test that uses the `spark`, PostgreSQL or BigQuery fixtures is marked `spark`,
`postgres` or `bigquery` here, whatever its module says; `make test-fast` runs the others
(`-m fast`) with neither Java nor PostgreSQL reachable, so a test that needs one and is not
marked fails there instead of hiding.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.durations import DURATIONS_FILE, recorded_durations
from helpers.project import (
    CATALOG_SCHEMAS,
    PG_START_HINT,
    PG_URL,
    REPO,
    Cli,
    drop_pg_schemas,
    link_package,
    make_project,
    new_catalog_schema,
    new_schema,
)

from runner.dbt_invoke import quick_flag_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit import AuditDB

# This process's SparkSession (the `spark` fixture) keeps its Spark catalog in this schema.
os.environ["CDC_CATALOG_SCHEMA"] = new_catalog_schema()

# dbt commands run in this process (the runner's, in-process `Cli`s, dbt's adapter suite) name
# their behavior flags' source as the runner's own do (runner.dbt_invoke.quick_flag_source).
quick_flag_source()

# -- tiers ------------------------------------------------------------------------------------

# A fixture that needs a JVM or a server, and the marker it puts on every test using it.
NEEDS = {
    "spark": "spark",
    "pg_url": "postgres",
    "pg_schema": "postgres",
    "bq_emulator": "bigquery",
}
SLOW_MARKERS = ("spark", "postgres", "bigquery")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("budget_suite_seconds", "the whole suite's time budget (a warning)", default="")
    parser.addini("budget_test_seconds", "one test's time budget (a warning)", default="")
    parser.addini(
        "recorded_suite_ceiling_seconds",
        "tests/durations.json's total on two workers may not exceed it (tests/test_suite_rules.py)",
        default="",
    )


# Slowest first: `make test`'s two workers (-n 2 --dist load --maxschedchunk 1: tests handed
# out one at a time in collection order) end together instead of one running a long test alone.
# The order comes from tests/durations.json, each test's seconds in the last recorded run
# (`make test-record` rewrites it); a test not in it yet counts as UNMEASURED seconds.
UNMEASURED = 30.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in exactly one tier: `fast` (no JVM, no server) or the markers of what it
    needs (from the fixtures it uses, and its own marks, such as a `postgres` parameter);
    the slowest modules first (tests/durations.json)."""
    seconds = recorded_durations()
    # By module (its slowest test), collection order kept inside one: the tests of a class
    # stay together, as class-scoped fixtures (dbt's adapter suite) expect.
    slowest: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        here = seconds.get(item.nodeid, UNMEASURED)
        slowest[module] = max(slowest.get(module, 0.0), here)
    items.sort(key=lambda item: -slowest[item.nodeid.split("::", 1)[0]])  # stable
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in NEEDS:
                item.add_marker(NEEDS[fixture])
        if item.get_closest_marker("spark"):  # the embedded default's catalog is in PostgreSQL
            item.add_marker("postgres")
        if not any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker("fast")


def _fast_tier() -> bool:
    return os.environ.get("CDC_TEST_TIER") == "fast"


def _refuse_in_fast_tier(request: pytest.FixtureRequest, what: str) -> None:
    """`make test-fast` has no Java and no server: a test reaching one is mis-marked."""
    if _fast_tier():
        test = getattr(request, "_pyfuncitem", request.node)
        pytest.fail(
            f"{test.nodeid} needs {what} but is in the fast tier: mark it "
            f"({', '.join(SLOW_MARKERS)}) or use the fixture that needs it",
            pytrace=False,
        )


# -- the time budget --------------------------------------------------------------------------

_DURATIONS: dict[str, float] = {}
_STARTED = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The suite's total and its ten slowest tests against the budget (pyproject.toml):
    warnings, never failures; speed itself is the benchmarks' business."""
    suite = float(config.getini("budget_suite_seconds") or 0)
    one = float(config.getini("budget_test_seconds") or 0)
    if not _DURATIONS:
        return
    total = time.monotonic() - _STARTED
    tr = terminalreporter
    tr.section("time budget")
    over = suite and total > suite
    tr.write_line(
        f"suite: {total:.0f} s for {len(_DURATIONS)} tests"
        + (f" (budget {suite:.0f} s{': OVER' if over else ''})" if suite else ""),
        yellow=bool(over),
    )
    for nodeid, seconds in sorted(_DURATIONS.items(), key=lambda kv: -kv[1])[:10]:
        late = one and seconds > one
        tr.write_line(
            f"{seconds:8.1f} s  {nodeid}" + (f"  (over {one:.0f} s)" if late else ""),
            yellow=bool(late),
        )
    if over:
        tr.write_line(
            f"warning: the suite took {total:.0f} s, over its {suite:.0f} s budget", yellow=True
        )
    slow = [n for n, s in _DURATIONS.items() if one and s > one]
    if slow:
        tr.write_line(
            f"warning: {len(slow)} test(s) over the one-test budget of {one:.0f} s", yellow=True
        )
    if os.environ.get("CDC_TEST_RECORD") and not hasattr(config, "workerinput"):
        _record(tr)


def _record(tr: Any) -> None:
    """`make test-record`: this run's seconds per test into tests/durations.json (tests not
    run this time keep theirs; tests no longer collected are dropped by the suite's check)."""
    import json

    merged = recorded_durations() | {k: round(v, 1) for k, v in _DURATIONS.items()}
    DURATIONS_FILE.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
    tr.write_line(f"recorded {len(_DURATIONS)} tests' seconds in {DURATIONS_FILE}")


# -- servers ----------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _drop_catalog_schemas() -> Iterator[None]:
    yield
    if _fast_tier():
        return
    try:
        drop_pg_schemas(*CATALOG_SCHEMAS)
    except Exception:  # noqa: BLE001 - no server: the tests that needed it said so
        return


@pytest.fixture(scope="session")
def pg_url(request: pytest.FixtureRequest) -> str:
    import sqlalchemy as sa

    _refuse_in_fast_tier(request, "PostgreSQL")
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
    name = new_schema()
    yield name
    drop_pg_schemas(name, url=pg_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
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
def audit_db(audit_url: tuple[str, str | None]) -> Iterator[AuditDB]:
    from audit import AuditDB

    url, schema = audit_url
    db = AuditDB(url, schema=schema, max_attempts=3, lease_seconds=60)
    yield db
    db.dispose()


@pytest.fixture(scope="session")
def spark_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project the session's SparkSession belongs to (its warehouse and catalog)."""
    root = make_project(tmp_path_factory.mktemp("spark_project"))
    from runner.destinations.spark.session import link_iceberg_jar

    link_iceberg_jar(root)
    return root


@pytest.fixture(scope="session")
def spark(
    spark_project: Path, pg_url: str, request: pytest.FixtureRequest
) -> Iterator[SparkSession]:
    """One local SparkSession for the whole test session, built by the runner's own module;
    everything run in this process (the runner, dbt) gets it back from `getOrCreate()`."""
    from runner.destinations import destination_for
    from runner.project import Project

    _refuse_in_fast_tier(request, "a SparkSession (Java)")
    project = Project.load(spark_project, target="local")
    session = destination_for(project).spark_session(app_name="cdc-tests")
    yield session
    session.stop()


@pytest.fixture
def cli_project(tmp_path: Path, request: pytest.FixtureRequest):  # noqa: ANN201
    """A function making a Cli on a fresh project root for a target. In this process (the
    default) its commands share the session's SparkSession, each test in a schema of its own;
    with ``processes=True`` every command is a real process. Schemas are dropped after."""
    from runner.destinations.spark.session import link_iceberg_jar

    def make(
        target: str,
        without: tuple[str, ...] = (),
        shop: bool = False,
        processes: bool = False,
        folder: str = "repo",
    ) -> Cli:
        root = make_project(tmp_path / folder, without, shop)
        link_iceberg_jar(root)
        env: dict[str, str] = {}
        if not processes:
            request.getfixturevalue("spark")  # staging needs it on every target
        if target == "postgres":
            schema = request.getfixturevalue("pg_schema")
            request.addfinalizer(lambda: drop_pg_schemas(schema + "_audit"))
        elif target == "bigquery":
            env["CDC_BQ_ENDPOINT"] = request.getfixturevalue("bq_emulator").endpoint
            schema = new_schema()  # a dataset of its own
        else:
            schema = new_schema("cli")
        spark = (lambda: request.getfixturevalue("spark")) if target == "local" else None
        cli = Cli(root, target, schema, in_process=not processes, spark=spark, **env)
        link_package(root)
        return cli

    return make


@pytest.fixture(scope="session")
def bq_emulator(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """The local BigQuery emulator (tools/bq_emulator.py) on a free port, for the session.

    Missing is a failure that says how to install it, never a skip."""
    import sys

    _refuse_in_fast_tier(request, "the BigQuery emulator")
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
