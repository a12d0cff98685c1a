"""`runner run`: reconcile, ingest, `dbt build`, reconcile, in one process and one SparkSession.

A run builds only what its Files touch: `dbt build --select` the sources of the entities with
staged, unapplied Files and everything downstream of them (their apply models, change history,
snapshots, transaction ledgers and members, tests), unless the user's own arguments select.
With nothing to stage and nothing waiting for an apply, neither Spark nor dbt is started.

dbt runs in-process (``dbtRunner``); on a Spark target dbt-spark's session method gets the
runner's SparkSession back from ``getOrCreate()``, so the JVM starts once. The runner's
process_id is passed to dbt in the ``CDC_PROCESS_ID`` environment variable (not a ``--vars``
value: a var that changes every run makes dbt re-parse the whole project, every run).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from audit import FileRecord
from runner.dbt_invoke import dbt_command, quick_flag_source
from runner.entities import Entity
from runner.errors import error_line, no_space_under
from runner.ingest import IngestResult, ingest
from runner.invocation import Invocation
from runner.phases import Phases
from runner.progress import Progress
from runner.project import Project
from runner.reconcile import ReconcileResult, reconcile

log = logging.getLogger("runner.run")


@dataclass
class RunResult:
    ingest: IngestResult
    dbt_ok: bool
    dbt_error: str | None
    reconcile: ReconcileResult = field(default_factory=ReconcileResult)
    # Why dbt ran: entity -> its STAGED Files waiting for an apply (empty: dbt did not run).
    to_apply: dict[str, int] = field(default_factory=dict)
    selected: list[str] = field(default_factory=list)  # the --select the runner gave dbt
    built: list[str] = field(default_factory=list)  # the dbt nodes run: "model.customers", ...
    node_seconds: dict[str, float] = field(default_factory=dict)  # each of them: its own time

    @property
    def nothing_new(self) -> bool:
        return not self.to_apply

    @property
    def ok(self) -> bool:
        return self.dbt_ok and not (self.ingest.quarantined or self.ingest.failed)


def dbt_build(
    project: Project,
    process_id: str,
    args: list[str] | None = None,
    phases: Phases | None = None,
    built: dict[str, float] | None = None,
    runner: Any = None,
) -> tuple[bool, str | None]:
    """`dbt build` on the project's dbt project and target, in this process. ``phases`` gets
    ``dbt_nodes`` (from the first node's start to the last one's end: the apply) and
    ``dbt_fixed`` (the rest: parse, compile, connections); ``built`` gets the nodes dbt ran, as
    ``<resource type>.<name>``, each with its own seconds. ``runner``: a ``dbtRunner`` holding
    an already parsed manifest (watch mode), else a new one."""
    from dbt.cli.main import dbtRunner

    quick_flag_source()
    start = time.perf_counter()
    before = os.environ.get("CDC_PROCESS_ID")
    os.environ["CDC_PROCESS_ID"] = process_id
    try:
        res = (runner or dbtRunner()).invoke(dbt_command(project, "build", *(args or [])))
    finally:
        if before is None:
            os.environ.pop("CDC_PROCESS_ID", None)
        else:
            os.environ["CDC_PROCESS_ID"] = before
    results = list(getattr(res.result, "results", None) or [])
    if built is not None:
        built.update(
            {
                f"{r.node.resource_type}.{r.node.name}": float(r.execution_time or 0)
                for r in results
                if getattr(r, "node", None) is not None
            }
        )
    if phases is not None:
        total = time.perf_counter() - start
        nodes = _nodes_span(results)
        phases.add("dbt_fixed", max(total - nodes, 0.0))
        phases.add("dbt_nodes", min(nodes, total))
    if res.success:
        return True, None
    log_file = project.dbt_project_dir / "logs" / "dbt.log"
    if res.exception is not None:
        kept = f"Files not applied stay STAGED (dbt's log: {log_file})"
        return False, f"dbt build failed: {error_line(res.exception)}; {kept}"
    failed = [
        (r.node.name, str(r.status), r.message)
        for r in results
        if str(getattr(r, "status", "")) in ("error", "fail")
    ]
    return False, build_failure(project, failed, log_file)


def build_failure(
    project: Project, failed: list[tuple[str, str, str | None]], log_file: Any
) -> str:
    """One line for a failed `dbt build`: each failed node's cause in words, what was kept
    and what to do; dbt's and Java's detail stay in dbt's log (named) or come with --debug.
    ``failed``: (node name, status, dbt's message) of each node that failed."""
    causes: list[str] = []
    # what to do, the most demanding of the causes' (a cause to mend before anything else)
    todos = ["run the same command again"]
    for name, status, message in failed:
        text = message or ""
        place = no_space_under(RuntimeError(text))
        if place is not None:
            causes.append(f"{name}: no space left on device{place}")
            todos.append(f"free space{place}, then run the same command again")
        elif lost_a_race(text):
            causes.append(f"{name}: another build committed to the same table at the same time")
        elif CONNECTION_LOST.search(text):
            where = postgres_address(project)
            at = f" at {where}" if where else ""
            causes.append(f"the connection to PostgreSQL{at} was lost while {name} was applied")
            todos.append("run the same command again once PostgreSQL answers")
        else:
            what = "test failed: " if status == "fail" else ""
            causes.append(f"{name}: {what}{first_meaningful_line(text)}")
            todos.append("see dbt's log, mend the cause, then run the same command again")
    todo = max(todos, key=lambda t: (t.startswith("see"), t.startswith("free"), len(t)))
    return (
        "dbt build failed: "
        + ("; ".join(causes) or "see dbt's log")
        + f"; Files not applied stay STAGED: {todo} (dbt's log: {log_file})"
    )


# A database connection lost under a build, as dbt-postgres, psycopg2 and the JDBC driver of
# the Spark catalog's PostgreSQL word it.
CONNECTION_LOST = re.compile(
    r"server closed the connection unexpectedly|terminating connection due to"
    r"|connection already closed|This connection has been closed"
    r"|An I/O error occurred while sending to the backend|Connection to \S+ refused"
    r"|could not connect to server|connection to server at .* failed"
    r"|the database system is (shutting down|starting up)",
    re.I,
)


def postgres_address(project: Project) -> str | None:
    """host:port of the PostgreSQL a build talks to: the target's own, or the Spark catalog's
    (the embedded default keeps its catalog there)."""
    target = project.target_context
    if target.get("type") == "postgres":
        return f"{target.get('host', 'localhost')}:{target.get('port', 5432)}"
    for value in (target.get("server_side_parameters") or {}).values():
        found = re.search(r"jdbc:postgresql://([^/?\s]+)", str(value))
        if found:
            return found.group(1)
    return None


def first_meaningful_line(text: str) -> str:
    """The line of a dbt node's message that says what went wrong: a Java or Python exception's,
    an error class's or a database's error line when there is one (dbt-spark's messages carry
    the JVM's whole stack trace), else the first line but dbt's own heading; at most 300
    characters."""
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("at ") and not DBT_HEADING.match(ln)]
    said = next(
        (ln for ln in lines if re.search(r"(exception|error):|\[[A-Z_]{4,}\]", ln, re.I)),
        lines[0] if lines else "no message",
    )
    return said[:300]


