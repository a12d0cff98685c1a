"""The pipeline's commands: `status`, `runs`, `ingest`, `reconcile`, `run`, `retry`,
`maintain`."""

from __future__ import annotations

import json
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from audit import AuditDB
from runner import metrics as prometheus
from runner import present
from runner import status as status_view
from runner.cli.options import Context, ExitCode, global_options, verbose
from runner.errors import UsageError, first_line
from runner.ingest import ingest as run_ingest
from runner.invocation import Invocation, recorded_run
from runner.maintain import MaintainResult, maintain_if_due
from runner.maintain import maintain as run_maintain
from runner.phases import Phases
from runner.progress import Progress, for_terminal
from runner.reconcile import reconcile as run_reconcile
from runner.reconcile import table_rows
from runner.run import run as run_all
from runner.summary import summarize
from runner.transactions import group_status, recorded_group_status
from runner.watch import Stop, watch

# dbt's console, silenced: its log file (dbt_project/logs/dbt.log) keeps everything.
DBT_SILENT = ("--log-level", "none", "--log-level-file", "debug")


@click.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array, one object per File.")
@click.option("--entity", help="Only this entity's Files.")
@click.option(
    "--files",
    "per_file",
    is_flag=True,
    help="One line per File (state, attempts, age, path under its landing root, the rows its "
    "markers counted) instead of one per entity.",
)
@click.option(
    "--groups",
    is_flag=True,
    help="Only the transaction groups: watermark, held and quarantined transactions (read "
    "now from each group's ledger in the destination).",
)
@click.pass_obj
def status(obj: Context, as_json: bool, entity: str | None, per_file: bool, groups: bool) -> None:
    """Show each entity's Files: how many are committed, how many wait and since when, what is
    quarantined and why, when the last was committed; then the transaction groups as the last
    reconcile recorded them. Reads the Audit DB only. `--files`: every File; `--groups`: the
    groups read now from the destination."""
    inv = obj.invocation()
    if groups:
        found = group_status(inv)
        if as_json:
            click.echo(json.dumps([g.as_json() for g in found], indent=None))
        else:
            present.print_groups(found)
        return
    try:
        files = inv.db.files(entity=entity)
        markers = inv.db.file_markers() if as_json or per_file else {}
    finally:
        inv.close()
    now = datetime.now(UTC).replace(tzinfo=None)
    if as_json:
        click.echo(
            json.dumps(
                [present.file_json(f, markers.get(f.id, []), now) for f in files], default=str
            )
        )
        return
    declared: list[str] = []
    if entity is None:
        try:
            declared = sorted(inv.entities)
        except Exception:  # noqa: BLE001 - the Audit DB's Files stand without the declarations
            declared = []
    elif not files:
        known = sorted(inv.entities)
        if entity not in known:
            raise UsageError(f"no entity {entity!r}: the declared ones are {', '.join(known)}")
        declared = [entity]
    present.print_status(inv.project, files, markers, now, per_file, declared)
    if entity is None:
        try:
            found, recorded = recorded_group_status(inv)
        except Exception as exc:  # the Files above stand
            if obj.debug:
                raise
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            click.echo(
                f"transaction groups: not read ({first[:200]}); try `runner status --groups`"
            )
            return
        finally:
            inv.close()
        if found and recorded is not None:
            ago = status_view.age((now - recorded).total_seconds())
            click.echo(f"transaction groups, as of {ago} ago (`runner status --groups`: now)")
        present.print_groups(found)


@click.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="One JSON array, one object per run.")
@click.option("--limit", default=20, show_default=True, help="The newest N runs (0: all).")
@click.pass_obj
def runs(obj: Context, as_json: bool, limit: int) -> None:
    """List runs, newest first: command, target, outcome, duration, Files per state; under a
    run that failed, why (its error line)."""
    inv = obj.invocation()
    try:
        found = inv.db.runs()
        moved = inv.db.run_file_counts()
    finally:
        inv.close()
    if obj.target:
        found = [r for r in found if r["target"] in (None, inv.project.target_name)]
    found.sort(key=lambda r: r["started_at"], reverse=True)
    if limit:
        found = found[:limit]
    out = present.runs_json(found, moved)
    if as_json:
        click.echo(json.dumps(out))
    else:
        present.print_runs(out)


@click.command()
@global_options
@click.pass_obj
def metrics(obj: Context) -> None:
    """Print the Audit DB's Prometheus metrics once (text format): Files by entity and state,
    each entity's oldest waiting File's age and last commit, rows applied per target table.
    `runner run --watch --metrics-port N` serves them with the watch's own."""
    inv = obj.invocation()
    try:
        inv.db  # noqa: B018 - migrated, as every command finds it
        click.echo(prometheus.text(inv), nl=False)
    finally:
        inv.close()


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
        metavar="ROOT",
        callback=_landing_roots,
        help="Landing root(s) for this run, instead of runner.yml's landing_roots: a folder or "
        "a URI (s3://bucket/prefix, gs://, abfss://).",
    )(func)


