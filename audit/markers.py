"""The marker counts the Audit DB keeps with each File, copied from the destination's Applied
File Markers for display (runner status, the run summary, the metrics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    func,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from audit.models import file_markers as markers_t
from audit.models import files as files_t
from audit.records import (
    MARKER_COUNTS,
    _Store,
)


class Markers(_Store):
    """The kept markers."""

    def keep_markers(self, found: Mapping[int, Sequence[dict[str, Any]]], process_id: str) -> None:
        """Keep the markers of Files still STAGED (file id -> the markers found so far: some
        of its targets applied it, others not yet), for display: the run summary counts what
        a run applied whatever its Files' states. A marker kept before is left as it is."""
        with self.engine.begin() as conn:
            for file_id, markers in found.items():
                if markers:
                    self._keep_markers(conn, file_id, process_id, markers)

    @staticmethod
    def _keep_markers(
        conn: Connection, file_id: int, process_id: str, markers: Sequence[dict[str, Any]]
    ) -> None:
        """A File's markers: each new one recorded by ``process_id``; one already kept from
        the same dbt invocation stays with the run that recorded it first (a File committed
        by a later run does not count its rows again), one from another invocation (the File
        applied again) replaces it."""
        kept = {
            r.target_table: r.invocation_id
            for r in conn.execute(
                select(markers_t.c.target_table, markers_t.c.invocation_id).where(
                    markers_t.c.file_id == file_id
                )
            )
        }
        rows = [
            {
                "file_id": file_id,
                "target_table": str(m["target_table"]),
                **{c: int(m.get(c) or 0) for c in MARKER_COUNTS},
                "applied_at": m.get("applied_at"),
                "invocation_id": m.get("invocation_id"),
                "recorded_by": process_id,
            }
            for m in markers
        ]
        rows = [
            r
            for r in rows
            if r["target_table"] not in kept or kept[r["target_table"]] != r["invocation_id"]
        ]
        if not rows:
            return
        replaced = [r["target_table"] for r in rows if r["target_table"] in kept]
        if replaced:
            conn.execute(
                markers_t.delete().where(
                    markers_t.c.file_id == file_id, markers_t.c.target_table.in_(replaced)
                )
            )
        # Another runner may keep the same marker at the same moment (two reconciles of a File
        # applied in part): the first one's row stands.
        dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        conn.execute(
            dialect_insert(markers_t).on_conflict_do_nothing(
                index_elements=["file_id", "target_table"]
            ),
            rows,
        )

    def file_markers(self) -> dict[int, list[dict[str, Any]]]:
        """File id -> its kept marker counts, one dict per target table."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(markers_t).order_by(markers_t.c.file_id, markers_t.c.target_table)
            ).mappings()
            out: dict[int, list[dict[str, Any]]] = {}
            for r in rows:
                out.setdefault(r["file_id"], []).append(dict(r))
            return out

    def marker_totals(self, process_id: str) -> list[dict[str, Any]]:
        """Per entity and target table, the marker counts reconcile kept in run ``process_id``
        (summed), with the number of Files: entity, target_table, files, rows_*."""
        sums = [func.sum(markers_t.c[c]).label(c) for c in MARKER_COUNTS]
        query = (
            select(
                files_t.c.entity,
                markers_t.c.target_table,
                func.count().label("files"),
                *sums,
            )
            .join(files_t, files_t.c.id == markers_t.c.file_id)
            .where(markers_t.c.recorded_by == process_id)
            .group_by(files_t.c.entity, markers_t.c.target_table)
            .order_by(files_t.c.entity, markers_t.c.target_table)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]

    def applied_totals(self) -> list[dict[str, Any]]:
        """Per entity and target table, the marker counts the Audit DB keeps, summed over
        every File (the metrics' rows applied): entity, target_table, rows_*."""
        sums = [func.sum(markers_t.c[c]).label(c) for c in MARKER_COUNTS]
        query = (
            select(files_t.c.entity, markers_t.c.target_table, *sums)
            .join(files_t, files_t.c.id == markers_t.c.file_id)
            .group_by(files_t.c.entity, markers_t.c.target_table)
            .order_by(files_t.c.entity, markers_t.c.target_table)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]