# dbt's heading of a node's error ("Database Error in model accounts (models/accounts.sql)").
DBT_HEADING = re.compile(
    r"^(Runtime|Database|Compilation|Dependency) Error in \w+ \S+( \(.*\))?:?$"
)


def _nodes_span(results: list[Any]) -> float:
    """Seconds from the first node's start to the last node's end: the build's time in its
    nodes, which run several at a time (dbt's threads), so not the sum of their times."""
    steps = [
        t
        for r in results
        for t in getattr(r, "timing", None) or []
        if t.started_at is not None and t.completed_at is not None
    ]
    if not steps:
        return sum(float(getattr(r, "execution_time", 0) or 0) for r in results)
    first = min(t.started_at for t in steps)
    last = max(t.completed_at for t in steps)
    return max((last - first).total_seconds(), 0.0)


# What a destination says when another writer committed to the same table first: Iceberg's
# optimistic commit (a conflicting MERGE, or a scratch table replaced under the apply), Delta's
# concurrent-modification exceptions, BigQuery's serialization error. The loser's statements
# before it are replays of an idempotent apply: running the build again finishes it. On Spark
# two builds of one model also share its scratch tables (`<model>__cdc_batch`, ...): both create
# one at once and the catalog refuses the second, or the one that finishes first drops them and
# the other finds them gone. dbt creates a relation only after finding it absent, so a catalog
# refusing a create means another build created it in between.
RACE_LOST_SIGNS = (
    "commitfailedexception",
    "found conflicting files",
    # ... and a merge-on-read table's (the apply targets): deletes committed by the other build
    "found conflicting deleted files",
    "found new conflicting delete files",
    "found new delete for replaced data file",
    "found new position delete for replaced data file",
    "found concurrently added dv for",
    # ... or rewrote (the other build's dedupe, `runner maintain`) a data file this one deletes from
    "cannot commit, missing data files",
    "missing required files to delete",
    "table uuid does not match",
    "has been concurrently modified",
    "table already exists: ",
    "view already exists: ",
    "updated concurrently",  # Iceberg's JDBC catalog: two builds replacing one view at once
    # ... or creating one table or view at once (the later insert of its catalog row fails)
    'violates unique constraint "iceberg_tables_pkey"',
    "table_or_view_already_exists",
    # PostgreSQL: two builds replacing one view or table at once (dbt's create, rename, drop)
    "tuple concurrently updated",
    "pg_type_typname_nsp_index",
    # dbt-postgres caught the other build's relation between its states (type unknown)
    "drop external if exists",
    "concurrentappendexception",
    "concurrentdeletereadexception",
    "concurrentdeletedeleteexception",
    "could not serialize access to table",
    # the snapshot apply's own check (macros/apply/snapshot.sql: snapshot_guard_join)
    "cdc: another build applied files of",
    # ... and the runner's own line for any of these (build_failure)
    "another build committed to the same table at the same time",
)
# Another build dropped (and purged) a scratch table this one was reading.
SCRATCH_GONE = re.compile(
    r"__cdc_\w+`? (cannot be found|from catalog \w+: dropped by another)"
    r"|__cdc_\w+/(data|metadata)/\S+ (does not exist|not found)"
)