def _landing_roots(_ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    """--landing: a folder (not a file) or a URI."""
    for root in value:
        if "://" not in root and Path(root).is_file():
            raise click.BadParameter(f"{root!r} is a file, not a folder", param=param)
    return value


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


@click.command()
@global_options
@ingest_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object: counts and phase times.")
@click.pass_obj
def ingest(
    obj: Context,
    landing: tuple[str, ...],
    entities: tuple[str, ...],
    settle: float,
    min_age: float,
    effective_date: Any,
    as_json: bool,
) -> None:
    """Reconcile, then find, hash, register and stage new Files.

    Exits 1 when any File was quarantined or failed.
    """
    bars = Progress() if as_json else for_terminal()
    with recorded_run(obj.invocation(), "ingest") as run, closing(bars) as progress:
        result = run_ingest(
            run.inv,
            run.process_id,
            progress=progress,
            recover=False,  # recorded_run did
            **_ingest_args(landing, entities, settle, min_age, effective_date),
        )
        progress.close()
        bad = present.report_ingest(run.process_id, result, as_json)
        run.outcome = "failed" if bad else "ok"
        if bad:
            raise SystemExit(ExitCode.FILES_FAILED)


@click.command()
@global_options
@click.pass_obj
def reconcile(obj: Context) -> None:
    """Mark STAGED Files COMMITTED where the destination holds their Applied File Marker."""
    with recorded_run(obj.invocation(), "reconcile") as run:
        result = run_reconcile(run.inv, run.process_id)
        click.echo(
            f"process {run.process_id}: {result.committed} Files committed, "
            f"{result.waiting} staged and waiting for `dbt build`"
        )
        run.outcome = "ok"


@click.command()
@global_options
@ingest_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object: counts and phase times.")
@click.option(
    "--watch",
    is_flag=True,
    help="Keep running: poll the landing roots and apply new Files as they arrive, one line "
    "per batch, with one SparkSession and one parse of the dbt project; SIGTERM or Ctrl-C "
    "finishes the current batch and stops.",
)
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="With --watch: seconds between polls (a local landing folder is also watched for "
    "changes: a File written there is seen at once).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=1, max=65535),
    help="With --watch: serve Prometheus metrics on http://HOST:PORT/metrics (Files by "
    "entity and state, the oldest waiting File's age, rows applied, batches and their "
    "duration; docs/operations.md).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="With --metrics-port: the address to serve them on (0.0.0.0: every interface, for a "
    "Prometheus on another host).",
)
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
    watch: bool,
    interval: float,
    metrics_port: int | None,
    metrics_host: str,
    dbt_args: tuple[str, ...],
) -> None:
    """Reconcile, ingest, `dbt build` and reconcile, in one process.

    dbt builds what the new Files touch (their entities' models and what depends on them);
    extra arguments after `--` go to `dbt build` (for example `-- --select customers`) and
    choose instead. With nothing new, neither Spark nor dbt starts (nor is imported).
    Exits 1 when a File was quarantined or failed or dbt failed.
    """
    quiet = as_json or not verbose()
    if metrics_port is not None and not watch:
        raise UsageError("--metrics-port is for --watch (`runner metrics` prints them once)")
    if watch:
        _watch(
            obj,
            _ingest_args(landing, entities, settle, min_age, effective_date),
            as_json,
            interval,
            [*dbt_args, *DBT_SILENT] if quiet else list(dbt_args),
            metrics_port,
            metrics_host,
        )
        return
    bars = Progress() if as_json else for_terminal()
    with recorded_run(obj.invocation(), "run") as rec, closing(bars) as progress:
        started = time.perf_counter()
        phases = Phases()
        # dbt's own lines only with -v: otherwise its log file keeps them (errors with their
        # Java stack traces) and the runner says each failure in one line naming that file;
        # with --json they would break the JSON on stdout.
        result = run_all(
            rec.inv,
            rec.process_id,
            dbt_args=[*dbt_args, *DBT_SILENT] if quiet else list(dbt_args),
            progress=progress,
            recover=False,  # recorded_run did
            **_ingest_args(landing, entities, settle, min_age, effective_date),
        )
        progress.close()
        for name, seconds in result.ingest.phases.seconds.items():
            phases.add(name, seconds)
        with phases.time("summary"):
            entities_done = summarize(rec.db, rec.process_id)
            targets = sorted({t.target_table for e in entities_done for t in e.targets})
            rows = table_rows(rec.inv, targets)
            counts = rec.db.counts()
        rec.outcome = "ok" if result.ok else "failed"
        rec.detail = result.dbt_error
        present.report_run(
            rec.process_id,
            result,
            entities_done,
            rows,
            counts,
            phases,
            time.perf_counter() - started,
            as_json,
        )
        if result.ok:
            _maintain_if_due(rec.inv, as_json)
        if not result.ok:
            raise SystemExit(ExitCode.FILES_FAILED)


