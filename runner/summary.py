"""What a run did, per entity, for people (a table) and scripts (JSON).

Everything comes from the Audit DB after the run's last reconcile: the File events the run
wrote (staged, quarantined, failed, committed) and the marker counts reconcile copied from the
destination's Applied File Markers (rows inserted, updated, deleted, stale per target table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table

from audit import AuditDB
from audit.store import MARKER_COUNTS as COUNTS


@dataclass
class TargetRows:
    """Rows of one entity's Files applied to one target table (summed markers)."""

    target_table: str
    files: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_skipped: int = 0  # stale: older than what the target holds, or repeated


@dataclass
class EntitySummary:
    entity: str
    staged: int = 0
    quarantined: int = 0
    failed: int = 0
    applied: int = 0  # committed by this run: their markers are in the destination
    targets: list[TargetRows] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(db: AuditDB, process_id: str) -> list[EntitySummary]:
    """One EntitySummary per entity this run touched, sorted by name."""
    moved = db.run_file_counts(process_id).get(process_id, {})
    out: dict[str, EntitySummary] = {}
    for entity, states in moved.items():
        out[entity] = EntitySummary(
            entity,
            staged=states.get("STAGED", 0),
            quarantined=states.get("QUARANTINED", 0),
            failed=states.get("FAILED", 0),
            applied=states.get("COMMITTED", 0),
        )
    for row in db.marker_totals(process_id):
        summary = out.setdefault(row["entity"], EntitySummary(row["entity"]))
        summary.targets.append(
            TargetRows(row["target_table"], row["files"], *(int(row[c]) for c in COUNTS))
        )
    return [out[k] for k in sorted(out)]


HEADER = (
    "entity",
    "staged",
    "quarantined",
    "failed",
    "applied",
    "target",
    "inserted",
    "updated",
    "deleted",
    "stale",
)
LEFT = (0, 5)  # left-aligned columns: entity, target


def table_rows(summaries: list[EntitySummary]) -> list[tuple[str, ...]]:
    """The summary as text rows (HEADER's columns): one per entity and target table."""
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        files = (str(s.staged), str(s.quarantined), str(s.failed), str(s.applied))
        targets: list[TargetRows | None] = list(s.targets) or [None]
        for i, t in enumerate(targets):
            head = (s.entity, *files) if i == 0 else ("", "", "", "", "")
            if t is None:
                rows.append((*head, "-", "", "", "", ""))
            else:
                rows.append(
                    (
                        *head,
                        t.target_table,
                        str(t.rows_inserted),
                        str(t.rows_updated),
                        str(t.rows_deleted),
                        str(t.rows_skipped),
                    )
                )
    return rows


def render(summaries: list[EntitySummary], *, rich: bool, width: int | None = None) -> str | Any:
    """A rich Table (terminal) or aligned plain text (pipes, logs). On a terminal narrower than
    the table (``width``: its columns), one block per entity instead, so that no entity or
    table name is cut."""
    rows = table_rows(summaries)
    if rich and width is not None:
        natural = sum(max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER))
        if natural + 3 * len(HEADER) + 1 > width:  # rich's borders and padding per column
            return blocks(summaries)
    if rich:
        table = Table(title="this run, per entity", title_justify="left")
        for i, name in enumerate(HEADER):
            table.add_column(name, justify="left" if i in LEFT else "right")
        for r in rows:
            table.add_row(*r)
        return table
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i in LEFT else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(HEADER), *(line(r) for r in rows)])


def blocks(summaries: list[EntitySummary]) -> str:
    """The summary for a narrow terminal: per entity its Files, then a line per target."""
    out = ["this run, per entity"]
    for s in summaries:
        out.append(s.entity)
        out.append(
            f"  Files: staged {s.staged}, quarantined {s.quarantined}, failed {s.failed}, "
            f"applied {s.applied}"
        )
        for t in s.targets:
            out.append(f"  {t.target_table}")
            out.append(
                f"    inserted {t.rows_inserted}, updated {t.rows_updated}, "
                f"deleted {t.rows_deleted}, stale {t.rows_skipped}"
            )
    return "\n".join(out)
