"""Test-only fault injection (nothing of it ships in runner/ or macros/): one named moment of
the runner or dbt is wrapped so that a call there fails, or kills the process the way an OOM
killer or a lost machine would.

  hash                   on hashing the second new File
  stage-before-manifest  rows written (Iceberg) or about to be loaded (PostgreSQL), before the
                         staged-files manifest
  stage-after-manifest   manifest written, before the Audit DB marks the Files STAGED
  before-markers         local Spark: after the target MERGE, before the markers INSERT;
                         PostgreSQL: the whole apply executed, before its COMMIT
  reconcile              in the transaction marking Files COMMITTED, their states and events
                         written, as it keeps the first File's marker counts (before COMMIT)
  bq-load                BigQuery: as the first load job is submitted
  bq-apply               BigQuery: as the apply script (the one writing markers) is submitted

  before-markers-of=T    as before-markers, at the markers INSERT of apply model T only
  before-merge-of=T      before the MERGE into apply model T (on PostgreSQL, whose apply is
                         one script: before-markers-of=T)

and `walk_the_stops(build, models)`: dbt builds, each stopped before a statement that writes of
each named apply model that no build stopped before yet, until one runs to the end: every
point between two statements of an apply path is one build's end (a run of drops of scratch
objects counts as one point: before its first drop).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def die() -> None:
    """SIGKILL this process, at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class InjectedFailure(RuntimeError):
    pass


