"""Test-only fault injection (nothing of it ships in runner/ or macros/): one named moment of
the runner or dbt is wrapped so that a call there fails, or kills the process the way an OOM
killer or a lost machine would.

  hash                   on hashing the second new File
  stage-before-manifest  rows written (Iceberg) or about to be loaded (PostgreSQL), before the
                         staged-files manifest
  stage-after-manifest   manifest written, before the Audit DB marks the File STAGED
  before-markers         local Spark: after the target MERGE, before the markers INSERT;
                         PostgreSQL: the whole apply executed, before its COMMIT
  reconcile              after the first File is marked COMMITTED
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any


def die() -> None:
    """SIGKILL this process, at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class InjectedFailure(RuntimeError):
    pass


def fail() -> None:
    raise InjectedFailure("injected failure")


def is_marker_insert(sql: str) -> bool:
    """The statement that writes markers: an INSERT, or on Spark destinations a MERGE, into
    cdc_applied_files (statements that only read it do not count)."""
    return bool(re.search(r"(insert|merge)\s+into\s+[`\"\w.\-]*cdc_applied_files", sql, re.I))


def _on_call(n: int, fn: Callable[..., Any], action: Callable[[], None]) -> Callable[..., Any]:
    """``fn``, except that its n-th call runs ``action`` instead."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n:
            action()
        return fn(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def armed(phase: str, action: Callable[[], None] = die) -> Iterator[None]:
    """Within the block, ``action`` runs at ``phase`` (see the module's list); the code is
    restored after it."""
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, new: Any) -> None:
        patches.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    if phase == "hash":
        import runner.ingest

        patch(runner.ingest, "content_hash", _on_call(2, runner.ingest.content_hash, action))
    elif phase == "stage-before-manifest":
        from runner.destinations.postgres import PostgresWriter
        from runner.destinations.spark.destination import SparkTableWriter

        patch(SparkTableWriter, "_manifest", _on_call(1, SparkTableWriter._manifest, action))
        patch(PostgresWriter, "_load", _on_call(1, PostgresWriter._load, action))
    elif phase == "stage-after-manifest":
        from audit import AuditDB

        patch(AuditDB, "mark_staged", _on_call(1, AuditDB.mark_staged, action))
    elif phase == "before-markers":
        from dbt.adapters.postgres.connections import PostgresConnectionManager
        from pyspark.sql import SparkSession

        spark_sql = SparkSession.sql
        add_query = PostgresConnectionManager.add_query

        def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if is_marker_insert(query):
                action()
            return spark_sql(self, query, *args, **kwargs)

        def pg_add_query(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            result = add_query(self, query, *args, **kwargs)
            if is_marker_insert(query):
                action()  # executed inside the model's transaction, never committed
            return result

        patch(SparkSession, "sql", sql)
        patch(PostgresConnectionManager, "add_query", pg_add_query)
    elif phase == "reconcile":
        from audit import AuditDB

        patch(AuditDB, "mark_committed", _on_call(2, AuditDB.mark_committed, action))
    else:
        raise ValueError(f"unknown phase {phase!r}")
    try:
        yield
    finally:
        for owner, name, old in reversed(patches):
            setattr(owner, name, old)