# PostgreSQL refusing a create that dbt made only after finding the relation absent.
PG_CREATED_MEANWHILE = re.compile(r'(relation|type) "[^"]+" already exists')


def lost_a_race(message: str | None) -> bool:
    """Whether a failed node's message is a concurrent commit to the same table."""
    text = (message or "").lower()
    return (
        any(sign in text for sign in RACE_LOST_SIGNS)
        or bool(SCRATCH_GONE.search(text))
        or bool(PG_CREATED_MEANWHILE.search(text))
    )


def run(
    inv: Invocation,
    process_id: str,
    *,
    landing: list[str] | None = None,
    entity_names: list[str] | None = None,
    min_age_seconds: float = 0.0,
    settle_seconds: float = 0.0,
    dbt_args: list[str] | None = None,
    progress: Progress | None = None,
    effective_date: date | None = None,
    recover: bool = True,
    dbt_runner: Any = None,
) -> RunResult:
    ingested = ingest(
        inv,
        process_id,
        landing=landing,
        entity_names=entity_names,
        min_age_seconds=min_age_seconds,
        settle_seconds=settle_seconds,
        progress=progress,
        effective_date=effective_date,
        recover=recover,
    )
    phases = ingested.phases
    chosen = entity_names or sorted(inv.entities)
    waiting = waiting_for_apply(inv, chosen)
    to_apply = dict(sorted(Counter(f.entity for f in waiting).items()))
    if not to_apply:
        return RunResult(ingest=ingested, dbt_ok=True, dbt_error=None)
    args = list(dbt_args or [])
    selected: list[str] = []
    if not _selects(args):
        selected = selectors(inv.entities, sorted(to_apply))
        args += ["--select", *selected]
    if inv.destination.reads_through_spark:
        with phases.time("spark_start"):
            inv.spark  # noqa: B018 - dbt gets this session back from getOrCreate()
    built: dict[str, float] = {}
    ok, error = dbt_build(inv.project, process_id, args, phases, built, dbt_runner)
    with phases.time("reconcile"):
        after = reconcile(inv, process_id)
    if ok and selected:
        # Waiting before the build, built, and still without a marker: held by a transaction
        # group. The next run builds them when new Files arrive for their group, not for their
        # own sake. (A File staged by another runner meanwhile was not in this build.)
        before = {f.id for f in waiting}
        still = [f.id for f in inv.db.files(states=["STAGED"]) if f.id in before]
        inv.db.note_held(still, process_id)
    return RunResult(
        ingest=ingested,
        dbt_ok=ok,
        dbt_error=error,
        reconcile=after,
        to_apply=to_apply,
        selected=selected,
        built=list(built),
        node_seconds={k: round(v, 3) for k, v in built.items()},
    )


def waiting_for_apply(inv: Invocation, entity_names: list[str]) -> list[FileRecord]:
    """The chosen entities' STAGED Files (staged, not yet applied), but those a successful
    build left held by their transaction group."""
    held = inv.db.held()
    return [
        f for f in inv.db.files(states=["STAGED"]) if f.entity in entity_names and f.id not in held
    ]


def selectors(entities: dict[str, Entity], entity_names: list[str]) -> list[str]:
    """dbt selectors for what the entities' Files touch: each entity's source and everything
    downstream of it. A member of a transaction group adds its group's transaction metadata
    entity (whose ledger decides what the member may apply)."""
    names = set(entity_names)
    for name in entity_names:
        group = entities[name].transactions
        if group:
            names.add(group)
    return [f"source:{entities[n].source}.{n}+" for n in sorted(names)]


_SELECTING = ("--select", "-s", "--selector", "-m", "--models")


def _selects(args: list[str]) -> bool:
    """Whether the user's own dbt arguments choose what to build (theirs then win)."""
    return any(a in _SELECTING or a.split("=", 1)[0] in _SELECTING for a in args)
