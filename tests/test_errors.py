"""How the runner says what went wrong, in one line: a database that went away, and a build
that lost a race to another build of the same table (the messages as Iceberg and Spark word
them; the tests that provoke them for real are test_servers.py and test_concurrency.py)."""

from __future__ import annotations

import pytest

from runner.errors import TransientError, classify, server_gone
from runner.run import lost_a_race


def _refused() -> BaseException:
    """A real driver error: PostgreSQL refusing a connection (nothing listens on port 1)."""
    import psycopg2

    try:
        psycopg2.connect(host="127.0.0.1", port=1, user="postgres", dbname="t", connect_timeout=3)
    except psycopg2.OperationalError as exc:
        return exc
    raise AssertionError("something listens on 127.0.0.1:1")


def test_a_database_that_went_away_is_said_in_one_line_and_is_nobodys_files_fault() -> None:
    exc = _refused()
    said = server_gone(exc)
    assert said is not None and said.startswith("lost PostgreSQL: ")
    assert "127.0.0.1" in said and "\n" not in said
    assert "run the same command again" in said
    try:  # the same, raised from inside the runner's own code
        raise RuntimeError("the Audit DB could not be updated") from exc
    except RuntimeError as wrapped:
        assert server_gone(wrapped) == said
    assert isinstance(classify(exc, path="landing/a.csv"), TransientError)  # no attempt counted
    assert server_gone(ValueError("could not convert 'x' to int")) is None


def test_the_spark_catalogs_database_going_away_is_said_too() -> None:
    # Iceberg's JDBC catalog reconnecting to a restarted server fails with a cast error
    # (apache/iceberg#11176); Py4J's text carries the Java exception.
    text = (
        "An error occurred while calling o61.sql.\n: java.lang.ClassCastException: Cannot cast "
        "org.postgresql.util.PSQLException to java.sql.SQLTransientException\n\tat java.base/"
    )
    said = server_gone(RuntimeError(text))
    assert said is not None and said.startswith("lost the Spark catalog's PostgreSQL")
    refused = "x\n: org.postgresql.util.PSQLException: Connection to 127.0.0.1:5 refused. Check\n"
    assert "Connection to 127.0.0.1:5 refused" in (server_gone(RuntimeError(refused)) or "")


@pytest.mark.parametrize(
    "message",
    [  # what the losing build said in two-builds races on local Spark + Iceberg 1.9
        "java.lang.IllegalStateException: Runtime file filtering is not possible: the table has "
        "been concurrently modified. Row-level operation scan snapshot ID: 1",
        "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can "
        "contain records matching true: [/w/customers/data/0.parquet]",
        # a merge-on-read target: Iceberg 1.9's validation of the row delta
        "org.apache.iceberg.exceptions.ValidationException: Found new conflicting delete files "
        "that can apply to records matching true: [/w/customers/data/0-deletes.parquet]",
        "org.apache.iceberg.exceptions.ValidationException: Found conflicting deleted files that "
        "can contain records matching true: [/w/customers/data/0.parquet]",
        "org.apache.iceberg.exceptions.ValidationException: Cannot commit, missing data files: "
        "[/w/customers/data/00000-11-1f-0-00001.parquet]",
        "java.lang.IllegalStateException: Table UUID does not match: current=6b != refreshed=46",
        "org.apache.iceberg.exceptions.NoSuchTableException: Failed to load table "
        "s.customers_changes_history__cdc_batch from catalog spark_catalog: dropped by another "
        "process",
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `s`.`customers__cdc_batch` cannot be found.",
        "org.apache.iceberg.exceptions.AlreadyExistsException: Table already exists: s.c__cdc_b",
        "org.apache.iceberg.exceptions.AlreadyExistsException: View was updated concurrently: "
        "tx_test.stg_orders",
        "org.apache.iceberg.jdbc.UncheckedSQLException: Unknown failure\nCaused by: org."
        "postgresql.util.PSQLException: ERROR: duplicate key value violates unique constraint "
        '"iceberg_tables_pkey"\n  Detail: Key (catalog_name, table_namespace, table_name)=('
        "spark_catalog, s, stg_accounts) already exists.",
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `s`.`accounts__cdc_files` cannot be found.",
        "java.io.FileNotFoundException: File file:/w/s/accounts__cdc_files/data/0-1.parquet "
        "does not exist",
        'syntax error at or near "external"\n  LINE 2: drop external if exists "t"."s"."stg_x"',
        # PostgreSQL, two builds replacing one view at once (dbt's create, rename, drop)
        'Database Error in model stg_x\n  relation "stg_x__dbt_backup" already exists',
        "Database Error in model stg_x\n  tuple concurrently updated",
        'duplicate key value violates unique constraint "pg_type_typname_nsp_index"',
    ],
)
def test_a_lost_race_is_recognised(message: str) -> None:
    assert lost_a_race(message)


@pytest.mark.parametrize(
    "message",
    [
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `s`.`customers` cannot be found.",
        "org.apache.iceberg.exceptions.ValidationException: Cannot find field 'x' in struct",
        "",
    ],
)
def test_other_errors_are_not_called_a_race(message: str) -> None:
    assert not lost_a_race(message)


def test_a_failed_build_is_one_line_with_its_cause_what_is_kept_and_what_to_do() -> None:
    """`runner run`'s line for a failed `dbt build`, from the node messages as dbt-spark and
    dbt-postgres give them (a Java stack trace included): no stack frame, the cause in words
    per node, the Files kept, what to do (the most demanding), dbt's log named."""
    from pathlib import Path

    from runner.project import Project
    from runner.run import build_failure

    project = Project.load(Path(__file__).resolve().parents[1], target="postgres")
    java = (
        "Runtime Error in model accounts_history (models/accounts_history.sql)\n"
        "  An error occurred while calling o120.sql.\n"
        ": org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] cdc: another build "
        "applied Files of s.accounts_history while this build ran; run again SQLSTATE: P0001\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.raiseError(X.scala:1)\n"
    )
    cut = (
        "Database Error in model customers (models/customers.sql)\n"
        "  terminating connection due to administrator command\n"
        "  server closed the connection unexpectedly\n"
    )
    broken = "Compilation Error in model orders (models/orders.sql)\n  'x' is undefined\n"
    log = Path("/p/dbt_project/logs/dbt.log")
    line = build_failure(project, [("accounts_history", "error", java)], log)
    assert line == (
        "dbt build failed: accounts_history: another build committed to the same table at the "
        "same time; Files not applied stay STAGED: run the same command again "
        "(dbt's log: /p/dbt_project/logs/dbt.log)"
    )
    line = build_failure(project, [("customers", "error", cut)], log)
    host = f"{project.target_context.get('host')}:{project.target_context.get('port')}"
    assert line.startswith(
        f"dbt build failed: the connection to PostgreSQL at {host} was lost while customers "
        "was applied; Files not applied stay STAGED: run the same command again once "
        "PostgreSQL answers"
    ), line
    both = build_failure(project, [("customers", "error", cut), ("orders", "error", broken)], log)
    assert "orders: 'x' is undefined;" in both and "mend the cause" in both, both
    for said in (line, both):
        assert "\n" not in said and "\tat " not in said
