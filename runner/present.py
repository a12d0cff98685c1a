"""What the CLI prints: `runner status` (its lines are drawn by runner/status.py), the
transaction groups, the runs of `runner runs`, the ingest line and the run summary of `runner
ingest` and `runner run`, and their JSON forms."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console

from audit.store import MARKER_COUNTS
from runner import status as status_view
from runner.summary import render

log = logging.getLogger("runner")


def print_groups(found: list[Any]) -> None:
    """Per group: its members and counts, how far it is applied (the source's commit time,
    UTC), then each held transaction (since when, in source time, and what it lacks) and each
    quarantined one; short lines, cut at the terminal's width."""
    width = terminal_width()

    def say(line: str) -> None:
        click.echo(status_view.clip(line, width))

    for g in found:
        if not g.built:
            say(f"group {g.group}: ledger {g.ledger} not built yet (run `dbt build`)")
            continue
        counts = ", ".join(f"{n} {s}" for s, n in sorted(g.counts.items())) or "no transactions"
        say(f"group {g.group} ({', '.join(g.members)}): {counts}")
        if g.watermark_ms is not None:
            say(f"  applied up to {status_view.source_time(g.watermark_ms)} (source time)")
        else:
            say("  nothing released yet")
        for h in g.held:
            since = (
                f" since {status_view.source_time(h['start_ms'])}"
                if h["start_ms"] is not None
                else ""
            )
            late = ", OVERDUE" if h["overdue"] else ""
            say(
                f"  held {h['transaction_id']}{since} "
                f"({status_view.duration_ms(h['held_ms'] or 0)} of source time{late})"
            )
            expected = h["expected_events"] if h["end_ms"] is not None else "?"
            ended = "ended" if h["end_ms"] is not None else "no END yet"
            say(f"    {h['staged_events']} of {expected} events staged, {ended}")
        for tx in g.quarantined:
            say(f"  quarantined {tx}: never ended in time; none of it applied")


