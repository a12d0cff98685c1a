"""`python tests/kill_at.py PHASE runner|dbt ARGS...`: the runner or dbt CLI, SIGKILLed (or
failed) at one moment.

Test-only fault injection (nothing of it ships in runner/ or macros/): the named moment is
wrapped so that the process kills itself there, the way an OOM killer or a lost machine would.

  hash                   on hashing the second new File
  stage-before-manifest  rows written (Iceberg) or about to be loaded (PostgreSQL), before the
                         staged-files manifest
  stage-after-manifest   manifest written, before the Audit DB marks the File STAGED
  before-markers         local Spark: after the target MERGE, before the markers INSERT;
                         PostgreSQL: the whole apply executed, before its COMMIT
  reconcile              after the first File is marked COMMITTED
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def on_call(n: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, except that its n-th call kills the process instead of running."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n:
            die()
        return fn(*args, **kwargs)

    return wrapper


def is_marker_insert(sql: str) -> bool:
    """The statement that writes markers: an INSERT, or on Spark destinations a MERGE, into
    cdc_applied_files (statements that only read it do not count)."""
    import re

    return bool(re.search(r"(insert|merge)\s+into\s+[`\"\w.\-]*cdc_applied_files", sql, re.I))


def arm(phase: str) -> None:
    if phase == "hash":
        import runner.ingest

        runner.ingest.content_hash = on_call(2, runner.ingest.content_hash)
    elif phase == "stage-before-manifest":
        from runner.destinations.postgres import PostgresWriter
        from runner.destinations.spark import SparkTableWriter

        SparkTableWriter._manifest = on_call(1, SparkTableWriter._manifest)  # type: ignore[method-assign]
        PostgresWriter._load = on_call(1, PostgresWriter._load)  # type: ignore[method-assign]
    elif phase == "stage-after-manifest":
        from audit import AuditDB

        AuditDB.mark_staged = on_call(1, AuditDB.mark_staged)  # type: ignore[method-assign]
    elif phase == "before-markers":
        from dbt.adapters.postgres.connections import PostgresConnectionManager
        from pyspark.sql import SparkSession

        spark_sql = SparkSession.sql

        def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if is_marker_insert(query):
                die()
            return spark_sql(self, query, *args, **kwargs)

        SparkSession.sql = sql  # type: ignore[method-assign]
        add_query = PostgresConnectionManager.add_query

        def pg_add_query(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
            result = add_query(self, sql, *args, **kwargs)
            if is_marker_insert(sql):
                die()  # executed inside the model's transaction, never committed
            return result

        PostgresConnectionManager.add_query = pg_add_query  # type: ignore[method-assign]
    elif phase == "reconcile":
        from audit import AuditDB

        AuditDB.mark_committed = on_call(2, AuditDB.mark_committed)  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown phase {phase!r}")


if __name__ == "__main__":
    phase, command, *args = sys.argv[1:]
    assert command in ("runner", "dbt"), "usage: kill_at.py PHASE runner|dbt ARGS..."
    arm(phase)
    if command == "dbt":
        from dbt.cli.main import cli as main
    else:
        from runner.cli import main  # type: ignore[assignment]
    sys.argv = [command, *args]
    main()
