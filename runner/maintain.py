"""`runner maintain`: what a long-lived project removes and compacts, so that a run costs the
same in its first week and its second year.

- Retention (runner.yml ``retention``): the staged rows of Files COMMITTED more than
  ``staged_days`` ago (``retention.entities.<name>.staged_days`` per entity) are deleted from
  their staging table, one statement per table; a File not yet COMMITTED keeps its rows, and so
  does a COMMITTED one whose content another File not yet COMMITTED shares. The markers and the
  staged-files manifest stay: they are the record of what was applied. The Audit DB notes when
  (``staged_removed_at``, in ``runner status --json``). An apply model built from the start
  afterwards (first run, ``--full-refresh``) says which Files it can no longer rebuild.
- ``file_events`` of COMMITTED Files older than ``events_days`` (the File keeps its state and
  times; `runner runs` counts of those runs are then incomplete).
- Table upkeep by the destination: on Iceberg, small files rewritten, snapshots older than
  ``snapshot_days`` expired and orphan files removed; on PostgreSQL ``VACUUM (ANALYZE)``;
  BigQuery manages its own storage. Of the staging tables, the apply targets and the state
  tables of the chosen entities.

``dry_run`` says all of it and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from audit import utcnow
from runner.contract import state_tables
from runner.ids import new_process_id
from runner.invocation import Invocation
from runner.reconcile import apply_targets

log = logging.getLogger("runner.maintain")


@dataclass
class StagedRemoval:
    entity: str
    table: str
    files: int
    rows: int


@dataclass
class MaintainResult:
    dry_run: bool
    staged: list[StagedRemoval] = field(default_factory=list)
    events: int = 0
    tables: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "staged": [vars(s) for s in self.staged],
            "events_removed": self.events,
            "tables": self.tables,
        }


def maintain(
    inv: Invocation,
    *,
    entity_names: list[str] | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> MaintainResult:
    settings = inv.project.settings.retention
    now = now or utcnow()  # the Audit DB's naive UTC
    chosen = entity_names or sorted(inv.entities)
    result = MaintainResult(dry_run)
    spark = inv.reading_spark
    for name in chosen:
        entity = inv.entities[name]
        days = settings.staged_days_of(name)
        if days is None:
            continue
        files = inv.db.retention_candidates(name, now - timedelta(days=days))
        if not files:
            continue
        hashes = sorted({f.content_hash for f in files})
        rows = inv.destination.delete_staged(entity, hashes, spark, dry_run=dry_run)
        if not dry_run:
            inv.db.mark_staged_removed(f.id for f in files)
        table = f"{entity.staging_schema}.{entity.staging_table}"
        result.staged.append(StagedRemoval(name, table, len(files), rows))
        log.info("%s: %d rows of %d Files %s", table, rows, len(files), "" if dry_run else "gone")
    if settings.events_days is not None:
        cutoff = now - timedelta(days=settings.events_days)
        result.events = inv.db.prune_events(cutoff, dry_run=dry_run)
    result.tables = inv.destination.maintain_tables(
        _tables(inv, chosen), spark, dry_run=dry_run, snapshot_days=settings.snapshot_days
    )
    return result


def _tables(inv: Invocation, chosen: list[str]) -> list[tuple[str, str]]:
    """The staging tables and apply targets of the chosen entities, and the state tables."""
    out: list[tuple[str, str]] = []
    for name in chosen:
        entity = inv.entities[name]
        out.append((entity.staging_schema, entity.staging_table))
    targets = apply_targets(inv)
    for name in chosen:
        for target in sorted(targets.get(name, set())):
            schema, _, table = target.partition(".")
            out.append((schema, table))
    out += [(inv.project.state_schema, t["identifier"]) for t in state_tables().values()]
    return list(dict.fromkeys(out))


def maintain_if_due(inv: Invocation) -> MaintainResult | None:
    """After a `runner run` (or a watch batch): maintain when runner.yml's ``maintain_every``
    runs have started since the last maintenance, recorded as a run of its own."""
    every = inv.project.settings.maintain_every
    if every is None or inv.db.runs_since_maintain() < every:
        return None
    process_id = new_process_id()
    inv.db.start_run(process_id, "maintain", inv.project.target_name)
    outcome = "error"
    try:
        done = maintain(inv)
        outcome = "ok"
        return done
    finally:
        inv.db.end_run(process_id, outcome)