def file_json(f: Any, markers: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """`runner status --json`: the File's fields, plus its age and its markers' counts."""
    out: dict[str, Any] = f.as_json()
    out["age_seconds"] = round((now - f.created_at).total_seconds(), 1)
    out["markers"] = [
        {k: m[k] for k in ("target_table", *MARKER_COUNTS, "applied_at", "invocation_id")}
        for m in markers
    ]
    return out


def _applied(markers: list[dict[str, Any]]) -> str:
    """A File's marker counts: `customers +3 ~1 -0 =2` per target table (inserted, updated,
    deleted, stale)."""
    return "; ".join(
        f"{m['target_table']} +{m['rows_inserted']} ~{m['rows_updated']} "
        f"-{m['rows_deleted']} ={m['rows_skipped']}"
        for m in markers
    )


def terminal_width() -> int | None:
    """The terminal's columns when stdout is one; None (lines as long as they are) otherwise."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((80, 24)).columns


def print_status(
    project: Any,
    files: list[Any],
    markers: dict[int, list[dict[str, Any]]],
    now: datetime,
    per_file: bool,
    declared: list[str],
) -> None:
    """`runner status`: one line per entity, or with ``per_file`` one per File."""
    if not files and not declared:
        click.echo("No Files registered yet. Land Files and run `runner ingest`.")
        return
    width = terminal_width()
    roots = status_view.landing_prefixes(project.root, project.settings.landing_roots)
    show = status_view.relative_to(roots, files)
    if per_file:
        applied = {f.id: _applied(markers.get(f.id, [])) for f in files}
        lines = status_view.file_lines(files, applied, now, width, show)
    else:
        lines = status_view.entity_lines(status_view.by_entity(files, declared), now, width, show)
    for line in lines:
        click.echo(line)


# The states `runner runs` names per run (its JSON has every state Files passed through).
RUN_STATES = ("STAGED", "COMMITTED", "QUARANTINED", "FAILED", "DUPLICATE")


def runs_json(found: list[dict[str, Any]], moved: dict[str, Any]) -> list[dict[str, Any]]:
    """`runner runs --json`: one object per run, with its Files counted per state."""
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
                "detail": r.get("detail"),
                "files": totals,
            }
        )
    return out


def print_runs(out: list[dict[str, Any]]) -> None:
    """One line per run: when it started (UTC), command, target, outcome, how long it took,
    what it did to Files, its process id. Where the terminal is too narrow for the id, it goes
    on a line of its own under its run; a run that failed has its reason under it."""
    if not out:
        click.echo("No runs recorded yet.")
        return
    width = terminal_width()
    rows = []
    for r in out:
        seconds = r["seconds"]
        took = (
            "-"
            if seconds is None
            else f"{seconds:.1f} s"
            if seconds < 60
            else status_view.duration_ms(seconds * 1000)
        )
        # What the run did, as counts: "staged 17, committed 15" (not states: "17 STAGED").
        shown = [(s, r["files"][s]) for s in RUN_STATES if r["files"].get(s)]
        files = ", ".join(f"{s.lower()} {n}" for s, n in shown) or "no Files"
        started = r["started_at"][:19].replace("T", " ")
        rows.append((started, r["command"], r["target"] or "-", r["outcome"], took, files))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for r, row in zip(out, rows, strict=True):
        cells = [
            c.ljust(w) if i != 4 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row[:5], widths, strict=True))
        ]
        line = "  ".join([*cells, row[5]])
        if width is None or len(line) + 2 + len(r["process_id"]) <= width:
            click.echo(f"{line}  {r['process_id']}")
        else:
            click.echo(status_view.clip(line, width))
            click.echo(f"  {r['process_id']}")
        if r["detail"] and r["outcome"] != "ok":  # why it failed, under it
            said = "  " + " ".join(str(r["detail"]).split())
            click.echo(status_view.clip(said, width))


def echo_summary(entities: list[Any]) -> None:
    """The run's per-entity table: rich on a terminal, aligned plain text otherwise."""
    if not entities:
        click.echo("nothing staged, applied or quarantined in this run")
        return
    if sys.stdout.isatty():
        print_summary(entities, Console())
    else:
        click.echo(render(entities, rich=False))


def print_summary(entities: list[Any], console: Console) -> None:
    """The summary on a terminal: a table when it fits the console's width, else blocks."""
    console.print(render(entities, rich=True, width=console.width), soft_wrap=False)


def ingest_counts(result: Any) -> dict[str, Any]:
    """What one ingest registered, staged and set aside: `runner ingest --json` and the
    ``ingest`` object of `runner run --json`."""
    return {
        "registered": result.registered,
        "duplicates": result.duplicates,
        "staged": result.staged,
        "rows": result.rows,
        "quarantined": result.quarantined,
        "failed": result.failed,
        "retrying": result.retrying,
        "committed_by_reconcile": result.committed,
        "schema_changes": result.schema_changes,
        "notes": result.notes,
    }


def report_ingest(process_id: str, result: Any, as_json: bool = False) -> int:
    """`runner ingest`'s output; the number of Files quarantined or failed."""
    bad = int(result.quarantined + result.failed)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "process_id": process_id,
                    "ok": not bad,
                    **ingest_counts(result),
                    "phases": result.phases.as_json(),
                },
                default=str,
            )
        )
        return bad
    for note in result.notes:
        log.warning(note)
    for change in result.schema_changes:
        click.echo(f"schema change: {change}")
    click.echo(
        f"process {process_id}: {result.registered} new Files ({result.duplicates} duplicates), "
        f"{result.staged} staged ({result.rows} rows), {result.quarantined} quarantined, "
        f"{result.failed} failed"
        + (f"; {result.committed} committed by reconcile" if result.committed else "")
    )
    if bad:
        click.echo(
            f"{result.quarantined} File(s) quarantined and {result.failed} failed; "
            "see `runner status`",
            err=True,
        )
    return bad


def describe_build(result: Any) -> str:
    """What `dbt build` ran and why: ``dbt build for customers (2 Files): 3 models, 1
    snapshot, 4 tests``."""
    why = ", ".join(f"{e} ({n} File{'s' if n != 1 else ''})" for e, n in result.to_apply.items())
    kinds: dict[str, int] = {}
    for node in result.built:
        kind = node.split(".", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    ran = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in sorted(kinds.items()))
    scope = "" if result.selected else " (your --select)"
    return f"dbt build for {why}{scope}: {ran or 'nothing ran'}"


