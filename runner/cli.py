"""`runner`: a thin click layer over the library functions of runner/ and audit/.

Exit codes: 0 ok, 1 finished with failed or quarantined Files, 2 usage or unexpected error.
Errors print one readable line; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import enum
import json
import logging
import sys
import traceback
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from runner.errors import CdcError, UsageError

log = logging.getLogger("runner")


class ExitCode(enum.IntEnum):
    OK = 0
    FILES_FAILED = 1
    ERROR = 2


@dataclass
class Context:
    """What every command gets from the global options."""

    project_dir: str | None
    target: str | None
    profiles_dir: str | None
    audit_url: str | None
    audit_schema: str | None
    debug: bool
    verbose: bool = False

    def project(self) -> Any:
        from runner.project import Project

        return Project.load(self.project_dir, self.target, self.profiles_dir)

    def audit_db(self, project: Any) -> Any:
        from audit import AuditDB
        from runner.project import audit_location

        url, schema = audit_location(project, self.audit_url, self.audit_schema)
        audit = project.settings.audit
        db = AuditDB(
            url,
            schema=schema,
            max_attempts=audit.max_attempts,
            lease_seconds=audit.lease_seconds,
        )
        db.ensure_current()
        return db


class RunnerGroup(click.Group):
    """Turns expected errors into one line and an exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except CdcError as exc:
            debug = _debug(ctx)
            if debug:
                traceback.print_exc()
            click.echo(f"error: {exc.message}", err=True)
            ctx.exit(ExitCode.ERROR)
        except Exception as exc:  # unexpected: still one line unless --debug
            debug = _debug(ctx)
            if debug:
                traceback.print_exc()
            click.echo(f"error: {type(exc).__name__}: {_one_line(exc)}", err=True)
            if not debug:
                click.echo("run again with --debug for the traceback", err=True)
            ctx.exit(ExitCode.ERROR)


def _debug(ctx: click.Context) -> bool:
    """--debug, given before or after the subcommand."""
    return bool(ctx.params.get("debug")) or bool(getattr(ctx.obj, "debug", False))