def _maintain_if_due(inv: Invocation, as_json: bool) -> None:
    """runner.yml's maintain_every; a maintenance that fails is said, the run stays ok."""
    try:
        done = maintain_if_due(inv)
    except Exception as exc:  # noqa: BLE001 - said in one line; the run itself succeeded
        click.echo(f"warning: maintenance failed: {first_line(exc)}", err=True)
        return
    if done is not None and not as_json:
        _say_maintained(done)


def _say_maintained(done: MaintainResult) -> None:
    would = "would be " if done.dry_run else ""
    for s in done.staged:
        click.echo(
            f"{s.entity}: {s.rows:,} staged rows of {s.files} COMMITTED "
            f"File{'' if s.files == 1 else 's'} {would}removed "
            f"from {s.table}"
        )
    if done.events:
        click.echo(f"file_events: {done.events:,} events of COMMITTED Files {would}removed")
    for line in done.tables:
        click.echo(line)
    if not (done.staged or done.events or done.tables):
        click.echo("nothing to maintain")


@click.command()
@global_options
@click.option("--entity", "entities", multiple=True, help="Only these entities (repeatable).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: what was removed.")
@click.pass_obj
def maintain(obj: Context, entities: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Retention and table upkeep (runner.yml `retention`): delete the staged rows of Files
    COMMITTED long enough ago, prune old file_events, compact the tables (Iceberg: rewrite
    small files, expire snapshots, remove orphan files; PostgreSQL: VACUUM ANALYZE).

    Markers and the staged-files manifest are kept. `runner run` does this by itself every
    `maintain_every` runs.
    """
    inv = obj.invocation()
    unknown = sorted(set(entities) - set(inv.entities))
    if unknown:
        raise UsageError(
            f"no such entity: {', '.join(unknown)} (declared: {', '.join(inv.entities)})"
        )
    with recorded_run(inv, "maintain --dry-run" if dry_run else "maintain") as run:
        done = run_maintain(run.inv, entity_names=list(entities) or None, dry_run=dry_run)
        if as_json:
            click.echo(json.dumps(done.as_json()))
        else:
            _say_maintained(done)
        run.outcome = "ok"


def _watch(
    obj: Context,
    ingest_args: dict[str, Any],
    as_json: bool,
    interval: float,
    dbt_args: list[str],
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> None:
    """`runner run --watch`: batches until SIGTERM or Ctrl-C; exits 1 when a batch failed."""
    stop = Stop()
    stop.install()
    inv = obj.invocation()
    watched = None
    if metrics_port is not None:
        inv.db  # noqa: B018 - the Audit DB migrated before its first scrape
        try:
            watched = prometheus.serve(inv, metrics_port, metrics_host)
        except OSError as exc:
            where = f"{metrics_host}:{metrics_port}"
            raise UsageError(
                f"--metrics-port: cannot serve on {where}: {exc.strerror or exc}"
            ) from None
    if not as_json:
        where = (
            f"; metrics on http://{metrics_host}:{metrics_port}/metrics"
            if metrics_port is not None
            else ""
        )
        click.echo(f"watching every {interval:g}s{where}; SIGTERM or Ctrl-C stops after the batch")

    def report(batch: Any) -> None:
        if watched is not None:
            watched.observe(batch)
        present.report_batch(batch, as_json)

    try:
        batches = watch(
            inv,
            interval=interval,
            stop=stop,
            report=report,
            dbt_args=dbt_args,
            **ingest_args,
        )
    except KeyboardInterrupt:
        click.echo("stopped during a batch: its Files are given back", err=True)
        raise SystemExit(ExitCode.FILES_FAILED) from None
    finally:
        inv.close()
    if not as_json:
        click.echo(f"stopped after {len(batches)} batch(es)")
    if any(not b.ok for b in batches):
        raise SystemExit(ExitCode.FILES_FAILED)


@click.command()
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
    with recorded_run(obj.invocation(), "retry") as run:
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


def _resolve_file(db: AuditDB, ref: str) -> int:
    """A File id, path or content hash (prefix of 8+ characters) as a File id."""
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