def report_run(
    process_id: str,
    result: Any,
    entities_done: list[Any],
    rows: dict[str, int],
    counts: dict[str, int],
    phases: Any,
    seconds: float,
    as_json: bool,
) -> None:
    """`runner run`'s output: one JSON object, or the ingest line, the summary per entity, the
    Audit DB's counts, the tables' rows and the time per phase."""
    if as_json:
        click.echo(
            json.dumps(
                {
                    "process_id": process_id,
                    "ok": result.ok,
                    "ingest": ingest_counts(result.ingest),
                    "nothing_new": result.nothing_new,
                    "dbt_ok": result.dbt_ok,
                    "dbt_error": result.dbt_error,
                    "to_apply": result.to_apply,
                    "selected": result.selected,
                    "built": result.built,
                    "committed": result.reconcile.committed,
                    "waiting": result.reconcile.waiting,
                    "waiting_for": result.reconcile.missing,
                    "entities": [e.as_json() for e in entities_done],
                    "tables": rows,
                    "audit": counts,
                    "phases": phases.as_json(),
                    "seconds": round(seconds, 3),
                },
                default=str,
            )
        )
    else:
        report_ingest(process_id, result.ingest)
        if result.nothing_new and not entities_done:
            audit = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "empty"
            click.echo(
                "nothing new: no File to stage or apply; Spark and dbt not started "
                f"(Audit DB: {audit})"
            )
            return
        if result.nothing_new:
            click.echo("nothing to apply: Spark and dbt not started")
        else:
            click.echo(describe_build(result))
        if not result.dbt_ok:
            click.echo(f"error: {result.dbt_error}", err=True)
        echo_summary(entities_done)
        missing = result.reconcile.missing
        why = (
            " (waiting for " + ", ".join(f"{t}: {n}" for t, n in sorted(missing.items())) + ")"
            if missing
            else ""
        )
        click.echo(
            f"{result.reconcile.committed} Files committed, {result.reconcile.waiting} "
            f"staged and not applied{why}; Audit DB: "
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        )
        if rows:
            click.echo("rows now: " + ", ".join(f"{t} {n}" for t, n in rows.items()))
        click.echo(f"time: {seconds:.1f}s (" + phases.line() + ")")


def batch_json(batch: Any) -> dict[str, Any]:
    """One watch batch as JSON: its run, what it staged and applied, what dbt built, or its
    error."""
    result = batch.result
    return {
        "process_id": batch.process_id,
        "ok": batch.ok,
        "error": batch.error or (result.dbt_error if result is not None else None),
        "staged": result.ingest.staged if result is not None else 0,
        "quarantined": result.ingest.quarantined if result is not None else 0,
        "failed": result.ingest.failed if result is not None else 0,
        "schema_changes": result.ingest.schema_changes if result is not None else [],
        "committed": result.reconcile.committed if result is not None else 0,
        "built": result.built if result is not None else [],
        "entities": [e.as_json() for e in batch.entities],
        "seconds": round(batch.seconds, 3),
        # where the batch's time went: the run's phases, and each dbt node's own seconds
        "phases": result.ingest.phases.as_json() if result is not None else {},
        "nodes": result.node_seconds if result is not None else {},
        "maintained": batch.maintained.as_json() if batch.maintained is not None else None,
    }


def report_batch(batch: Any, as_json: bool) -> None:
    """`runner run --watch`: one line per batch (a JSON object with --json)."""
    if as_json:
        click.echo(json.dumps(batch_json(batch), default=str))
        return
    now = datetime.now(UTC).strftime("%H:%M:%S")
    data = batch_json(batch)
    if batch.error is not None:
        click.echo(f"{now} {batch.process_id or '-'}: error: {batch.error}", err=True)
        return
    parts = []
    for e in batch.entities:
        rows = sum(t.rows_inserted + t.rows_updated + t.rows_deleted for t in e.targets)
        bits = [f"{e.staged} staged", f"{e.applied} applied ({rows} rows changed)"]
        bits += [
            f"{n} {what}" for n, what in ((e.quarantined, "quarantined"), (e.failed, "failed")) if n
        ]
        parts.append(f"{e.entity} " + ", ".join(bits))
    line = f"{now} {batch.process_id}: " + ("; ".join(parts) or "nothing staged or applied")
    line += f"; dbt {len(data['built'])} nodes; {batch.seconds:.1f}s"
    if batch.maintained is not None:
        line += f"; maintained {len(batch.maintained.tables)} tables"
    click.echo(line)
    if data["error"]:
        click.echo(f"{now} {batch.process_id}: error: {data['error']}", err=True)