def _configure_logging(debug: bool, verbose: bool = False) -> None:
    """Quiet by default: the runner's warnings and errors only (Spark's log is kept to errors
    in runner/spark_session.py, dbt's to errors by `runner run`). ``-v`` adds the runner's
    progress lines, Spark's WARN lines and dbt's own output; ``--debug`` everything."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    log.setLevel(logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING)


def verbose() -> bool:
    """-v or --debug is on (the runner's logger says so)."""
    return log.isEnabledFor(logging.INFO)


# The options every command takes, before or after its name (`runner ingest --target prod`, as
# `dbt build --target prod`): (parameter names, Context field, help, is a flag).
GLOBAL_OPTIONS: list[tuple[tuple[str, ...], str, str, bool]] = [
    (
        ("--project-dir",),
        "project_dir",
        "Repository root holding runner.yml, profiles.yml and dbt_project/ (default: .).",
        False,
    ),
    (("--target", "-t"), "target", "dbt profile target (default: the profile's).", False),
    (("--profiles-dir",), "profiles_dir", "Folder holding profiles.yml.", False),
    (
        ("--audit-url",),
        "audit_url",
        "Audit DB SQLAlchemy URL (default: SQLite under the state folder; for a postgres "
        "target, the same server).",
        False,
    ),
    (("--audit-schema",), "audit_schema", "PostgreSQL schema of the Audit DB.", False),
    (
        ("--verbose", "-v"),
        "verbose",
        "Show progress lines, Spark's warnings and dbt's own output.",
        True,
    ),
    (("--debug",), "debug", "Show tracebacks and debug logs.", True),
]


def global_options(func: Any) -> Any:
    """Accept the group's options after the subcommand too; a value given there wins."""

    def setter(field: str) -> Any:
        def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
            if value is None or value is False:
                return
            obj = ctx.find_object(Context)
            if obj is None:  # pragma: no cover - the group always sets it
                return
            setattr(obj, field, value)
            if field in ("debug", "verbose"):
                _configure_logging(obj.debug, obj.verbose)

        return callback

    for names, field, help_text, flag in reversed(GLOBAL_OPTIONS):
        func = click.option(
            *names,
            field,
            is_flag=flag,
            default=False if flag else None,
            expose_value=False,
            callback=setter(field),
            help=help_text,
        )(func)
    return func


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else repr(exc)


@click.group(cls=RunnerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--project-dir",
    envvar="CDC_PROJECT_DIR",
    type=click.Path(file_okay=False),
    help="Repository root holding runner.yml, profiles.yml and dbt_project/ (default: .).",
)
@click.option(
    "--target", "-t", envvar="DBT_TARGET", help="dbt profile target (default: the profile's)."
)
@click.option("--profiles-dir", envvar="DBT_PROFILES_DIR", help="Folder holding profiles.yml.")
@click.option(
    "--audit-url",
    envvar="CDC_AUDIT_URL",
    help="Audit DB SQLAlchemy URL (default: SQLite under the state folder; for a postgres "
    "target, the same server).",
)
@click.option(
    "--audit-schema", envvar="CDC_AUDIT_SCHEMA", help="PostgreSQL schema of the Audit DB."
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Show progress lines, Spark's warnings and dbt's output."
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="cdc-runner")
@click.pass_context
def main(
    ctx: click.Context,
    project_dir: str | None,
    target: str | None,
    profiles_dir: str | None,
    audit_url: str | None,
    audit_schema: str | None,
    verbose: bool,
    debug: bool,
) -> None:
    """Find CDC Files, record them in the Audit DB, stage them with Spark; dbt applies them.

    Global options go before or after the command, as with dbt:
    `runner ingest --landing landing --target postgres`.
    """
    _configure_logging(debug, verbose)
    ctx.obj = Context(project_dir, target, profiles_dir, audit_url, audit_schema, debug, verbose)


@main.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array, one object per File.")
@click.option("--entity", help="Only this entity's Files.")
@click.option(
    "--groups",
    is_flag=True,
    help="Only the transaction groups: watermark, held and quarantined transactions (read "
    "from each group's ledger in the destination).",
)
@click.pass_obj
def status(obj: Context, as_json: bool, entity: str | None, groups: bool) -> None:
    """Show every File the Audit DB knows, with its state, then the transaction groups."""
    from runner.transactions import group_status

    project = obj.project()
    if groups:
        found = group_status(project)
        if as_json:
            click.echo(json.dumps([g.as_json() for g in found], indent=None))
        else:
            _print_groups(found)
        return
    db = obj.audit_db(project)
    try:
        files = db.files(entity=entity)
        markers = db.file_markers()
    finally:
        db.dispose()
    now = datetime.now(UTC).replace(tzinfo=None)
    if as_json:
        click.echo(
            json.dumps([_file_json(f, markers.get(f.id, []), now) for f in files], default=str)
        )
        return
    _print_status_table(files, markers, now)
    if entity is None:
        try:
            found = group_status(project)
        except Exception as exc:  # the Files above stand; the groups need the destination
            if obj.debug:
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            click.echo(
                f"transaction groups: not read ({first[:200]}); try `runner status --groups`"
            )
            return
        _print_groups(found)


def _print_groups(found: list[Any]) -> None:
    """One line per group, then one per held or quarantined transaction."""
    for g in found:
        if not g.built:
            click.echo(f"group {g.group}: ledger {g.ledger} not built yet (run `dbt build`)")
            continue
        counts = ", ".join(f"{n} {s}" for s, n in sorted(g.counts.items())) or "no transactions"
        click.echo(
            f"group {g.group} ({', '.join(g.members)}): watermark_ms {g.watermark_ms}; {counts}"
        )
        for h in g.held:
            late = " OVERDUE" if h["overdue"] else ""
            click.echo(
                f"  held {h['transaction_id']}: {h['staged_events']} of "
                f"{h['expected_events'] if h['end_ms'] is not None else '?'} events staged, "
                f"{'ended' if h['end_ms'] is not None else 'no END yet'}, "
                f"held for {h['held_ms']} ms of source time{late}"
            )
        for tx in g.quarantined:
            click.echo(f"  quarantined {tx}: never ended in time; none of it applied")


def _file_json(f: Any, markers: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """`runner status --json`: the File's fields, plus its age and its markers' counts."""
    from audit.store import MARKER_COUNTS

    out: dict[str, Any] = f.as_json()
    out["age_seconds"] = round((now - f.created_at).total_seconds(), 1)
    out["markers"] = [
        {k: m[k] for k in ("target_table", *MARKER_COUNTS, "applied_at", "invocation_id")}
        for m in markers
    ]
    return out


def _age(seconds: float) -> str:
    """3s, 5m, 2h, 4d: how long ago, in one unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _applied(markers: list[dict[str, Any]]) -> str:
    """A File's marker counts: `customers +3 ~1 -0 =2` per target table (inserted, updated,
    deleted, stale)."""
    return "; ".join(
        f"{m['target_table']} +{m['rows_inserted']} ~{m['rows_updated']} "
        f"-{m['rows_deleted']} ={m['rows_skipped']}"
        for m in markers
    )


def _print_status_table(
    files: list[Any], markers: dict[int, list[dict[str, Any]]], now: datetime
) -> None:
    from rich.console import Console
    from rich.table import Table

    if not files:
        click.echo("No Files registered yet. Land Files and run `runner ingest`.")
        return
    if not sys.stdout.isatty():  # piped: one tab-separated line per File, nothing wrapped
        click.echo(
            "id\tentity\tstate\tattempts\tcontent_hash\tprocess_id\tpath\tlast_error"
            "\tage_seconds\tapplied"
        )
        for f in files:
            error = (f.last_error or "").replace("\n", " ")
            age = (now - f.created_at).total_seconds()
            click.echo(
                f"{f.id}\t{f.entity}\t{f.state}\t{f.attempts}\t{f.content_hash}\t"
                f"{f.staged_by or ''}\t{f.path}\t{error}\t{age:.0f}\t"
                f"{_applied(markers.get(f.id, []))}"
            )
        return
    console = Console()
    table = Table(
        title=f"{len(files)} Files (applied: +inserted ~updated -deleted =stale per table)"
    )
    for col in ("id", "entity", "path", "state", "attempts", "age", "applied", "reason"):
        table.add_column(col, overflow="fold")
    for f in files:
        table.add_row(
            str(f.id),
            f.entity,
            f.path,
            f.state,
            str(f.attempts),
            _age((now - f.created_at).total_seconds()),
            _applied(markers.get(f.id, [])),
            (f.last_error or "")[:120],
        )
    console.print(table)


# The states `runner runs` names per run (its JSON has every state Files passed through).
RUN_STATES = ("STAGED", "COMMITTED", "QUARANTINED", "FAILED", "DUPLICATE")


@main.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array, one object per run.")
@click.option("--limit", default=20, show_default=True, help="The newest N runs (0: all).")
@click.pass_obj
def runs(obj: Context, as_json: bool, limit: int) -> None:
    """List runs, newest first: command, target, outcome, duration, Files per state."""
    project = obj.project()
    db = obj.audit_db(project)
    try:
        found = db.runs()
        moved = db.run_file_counts()
    finally:
        db.dispose()
    if obj.target:
        found = [r for r in found if r["target"] in (None, project.target_name)]
    found.sort(key=lambda r: r["started_at"], reverse=True)
    if limit:
        found = found[:limit]
    out = []
    for r in found:
        totals: dict[str, int] = {}
        for states in moved.get(r["process_id"], {}).values():
            for state, n in states.items():
                totals[state] = totals.get(state, 0) + n
        end = r["ended_at"]
        out.append(
            {
                "process_id": r["process_id"],
                "command": r["command"],
                "target": r["target"],
                "host": r["host"],
                "pid": r["pid"],
                "started_at": r["started_at"].isoformat(),
                "ended_at": end.isoformat() if end else None,
                "seconds": round((end - r["started_at"]).total_seconds(), 1) if end else None,
                "outcome": r["outcome"],
                "files": totals,
            }
        )
    if as_json:
        click.echo(json.dumps(out))
        return
    if not out:
        click.echo("No runs recorded yet.")
        return
    for r in out:
        took = f"{r['seconds']:.1f}s" if r["seconds"] is not None else "-"
        shown = sorted((s, n) for s, n in r["files"].items() if s in RUN_STATES)
        files = ", ".join(f"{n} {s}" for s, n in shown) or "no Files"
        click.echo(
            f"{r['started_at'][:19]}  {r['command']:<9} {r['target'] or '-':<10} "
            f"{r['outcome']:<8} {took:>8}  {files}  {r['process_id']}"
        )


def _echo_summary(entities: list[Any]) -> None:
    """The run's per-entity table: rich on a terminal, aligned plain text otherwise."""
    from runner.summary import render

    if not entities:
        click.echo("nothing staged, applied or quarantined in this run")
        return
    if sys.stdout.isatty():
        from rich.console import Console

        Console().print(render(entities, rich=True))
    else:
        click.echo(render(entities, rich=False))


def ingest_options(func: Any) -> Any:
    """The options `ingest` and `run` share."""
    func = click.option(
        "--min-age",
        default=0.0,
        show_default=True,
        help="Skip Files modified less than N seconds ago (still being written).",
    )(func)
    func = click.option(
        "--settle",
        default=0.0,
        show_default=True,
        help="List Files twice, N seconds apart; skip those whose size or mtime changed.",
    )(func)
    func = click.option(
        "--entity", "entities", multiple=True, help="Only these entities (repeatable)."
    )(func)
    func = click.option(
        "--effective-date",
        type=click.DateTime(formats=["%Y-%m-%d"]),
        default=None,
        help="Business date of the snapshot Files staged now, for snapshot entities whose "
        "declaration says `effective_date: option`.",
    )(func)
    return click.option(
        "--landing",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Landing root(s) for this run, instead of runner.yml's landing_roots.",
    )(func)


def _report_ingest(process_id: str, result: Any) -> int:
    for note in result.notes:
        log.warning(note)
    click.echo(
        f"process {process_id}: {result.registered} new Files ({result.duplicates} duplicates), "
        f"{result.staged} staged ({result.rows} rows), {result.quarantined} quarantined, "
        f"{result.failed} failed"
        + (f"; {result.committed} committed by reconcile" if result.committed else "")
    )
    bad = int(result.quarantined + result.failed)
    if bad:
        click.echo(
            f"{result.quarantined} File(s) quarantined and {result.failed} failed; "
            "see `runner status`",
            err=True,
        )
    return bad


@dataclass
class RecordedRun:
    """One command's run, recorded in the Audit DB: its project, Audit DB and process id."""

    project: Any
    db: Any
    process_id: str
    outcome: str = "error"


@contextmanager
def recorded_run(obj: Context, command: str) -> Iterator[RecordedRun]:
    """Record a run in the Audit DB, keep it alive with a heartbeat while it works, and end it
    with the outcome the command set, whatever happens. Runs that died before are closed first
    and their Files given back (a crash is recovered by running the command again)."""
    from runner.destinations import destination_for
    from runner.heartbeat import Heartbeat
    from runner.ids import new_process_id

    project = obj.project()
    if command in ("ingest", "run", "reconcile"):
        destination_for(project).preflight()  # fail fast when the destination cannot answer
    db = obj.audit_db(project)
    run = RecordedRun(project, db, new_process_id())
    db.start_run(run.process_id, command, project.target_name)
    try:
        with Heartbeat(db, run.process_id):
            recovery = db.recover(run.process_id)
            for pid in recovery.aborted_runs:
                log.warning("run %s had stopped without ending; closed as aborted", pid)
            for rec in recovery.reclaimed:
                log.warning("%s: %s; back to %s", rec.path, rec.last_error, rec.state)
            yield run
    finally:
        db.end_run(run.process_id, run.outcome)
        db.dispose()


def _ingest_args(
    landing: tuple[str, ...],
    entities: tuple[str, ...],
    settle: float,
    min_age: float,
    effective_date: Any = None,
) -> dict[str, Any]:
    return {
        "landing": list(landing) or None,
        "entity_names": list(entities) or None,
        "min_age_seconds": min_age,
        "settle_seconds": settle,
        "effective_date": effective_date.date() if effective_date is not None else None,
    }


@main.command()
@global_options
@ingest_options
@click.pass_obj
def ingest(
    obj: Context,
    landing: tuple[str, ...],
    entities: tuple[str, ...],
    settle: float,
    min_age: float,
    effective_date: Any,
) -> None:
    """Reconcile, then find, hash, register and stage new Files.

    Exits 1 when any File was quarantined or failed.
    """
    from runner.ingest import ingest as run_ingest
    from runner.progress import for_terminal
    from runner.spark_session import get_spark

    with recorded_run(obj, "ingest") as run, closing(for_terminal()) as progress:
        result = run_ingest(
            run.project,
            run.db,
            run.process_id,
            spark=get_spark(run.project),
            progress=progress,
            **_ingest_args(landing, entities, settle, min_age, effective_date),
        )
        progress.close()
        bad = _report_ingest(run.process_id, result)
        run.outcome = "failed" if bad else "ok"
        if bad:
            raise SystemExit(ExitCode.FILES_FAILED)


@main.command()
@global_options
@click.pass_obj
def reconcile(obj: Context) -> None:
    """Mark STAGED Files COMMITTED where the destination holds their Applied File Marker."""
    from runner.reconcile import reconcile as run_reconcile

    with recorded_run(obj, "reconcile") as run:
        result = run_reconcile(run.project, run.db, run.process_id)
        click.echo(
            f"process {run.process_id}: {result.committed} Files committed, "
            f"{result.waiting} staged and waiting for `dbt build`"
        )
        run.outcome = "ok"


@main.command()
@global_options
@ingest_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object: counts and phase times.")
@click.argument("dbt_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def run(
    obj: Context,
    landing: tuple[str, ...],
    entities: tuple[str, ...],
    settle: float,
    min_age: float,
    effective_date: Any,
    as_json: bool,
    dbt_args: tuple[str, ...],
) -> None:
    """Reconcile, ingest, `dbt build` and reconcile, in one process.

    Extra arguments after `--` go to `dbt build` (for example `-- --select customers`).
    Exits 1 when a File was quarantined or failed or dbt failed.
    """
    import time

    from runner.phases import Phases
    from runner.progress import Progress, for_terminal
    from runner.reconcile import table_rows
    from runner.run import run as run_all
    from runner.spark_session import get_spark
    from runner.summary import summarize

    bars = Progress() if as_json else for_terminal()
    with recorded_run(obj, "run") as rec, closing(bars) as progress:
        started = time.perf_counter()
        phases = Phases()
        with phases.time("spark_start"):
            spark = get_spark(rec.project)
        # dbt's own lines only with -v (its errors always reach stderr); with --json they
        # would break the JSON on stdout.
        quiet = as_json or not verbose()
        result = run_all(
            rec.project,
            rec.db,
            rec.process_id,
            spark=spark,
            dbt_args=[*dbt_args, "--quiet"] if quiet else list(dbt_args),
            progress=progress,
            **_ingest_args(landing, entities, settle, min_age, effective_date),
        )
        progress.close()
        for name, seconds in result.ingest.phases.seconds.items():
            phases.add(name, seconds)
        with phases.time("summary"):
            entities_done = summarize(rec.db, rec.process_id)
            targets = sorted({t.target_table for e in entities_done for t in e.targets})
            rows = table_rows(rec.project, targets, spark)
            counts = rec.db.counts()
        rec.outcome = "ok" if result.ok else "failed"
        if as_json:
            ing = result.ingest
            click.echo(
                json.dumps(
                    {
                        "process_id": rec.process_id,
                        "ok": result.ok,
                        "ingest": {
                            "registered": ing.registered,
                            "duplicates": ing.duplicates,
                            "staged": ing.staged,
                            "rows": ing.rows,
                            "quarantined": ing.quarantined,
                            "failed": ing.failed,
                        },
                        "dbt_ok": result.dbt_ok,
                        "dbt_error": result.dbt_error,
                        "committed": result.reconcile.committed,
                        "waiting": result.reconcile.waiting,
                        "entities": [e.as_json() for e in entities_done],
                        "tables": rows,
                        "audit": counts,
                        "phases": phases.as_json(),
                        "seconds": round(time.perf_counter() - started, 3),
                    },
                    default=str,
                )
            )
        else:
            _report_ingest(rec.process_id, result.ingest)
            if not result.dbt_ok:
                click.echo(f"error: {result.dbt_error}", err=True)
            _echo_summary(entities_done)
            click.echo(
                f"{result.reconcile.committed} Files committed, {result.reconcile.waiting} "
                "staged and not applied; Audit DB: "
                + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            )
            if rows:
                click.echo("rows now: " + ", ".join(f"{t} {n}" for t, n in rows.items()))
            click.echo(f"time: {time.perf_counter() - started:.1f}s (" + phases.line() + ")")
        if not result.ok:
            raise SystemExit(ExitCode.FILES_FAILED)


@main.command()
@global_options
@click.argument("files", nargs=-1)
@click.option("--failed", is_flag=True, help="Every FAILED File.")
@click.option("--quarantined", is_flag=True, help="Every QUARANTINED File.")
@click.option("--entity", help="Only this entity's Files (with --failed or --quarantined).")
@click.pass_obj
def retry(
    obj: Context, files: tuple[str, ...], failed: bool, quarantined: bool, entity: str | None
) -> None:
    """Put FAILED or QUARANTINED Files back to PENDING, so the next ingest stages them again.

    FILES are File ids, paths or content hashes (or a unique prefix of 8+ characters), as
    `runner status` shows them. The change is recorded as an event of each File.
    """
    if not files and not failed and not quarantined:
        raise UsageError("name Files to retry, or use --failed or --quarantined")
    with recorded_run(obj, "retry") as run:
        ids = [_resolve_file(run.db, ref) for ref in files]
        states = [s for s, on in (("FAILED", failed), ("QUARANTINED", quarantined)) if on]
        for file_id in ids:
            state = run.db.get(file_id).state
            if state not in ("FAILED", "QUARANTINED"):
                raise UsageError(
                    f"File {file_id} is {state}; only FAILED or QUARANTINED Files can be retried"
                )
        done = run.db.requeue_many(
            run.process_id,
            ids=ids,
            states=states,
            entity=entity,
            reason=f"runner retry by {run.process_id}",
        )
        for rec in done:
            click.echo(f"{rec.id}\t{rec.entity}\t{rec.path}\tPENDING")
        click.echo(f"process {run.process_id}: {len(done)} File(s) back to PENDING")
        run.outcome = "ok"


def _resolve_file(db: Any, ref: str) -> int:
    """A File id, path or content hash (prefix of 8+ characters) as a File id."""
    from pathlib import Path

    every = db.files()
    if ref.isdigit() and any(f.id == int(ref) for f in every):
        return int(ref)
    path = str(Path(ref).resolve())
    hits = [f.id for f in every if f.path in (ref, path)]
    if not hits and len(ref) >= 8:
        hits = [f.id for f in every if f.content_hash.startswith(ref.lower())]
    hits = sorted(set(hits))
    if len(hits) != 1:
        found = "no File" if not hits else f"{len(hits)} Files ({', '.join(map(str, hits))})"
        raise UsageError(f"{ref!r} names {found}; use an id from `runner status`")
    return hits[0]


@main.command()
@global_options
@click.option("--entity", "entity_name", default="customers", show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Folder to write to (default: <first landing root>/<entity>).",
)
@click.option(
    "--snapshot",
    is_flag=True,
    help="Daily full extracts for a snapshot entity (mode: snapshot) instead of DMS changes.",
)
@click.option(
    "--initial",
    default=1000,
    show_default=True,
    help="Rows of the full load (--snapshot: of the first day's extract).",
)
@click.option(
    "--incremental",
    default=1000,
    show_default=True,
    help="Change rows after it (--snapshot: rows of each later day's extract).",
)
@click.option("--files", default=10, show_default=True, help="Change Files to spread them over.")
@click.option("--days", default=3, show_default=True, help="--snapshot: extracts, one a day.")
@click.option(
    "--start",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default="2026-03-01",
    show_default=True,
    help="--snapshot: the first extract's date.",
)
@click.option("--delete-share", default=0.2, show_default=True)
@click.option(
    "--update-share",
    default=0.4,
    show_default=True,
    help="The rest are inserts (--snapshot: the rest of the keys are unchanged).",
)
@click.option("--seed", default=7, show_default=True)
@click.option(
    "--key-columns",
    type=int,
    help="A synthetic entity with this many bigint key columns (not a declared one); "
    "its declaration is printed so it can be added to the dbt project.",
)
@click.option(
    "--value-columns",
    type=int,
    default=6,
    show_default=True,
    help="Non-key columns of the synthetic entity.",
)
@click.pass_obj
def generate(
    obj: Context,
    entity_name: str,
    out: str | None,
    initial: int,
    incremental: int,
    files: int,
    delete_share: float,
    update_share: float,
    seed: int,
    key_columns: int | None,
    value_columns: int,
    snapshot: bool,
    days: int,
    start: Any,
) -> None:
    """Write deterministic DMS-style CSV Files for an entity (tests, demos, benchmarks), or
    with --snapshot one full extract a day for a snapshot entity."""
    from pathlib import Path

    import yaml

    from runner.entities import load_entities
    from runner.generate import (
        GenerateSpec,
        SnapshotSpec,
        generate_entity,
        generate_snapshots,
        synthetic_declaration,
        synthetic_entity,
        synthetic_snapshot_declaration,
        synthetic_snapshot_entity,
    )

    project = obj.project()
    if key_columns is not None:
        if key_columns < 1 or value_columns < 0:
            raise UsageError("--key-columns must be at least 1 and --value-columns at least 0")
        make, declare = (
            (synthetic_snapshot_entity, synthetic_snapshot_declaration)
            if snapshot
            else (synthetic_entity, synthetic_declaration)
        )
        entities = {entity_name: make(entity_name, key_columns, value_columns)}
        declaration = declare(entity_name, key_columns, value_columns)
        click.echo("# declare it under a source's tables: in dbt_project/models/staging/*.yml")
        click.echo(yaml.safe_dump([declaration], sort_keys=False))
    else:
        entities = load_entities(project)
    if entity_name not in entities:
        raise UsageError(f"unknown entity {entity_name!r}; declared: {sorted(entities)}")
    if not 0 <= delete_share + update_share <= 1 or files < 1:
        raise UsageError("shares must add up to at most 1, and --files must be at least 1")
    entity = entities[entity_name]
    if entity.is_transactions:  # a transaction group: its members' Files and its metadata
        from runner.generate import GroupSpec, generate_group

        root = Path(out) if out else project.root / project.settings.landing_roots[0]
        gspec = GroupSpec(transactions=initial, files=files, seed=seed)
        written = generate_group(entity, entities, root, gspec)
        click.echo(
            f"wrote {len(written)} Files ({initial} transactions of "
            f"{', '.join(entity.members)}, and their metadata) under {root}; the END of the "
            f"last transaction is in {written[-1].relative_to(root)}, outside the landing "
            "globs: move it next to the other metadata Files to release that transaction"
        )
        return
    folder = Path(out) if out else project.root / project.settings.landing_roots[0] / entity_name
    if snapshot != entity.is_snapshot:
        raise UsageError(
            f"entity {entity_name} is declared with mode {entity.mode}: "
            + ("leave out --snapshot" if not snapshot else "--snapshot is for mode snapshot")
        )
    if snapshot:
        if days < 1:
            raise UsageError("--days must be at least 1")
        sspec = SnapshotSpec(
            initial,
            incremental,
            days,
            delete_share,
            update_share,
            seed,
            start or SnapshotSpec.start,
        )
        written = generate_snapshots(entity, folder, sspec)
        click.echo(f"wrote {len(written)} daily extracts to {folder}")
        return
    spec = GenerateSpec(initial, incremental, files, delete_share, update_share, seed)
    written = generate_entity(entities[entity_name], folder, spec)
    click.echo(f"wrote {len(written)} Files ({initial + incremental} rows) to {folder}")


@main.group()
def audit() -> None:
    """Manage the Audit DB."""


@audit.command("upgrade")
@global_options
@click.pass_obj
def audit_upgrade(obj: Context) -> None:
    """Create or migrate the Audit DB tables to the newest revision."""
    from audit import AuditDB, redact_url
    from runner.project import audit_location

    project = obj.project()
    url, schema = audit_location(project, obj.audit_url, obj.audit_schema)
    db = AuditDB(url, schema=schema)
    try:
        db.upgrade()
        click.echo(
            f"Audit DB {redact_url(url)}"
            + (f" (schema {schema})" if schema else "")
            + f" is at revision {db.current_revision()}"
        )
    finally:
        db.dispose()


@main.command("drop-catalog")
@global_options
@click.option("--yes", is_flag=True, help="Really drop it (otherwise: say what would go).")
@click.pass_obj
def drop_catalog(obj: Context, yes: bool) -> None:
    """Drop the target's Spark catalog schema in PostgreSQL (`make clean`, with the warehouse
    folder): every table and view it lists is forgotten."""
    from runner.catalog import drop_schema, jdbc_catalogs
    from runner.spark_session import spark_conf

    conf = spark_conf(obj.project())
    found = jdbc_catalogs(conf)
    if not found:
        click.echo("this target has no JDBC catalog on PostgreSQL; nothing to drop")
        return
    if not yes:
        for c in found:
            click.echo(f"would drop the catalog on {c.where()}")
        raise UsageError("add --yes to drop it")
    for where in drop_schema(conf):
        click.echo(f"dropped the catalog on {where}")


@main.command("migrate-catalog")
@global_options
@click.option(
    "--warehouse",
    type=click.Path(file_okay=False, exists=True),
    help="The Derby-era warehouse folder (default: <state_dir>/<target>/warehouse).",
)
@click.pass_obj
def migrate_catalog(obj: Context, warehouse: str | None) -> None:
    """Register the Iceberg tables of a warehouse made under the former Derby metastore in the
    target's JDBC catalog (views come back with the next `dbt build`)."""
    from pathlib import Path

    from runner.catalog import migrate_derby
    from runner.spark_session import get_spark

    project = obj.project()
    folder = Path(warehouse) if warehouse else project.state_dir / project.target_name / "warehouse"
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such warehouse folder")
    done = migrate_derby(get_spark(project), folder)
    for name in done:
        click.echo(f"registered {name}")
    click.echo(f"{len(done)} tables registered from {folder}")


@main.command()
@global_options
@click.pass_obj
def init(obj: Context) -> None:
    """Prepare a checkout: ./profiles.yml from the example, the Iceberg jar link, Java check."""
    from pathlib import Path

    from runner.spark_session import check_java, link_iceberg_jar, link_jdbc_driver

    root = Path(obj.project_dir or ".").resolve()
    profiles = root / "profiles.yml"
    example = root / "profiles.example.yml"
    if not profiles.exists():
        if not example.exists():
            raise UsageError(f"{example} is missing; is {root} the repository root?")
        profiles.write_text(example.read_text())
        click.echo(f"wrote {profiles} from {example.name}")
    else:
        click.echo(f"kept existing {profiles}")
        if example.exists():
            import yaml

            def targets(path: Path) -> set[str]:
                data = yaml.safe_load(path.read_text()) or {}
                return set((data.get("cdc") or {}).get("outputs") or {})

            missing = sorted(targets(example) - targets(profiles))
            local = ((yaml.safe_load(profiles.read_text()) or {}).get("cdc") or {}).get(
                "outputs", {}
            ).get("local") or {}
            params = local.get("server_side_parameters") or {}
            if str(params.get("spark.sql.catalog.spark_catalog.type", "")).lower() == "hive":
                click.echo(
                    f"note: {profiles.name}'s local target keeps the Derby metastore (one process "
                    f"at a time); copy the local target of {example.name} over it and run "
                    "`runner migrate-catalog` (README: The embedded default)"
                )
            if missing:
                click.echo(
                    f"note: {profiles.name} lacks the target(s) {', '.join(missing)} of "
                    f"{example.name}; copy them over to use them"
                )
    click.echo(f"Iceberg runtime: {link_iceberg_jar(root)}")
    click.echo(f"PostgreSQL JDBC driver (Spark catalog): {link_jdbc_driver(root)}")
    click.echo(f"Java: {check_java()}")


if __name__ == "__main__":  # pragma: no cover
    main()
