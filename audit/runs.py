"""Runs in the Audit DB: each command's start, heartbeat and end, and what each moved."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    func,
    insert,
    select,
    update,
)

from audit.models import FileState
from audit.models import file_events as events_t
from audit.models import files as files_t
from audit.models import runs as runs_t
from audit.records import (
    _Store,
    utcnow,
)


class Runs(_Store):
    """The runs."""

    def start_run(self, process_id: str, command: str, target: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(runs_t).values(
                    process_id=process_id,
                    command=command,
                    target=target,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    started_at=utcnow(),
                    heartbeat_at=utcnow(),
                    outcome="running",
                )
            )

    def heartbeat(self, process_id: str, *, lease_seconds: int | None = None) -> int:
        """The run is alive: renew its heartbeat and the lease of every File it holds.

        Returns how many leases were renewed, so the caller can tell a lease it lost.
        """
        now = utcnow()
        expires = now + timedelta(seconds=lease_seconds or self.lease_seconds)
        with self.engine.begin() as conn:
            conn.execute(
                update(runs_t).where(runs_t.c.process_id == process_id).values(heartbeat_at=now)
            )
            renewed = conn.execute(
                update(files_t)
                .where(
                    files_t.c.state == FileState.PROCESSING.value,
                    files_t.c.lease_owner == process_id,
                )
                .values(lease_expires_at=expires)
            ).rowcount
        return int(renewed or 0)

    def end_run(self, process_id: str, outcome: str, detail: str | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(runs_t)
                .where(runs_t.c.process_id == process_id)
                .values(ended_at=utcnow(), outcome=outcome, detail=detail)
            )

    def runs_since_maintain(self) -> int:
        """`runner run`s started since the last maintenance that finished (this one included)."""
        with self.engine.connect() as conn:
            last = conn.execute(
                select(func.max(runs_t.c.started_at)).where(
                    runs_t.c.command == "maintain", runs_t.c.outcome == "ok"
                )
            ).scalar_one()
            query = select(func.count()).where(runs_t.c.command == "run")
            if last is not None:
                query = query.where(runs_t.c.started_at > last)
            return int(conn.execute(query).scalar_one())

    def runs(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs_t).order_by(runs_t.c.process_id)).mappings().all()
            return [dict(r) for r in rows]

    def run_file_counts(
        self, process_id: str | None = None
    ) -> dict[str, dict[str, dict[str, int]]]:
        """process_id -> entity -> state -> Files that run moved into that state (from the
        File events; a File retried within one run counts once per state)."""
        from sqlalchemy import distinct

        query = (
            select(
                events_t.c.process_id,
                files_t.c.entity,
                events_t.c.to_state,
                func.count(distinct(events_t.c.file_id)),
            )
            .join(files_t, files_t.c.id == events_t.c.file_id)
            .where(events_t.c.process_id.is_not(None))
            .where(  # a note on a File (a lease renewed, a File held) moves it nowhere
                (events_t.c.from_state.is_(None)) | (events_t.c.from_state != events_t.c.to_state)
            )
            .group_by(events_t.c.process_id, files_t.c.entity, events_t.c.to_state)
        )
        if process_id is not None:
            query = query.where(events_t.c.process_id == process_id)
        out: dict[str, dict[str, dict[str, int]]] = {}
        with self.engine.connect() as conn:
            for pid, entity, state, n in conn.execute(query).all():
                out.setdefault(pid, {}).setdefault(entity, {})[state] = int(n)
        return out