def hold(held: Path, go: Path, limit: float = 600.0) -> Callable[[], None]:
    """An action that writes ``held`` and waits until ``go`` exists (a gate: the test lets
    another process run meanwhile), once."""
    done = [False]

    def action() -> None:
        if done[0]:
            return
        done[0] = True
        held.write_text(str(os.getpid()))
        deadline = time.monotonic() + limit
        while not go.exists():
            assert time.monotonic() < deadline, f"never let go: {go}"
            time.sleep(0.1)

    return action


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
    inherited = object()  # the attribute was a base class's: restored by deleting it

    def patch(owner: Any, name: str, new: Any) -> None:
        patches.append((owner, name, owner.__dict__.get(name, inherited)))
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

        patch(AuditDB, "mark_staged_many", _on_call(1, AuditDB.mark_staged_many, action))
    elif phase == "before-markers" or phase.startswith(("before-markers-of=", "before-merge-of=")):
        from dbt.adapters.postgres.connections import PostgresConnectionManager
        from pyspark.sql import SparkSession

        which, _, table = phase.partition("=")  # no table: any model's
        into = re.compile(rf"merge\s+into\s+[`\"\w.\-]*[`\".]{re.escape(table)}[`\"]?\s", re.I)

        def chosen(query: str, script: bool) -> bool:
            if which != "before-merge-of" or script:
                return is_marker_insert(query) and (not table or f".{table}'" in query)
            return bool(into.search(query))

        spark_sql = SparkSession.sql
        add_query = PostgresConnectionManager.add_query

        def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            if chosen(query, script=False):
                action()
            return spark_sql(self, query, *args, **kwargs)

        def pg_add_query(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
            result = add_query(self, query, *args, **kwargs)
            if chosen(query, script=True):
                action()  # executed inside the model's transaction, never committed
            return result

        patch(SparkSession, "sql", sql)
        patch(PostgresConnectionManager, "add_query", pg_add_query)
    elif phase == "bq-load":
        from google.cloud.bigquery import Client

        patch(Client, "load_table_from_file", _on_call(1, Client.load_table_from_file, action))
    elif phase == "bq-apply":
        from dbt.adapters.bigquery.connections import BigQueryConnectionManager

        raw_execute = BigQueryConnectionManager.raw_execute

        def bq_raw_execute(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
            if is_marker_insert(sql):
                action()
            return raw_execute(self, sql, *args, **kwargs)

        patch(BigQueryConnectionManager, "raw_execute", bq_raw_execute)
    elif phase == "reconcile":
        from audit import AuditDB

        keep = AuditDB._keep_markers  # a staticmethod of a base class (audit/markers.py)
        patch(AuditDB, "_keep_markers", staticmethod(_on_call(1, keep, action)))
    else:
        raise ValueError(f"unknown phase {phase!r}")
    try:
        yield
    finally:
        for owner, name, old in reversed(patches):
            if old is inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


# A statement that changes something (on PostgreSQL the transaction's COMMIT too): the points an
# apply can stop between. Reads (introspection, the waiting-Files check) change nothing.
WRITES = re.compile(
    r"(insert|merge|delete|update|create|drop|truncate|alter|replace|commit)\b", re.I
)  # matched against _start(): the statement without its leading comments
DROP = re.compile(r"drop\b", re.I)
# On Spark every statement but a temporary view's is its own commit; a killed process loses its
# temporary views, so a stop before one leaves what a stop before the next commit leaves. So
# does a stop before an apply's scratch table (`<model>__cdc_batch`, ...): the next build makes
# it again from what is committed, before it writes anything else. And so does a stop before
# the mark of a target's unique keys (a table property): the tables are as before the next
# commit, and a missing mark only makes the next build count the keys.
SPARK_COMMITS = re.compile(
    r"^(?!create or replace temporary view|drop view|create or replace table [\w.`]*__cdc_"
    r"|alter table [\w.`]* set tblproperties \('cdc\.keys_unique_at')",
    re.I,
)


def _model_of(name: str | None, models: tuple[str, ...]) -> str | None:
    """The model (of ``models``) a dbt connection runs: connections are named by node id."""
    if not name or not name.startswith("model."):
        return None
    model = name.rsplit(".", 1)[-1]
    return model if model in models else None


def _start(sql: str) -> str:
    """A statement's start, without dbt's query comment: what tells two statements apart."""
    text = re.sub(r"^\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*)*", "", sql, count=1, flags=re.S)
    text = re.sub(r"__dbt_tmp\d+", "__dbt_tmp", text)  # dbt-postgres's temp names: a timestamp
    text = re.sub(r"(__cdc_[a-z]+)_[0-9a-f]{16}\b", r"\1", text)  # Spark's scratch: the build's id
    text = re.sub(r"('cdc\.keys_unique_at' = )'s\d+'", r"\1's'", text)  # the snapshot marked
    return " ".join(text.split())[:160]


@contextlib.contextmanager
def stopped_at_new(
    passed: set[tuple[str, str, int]], models: tuple[str, ...], only: re.Pattern | None = None
) -> Iterator[dict]:
    """Within the block, each of ``models`` fails (InjectedFailure) instead of running its
    first writing statement not in ``passed`` (model, statement start, how many times that
    start came before in this build); it is added to ``passed``. On local Spark the
    statements before it are committed, one by one, as a killed process leaves them; on
    PostgreSQL the model's multi-statement apply is sent here one statement at a time in its
    transaction, so that each is reachable, and dbt rolls the transaction back as the server
    does for a dead client. ``only``: stop only before statements it matches (searched in the
    statement's start). Yields {model: the statement it stopped before}."""
    from dbt.adapters.sql.connections import SQLConnectionManager

    add_query = SQLConnectionManager.add_query
    stopped: dict[str, str] = {}
    seen: dict[tuple[str, str], int] = {}
    last: dict[str, str] = {}  # model -> its last writing statement's start in this build

    def one(self: Any, model: str, sql: str, args: tuple, kwargs: dict) -> Any:
        start = _start(sql)
        if WRITES.match(start) and model not in stopped:
            times = seen.get((model, start), 0)
            seen[(model, start)] = times + 1
            # A run of drops (the scratch objects', each `if exists`) is one point to stop
            # at: stopping between two of them leaves what stopping before the first leaves.
            chosen = only is None or only.search(start)
            after_drop = DROP.match(start) and DROP.match(last.get(model, ""))
            if chosen:  # (a run of drops: of the chosen statements)
                last[model] = start
            if chosen and not after_drop and (model, start, times) not in passed:
                passed.add((model, start, times))
                stopped[model] = start
                raise InjectedFailure(f"injected failure before `{start[:60]}` of {model}")
        return add_query(self, sql, *args, **kwargs)

    def patched(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        model = _model_of(self.get_thread_connection().name, models)
        if model is None:
            return add_query(self, sql, *args, **kwargs)
        parts = [p for p in sql.split(";\n") if p.strip()] if ";\n" in sql else [sql]
        result = None
        for part in parts:
            result = one(self, model, part, args, kwargs)
        return result

    SQLConnectionManager.add_query = patched  # type: ignore[method-assign]
    try:
        yield stopped
    finally:
        SQLConnectionManager.add_query = add_query  # type: ignore[method-assign]


def walk_the_stops(
    build: Callable[[], Any],
    models: tuple[str, ...],
    limit: int = 40,
    only: re.Pattern | None = None,
) -> dict[str, list[str]]:
    """``build()`` (a dbtRunner result) again and again, each time stopped before the first
    statement of each of ``models`` that no build stopped before yet (so every statement of
    the apply, those that appear only on a rerun too, is once the next to run), until a build
    finds none: that last one, the same command with nothing stopped, must succeed. Each
    stopped build fails only where it was stopped. ``only``: the statements to stop before
    (the rest run as they are), for a walk that proves only what differs from a full walk
    elsewhere. Returns each model's statements stopped before (their start), in order."""
    passed: set[tuple[str, str, int]] = set()
    stops: dict[str, list[str]] = {}
    for _ in range(limit):
        with stopped_at_new(passed, models, only) as stopped:
            res = build()
        if not stopped:
            assert res.success, f"the build after the stops failed: {res.exception}"
            return stops
        failed = {
            r.node.name: r.message or ""
            for r in (res.result or [])
            if str(r.status) in ("error", "fail", "runtime error")
        }
        assert sorted(failed) == sorted(stopped), (failed, stopped)
        for name, message in failed.items():
            assert "injected failure before" in message, message
            stops.setdefault(name, []).append(stopped[name])
    raise AssertionError(f"still stopping after {limit} builds: {stops}")


def stopped_before(stops: list[str], *fragments: str) -> None:
    """Each fragment is in a statement the walk stopped before."""
    for fragment in fragments:
        assert any(fragment in s for s in stops), (fragment, stops)


def run_at(script: Path, phase: str, cli: Any, *args: str) -> tuple[int, str, str]:
    """`python SCRIPT PHASE runner ARGS` (tests/kill_at.py, tests/down_at.py) in a process group
    of its own, from the project root: its exit code, stdout and stderr once it and every child
    (the JVM, which may hold table files) are gone. A run that does not end in 10 minutes is
    killed and reported as hanging."""
    proc = subprocess.Popen(
        [sys.executable, str(script), phase, "runner", *args],
        cwd=cli.root,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{phase}: the run hung") from None
    deadline = time.monotonic() + 60
    while True:  # the JVM notices its parent is gone and exits
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, f"{phase}: children of the run live on"
        time.sleep(0.2)
    return proc.returncode, out, err
