"""Retention (`runner maintain`): which committed Files' staged rows may go, and old events."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import (
    delete,
    func,
    select,
    update,
)

from audit.models import FileState
from audit.models import file_events as events_t
from audit.models import files as files_t
from audit.records import (
    FileRecord,
    _Store,
    utcnow,
)


class Retention(_Store):
    """Retention."""

    def retention_candidates(self, entity: str, cutoff: datetime) -> list[FileRecord]:
        """COMMITTED Files of ``entity`` committed before ``cutoff`` whose staged rows are still
        in the staging table, less any whose content hash a File of the entity not yet
        COMMITTED shares (its rows are the same rows: they stay until it is COMMITTED too)."""
        settled = [FileState.COMMITTED.value, FileState.DUPLICATE.value]
        settled.append(FileState.QUARANTINED.value)
        with self.engine.connect() as conn:
            busy = {
                h
                for (h,) in conn.execute(
                    select(files_t.c.content_hash).where(
                        files_t.c.entity == entity, files_t.c.state.not_in(settled)
                    )
                )
            }
            rows = conn.execute(
                select(files_t)
                .where(
                    files_t.c.entity == entity,
                    files_t.c.state == FileState.COMMITTED.value,
                    files_t.c.committed_at < cutoff,
                    files_t.c.staged_removed_at.is_(None),
                )
                .order_by(files_t.c.id)
            ).mappings()
            return [FileRecord(**r) for r in rows if r["content_hash"] not in busy]

    def mark_staged_removed(self, file_ids: Iterable[int]) -> None:
        """Record that these COMMITTED Files' staged rows were deleted (their state is kept)."""
        ids = list(file_ids)
        if not ids:
            return
        with self.engine.begin() as conn:
            conn.execute(
                update(files_t)
                .where(files_t.c.id.in_(ids), files_t.c.state == FileState.COMMITTED.value)
                .values(staged_removed_at=utcnow())
            )

    def prune_events(self, cutoff: datetime, *, dry_run: bool = False) -> int:
        """Delete the file_events older than ``cutoff`` of COMMITTED Files (their state and
        times stay on the File); the events of any other File are kept. Returns how many."""
        committed = select(files_t.c.id).where(files_t.c.state == FileState.COMMITTED.value)
        where = (events_t.c.at < cutoff) & events_t.c.file_id.in_(committed)
        with self.engine.begin() as conn:
            if dry_run:
                return int(conn.execute(select(func.count()).where(where)).scalar_one())
            return int(conn.execute(delete(events_t).where(where)).rowcount or 0)
