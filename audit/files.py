"""Files in the Audit DB: registration, leases and the File state machine.

Every transition is a named method doing one conditional UPDATE (``WHERE state IN (...)``) and
writing a File event in the same transaction. If the row is not in an expected state the
method raises :class:`IllegalTransition`; it never half-applies."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    case,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from audit.markers import Markers
from audit.models import FileState
from audit.models import file_events as events_t
from audit.models import files as files_t
from audit.models import runs as runs_t
from audit.records import (
    BATCH,
    HELD_NOTE,
    AuditError,
    FileRecord,
    IllegalTransition,
    Recovery,
    Registration,
    _claim_values,
    _staged_values,
    process_alive,
    utcnow,
)


def file_name(path: str) -> str:
    """The last part of a File's path or URI."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def reload_identity(bytes_hash: str, path: str, mtime: datetime) -> str:
    """A reload File's identity when its bytes were seen at its path before: the bytes' hash,
    the path and the modification time of this sighting hashed together (hex, as a content
    hash), so two runs that see the same rewrite register one File and the staged rows, the
    markers and the manifest tell it from the earlier File."""
    seen = f"reload\0{bytes_hash}\0{path}\0{mtime.isoformat()}"
    return hashlib.sha256(seen.encode("utf-8")).hexdigest()


class Files(Markers):
    """Reading, registering and moving Files."""

    # -- reading ------------------------------------------------------------------------

    def get(self, file_id: int) -> FileRecord:
        with self.engine.connect() as conn:
            row = conn.execute(select(files_t).where(files_t.c.id == file_id)).mappings().first()
        if row is None:
            raise AuditError(f"no File with id {file_id}")
        return FileRecord(**row)

    def files(
        self, *, entity: str | None = None, states: Iterable[str] | None = None
    ) -> list[FileRecord]:
        query = select(files_t).order_by(files_t.c.id)
        if entity is not None:
            query = query.where(files_t.c.entity == entity)
        if states is not None:
            query = query.where(files_t.c.state.in_([str(s) for s in states]))
        with self.engine.connect() as conn:
            return [FileRecord(**r) for r in conn.execute(query).mappings().all()]

    def staged_paths(self, entity: str) -> list[tuple[str, datetime | None, str | None]]:
        """(path, staged_at, staged_by) of the entity's STAGED and COMMITTED Files."""
        query = select(files_t.c.path, files_t.c.staged_at, files_t.c.staged_by).where(
            files_t.c.entity == entity,
            files_t.c.state.in_([FileState.STAGED.value, FileState.COMMITTED.value]),
        )
        with self.engine.connect() as conn:
            return [(r.path, r.staged_at, r.staged_by) for r in conn.execute(query)]

    def events(self, file_id: int) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(events_t).where(events_t.c.file_id == file_id).order_by(events_t.c.id)
            ).mappings()
            return [dict(r) for r in rows]

    def counts(self) -> dict[str, int]:
        """Files per state, for summaries."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(files_t.c.state, func.count()).group_by(files_t.c.state)
            ).all()
        return {state: n for state, n in rows}

    def landed_bytes(self) -> int:
        """The bytes of every File ever registered (duplicates too): an upper bound of what the
        project's staged and applied tables were made from."""
        with self.engine.connect() as conn:
            total = conn.execute(select(func.coalesce(func.sum(files_t.c.size), 0))).scalar_one()
        return int(total)

    # -- registration -------------------------------------------------------------------

    def register_file(
        self,
        *,
        entity: str,
        path: str,
        size: int,
        mtime: datetime,
        content_hash: str,
        process_id: str,
        reloads: Callable[[str], bool] | None = None,
    ) -> Registration:
        """Record a File as PENDING, or as DUPLICATE of the File with the same content.

        Idempotent: the same (entity, path, content) seen again returns the existing row.
        Safe under concurrency: the unique index decides which of two racing registrations
        is the original.

        ``reloads`` (an entity with meta.cdc.reloads): whether a File name is a reload File's.
        Such a File rewritten at its path with bytes the path held before is a new File (a
        reload: see :func:`reload_identity`) when the path's earlier File was staged, and a
        change File (another name) registered for the entity was modified after the path's
        last sighting and before this one (DMS wrote changes, then the table again); else it
        is the earlier sighting, as any File seen again.
        """
        entry = dict(entity=entity, path=path, size=size, mtime=mtime,
                     content_hash=content_hash, process_id=process_id, reloads=reloads)  # fmt: skip
        for _ in range(3):
            try:
                with self.engine.begin() as conn:
                    return self._register_in(conn, entry)
            except IntegrityError:
                continue  # somebody registered it first: look again
        raise AuditError(f"could not register {path} for {entity}: conflicting registrations")

    def sightings(self, entity: str, paths: Iterable[str]) -> set[tuple[str, int, datetime]]:
        """(path, size, mtime) of the Files of ``entity`` registered at one of ``paths``, in one
        query per ``BATCH`` paths: a landed File seen with the same size and mtime is not hashed
        again."""
        wanted = list(dict.fromkeys(paths))
        out: set[tuple[str, int, datetime]] = set()
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), BATCH):
                query = select(files_t.c.path, files_t.c.size, files_t.c.mtime).where(
                    files_t.c.entity == entity, files_t.c.path.in_(wanted[start : start + BATCH])
                )
                out.update((p, int(n), t) for p, n, t in conn.execute(query).all())
        return out

    def register_files(self, entries: Sequence[dict[str, Any]]) -> list[Registration]:
        """:meth:`register_file` of each of ``entries`` (its keyword arguments), in one
        transaction; when a concurrent registration wins a race, File by File instead."""
        try:
            with self.engine.begin() as conn:
                return [self._register_in(conn, e) for e in entries]
        except IntegrityError:  # somebody registered one of them first
            return [self.register_file(**e) for e in entries]

    def _register_in(self, conn: Connection, e: dict[str, Any]) -> Registration:
        """One File's registration, in ``conn``'s transaction (see :meth:`register_file`)."""
        found = self._sighting(conn, e["entity"], e["path"], e["content_hash"])
        reload_of = None
        if found is not None:
            reloads = e.get("reloads")
            if reloads is None or not reloads(file_name(e["path"])):
                return Registration(FileRecord(**found), created=False)
            identity = reload_identity(e["content_hash"], e["path"], e["mtime"])
            again = self._sighting(conn, e["entity"], e["path"], identity)
            if again is not None:  # the same rewrite, registered by another run
                return Registration(FileRecord(**again), created=False)
            if not self._rewritten_reload(conn, e):
                return Registration(FileRecord(**found), created=False)
            reload_of, e = found["id"], {**e, "content_hash": identity}
        original = (
            conn.execute(
                select(files_t.c.id, files_t.c.path).where(
                    files_t.c.entity == e["entity"],
                    files_t.c.content_hash == e["content_hash"],
                    files_t.c.duplicate_of.is_(None),
                )
            )
            .mappings()
            .first()
        )
        state = FileState.PENDING if original is None else FileState.DUPLICATE
        now = utcnow()
        row = (
            conn.execute(
                insert(files_t)
                .values(
                    **{k: e[k] for k in ("entity", "path", "size", "mtime", "content_hash")},
                    state=state.value,
                    attempts=0,
                    registered_by=e["process_id"],
                    duplicate_of=original["id"] if original else None,
                    reload_of=reload_of,
                    created_at=now,
                    updated_at=now,
                )
                .returning(files_t)
            )
            .mappings()
            .one()
        )
        detail = f"duplicate of File {original['id']} ({original['path']})" if original else None
        if reload_of is not None:
            detail = (
                f"reload: the bytes of File {reload_of} written at its path again, after change "
                "Files"
            )
        self._event(conn, row["id"], None, state.value, e["process_id"], detail)
        return Registration(FileRecord(**row), created=True)

    @staticmethod
    def _sighting(conn: Connection, entity: str, path: str, digest: str) -> Any:
        """The row of ``entity``'s File at ``path`` with content hash ``digest``, or None."""
        query = select(files_t).where(
            files_t.c.entity == entity, files_t.c.path == path, files_t.c.content_hash == digest
        )
        return conn.execute(query).mappings().first()

    def _rewritten_reload(self, conn: Connection, e: dict[str, Any]) -> bool:
        """Whether ``e``, a reload File at a path that held its bytes before, is a reload
        rewritten there (see :meth:`register_file`)."""
        reloads = e["reloads"]
        at_path = conn.execute(
            select(files_t.c.mtime, files_t.c.staged_at).where(
                files_t.c.entity == e["entity"], files_t.c.path == e["path"]
            )
        ).all()
        last = max(mtime for mtime, _ in at_path)
        if e["mtime"] <= last or all(at is None for _, at in at_path):
            return False
        between = conn.execute(
            select(files_t.c.path).where(
                files_t.c.entity == e["entity"],
                files_t.c.mtime > last,
                files_t.c.mtime < e["mtime"],
                files_t.c.duplicate_of.is_(None),
            )
        ).scalars()
        return any(not reloads(file_name(p)) for p in between)

    # -- transitions --------------------------------------------------------------------

    def _event(
        self,
        conn: Connection,
        file_id: int,
        from_state: str | None,
        to_state: str,
        process_id: str | None,
        detail: str | None = None,
    ) -> None:
        conn.execute(
            insert(events_t).values(
                file_id=file_id,
                from_state=from_state,
                to_state=to_state,
                at=utcnow(),
                process_id=process_id,
                detail=detail,
            )
        )

    def _transition(
        self,
        name: str,
        file_id: int,
        from_states: Sequence[FileState],
        values: dict[str, Any],
        *,
        extra_where: Sequence[Any] = (),
        process_id: str | None = None,
        detail: str | None = None,
    ) -> FileRecord:
        allowed = [s.value for s in from_states]
        with self.engine.begin() as conn:
            if len(allowed) > 1:
                # Several source states: lock the row and read which one it is, so the event
                # records the exact state left (SQLite already holds the write lock here).
                current = conn.execute(
                    select(files_t.c.state).where(files_t.c.id == file_id).with_for_update()
                ).scalar_one_or_none()
                if current not in allowed:
                    raise IllegalTransition(file_id, name, allowed, current)
                allowed = [current]
            row = (
                conn.execute(
                    update(files_t)
                    .where(files_t.c.id == file_id, files_t.c.state.in_(allowed), *extra_where)
                    .values(updated_at=utcnow(), **values)
                    .returning(files_t)
                )
                .mappings()
                .first()
            )
            if row is None:
                actual = conn.execute(
                    select(files_t.c.state).where(files_t.c.id == file_id)
                ).scalar_one_or_none()
                raise IllegalTransition(file_id, name, allowed, actual)
            record = FileRecord(**row)
            self._event(conn, file_id, allowed[0], record.state, process_id, detail)
        return record

    def _transition_many(
        self,
        file_ids: Sequence[int],
        from_state: FileState,
        values: dict[str, Any],
        *,
        extra_where: Sequence[Any] = (),
        process_id: str | None = None,
        details: dict[int, str | None] | None = None,
        then: Callable[[Connection, list[FileRecord]], None] | None = None,
        at: datetime | None = None,
    ) -> list[FileRecord]:
        """:meth:`_transition` of many Files from one state, in one transaction per
        ``BATCH`` Files: each File in ``from_state`` (and ``extra_where``) moves, with its
        event; the others are left as they are and not returned (the caller tells which).
        ``then(conn, moved)`` runs in each batch's transaction, after its Files moved; ``at``
        is the time recorded (now unless given)."""
        moved: list[FileRecord] = []
        for start in range(0, len(file_ids), BATCH):
            chunk = list(file_ids[start : start + BATCH])
            with self.engine.begin() as conn:
                rows = (
                    conn.execute(
                        update(files_t)
                        .where(
                            files_t.c.id.in_(chunk),
                            files_t.c.state == from_state.value,
                            *extra_where,
                        )
                        .values(updated_at=at or utcnow(), **values)
                        .returning(files_t)
                    )
                    .mappings()
                    .all()
                )
                records = sorted((FileRecord(**r) for r in rows), key=lambda r: r.id)
                if records:
                    now = at or utcnow()
                    conn.execute(
                        insert(events_t),
                        [
                            dict(
                                file_id=r.id,
                                from_state=from_state.value,
                                to_state=r.state,
                                at=now,
                                process_id=process_id,
                                detail=(details or {}).get(r.id),
                            )
                            for r in records
                        ],
                    )
                    if then is not None:
                        then(conn, records)
            moved.extend(records)
        return moved

    def claim(
        self,
        file_id: int,
        owner: str,
        *,
        lease_seconds: int | None = None,
        now: datetime | None = None,
    ) -> FileRecord:
        """PENDING -> PROCESSING with a lease for ``owner``; counts an attempt (given back by
        :meth:`release` or :meth:`recover` when the failure cannot be pinned on this File).

        Of two workers claiming the same File at once exactly one succeeds; the other gets
        IllegalTransition.
        """
        now = now or utcnow()
        expires = now + timedelta(seconds=lease_seconds or self.lease_seconds)
        return self._transition(
            "claim",
            file_id,
            [FileState.PENDING],
            _claim_values(owner, expires),
            process_id=owner,
        )

    def claim_pending(
        self,
        owner: str,
        *,
        entity: str | None = None,
        limit: int | None = None,
        lease_seconds: int | None = None,
    ) -> list[FileRecord]:
        """Claim PENDING Files (oldest first), skipping those another worker wins: one
        conditional UPDATE per ``BATCH`` Files, so of two workers claiming at once each File
        goes to exactly one."""
        query = select(files_t.c.id).where(files_t.c.state == FileState.PENDING.value)
        if entity is not None:
            query = query.where(files_t.c.entity == entity)
        query = query.order_by(files_t.c.id)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            candidates = list(conn.execute(query).scalars())
        expires = utcnow() + timedelta(seconds=lease_seconds or self.lease_seconds)
        return self._transition_many(
            candidates,
            FileState.PENDING,
            _claim_values(owner, expires),
            process_id=owner,
        )

    def renew_lease(self, file_id: int, owner: str, *, lease_seconds: int | None = None) -> None:
        expires = utcnow() + timedelta(seconds=lease_seconds or self.lease_seconds)
        self._transition(
            "renew_lease",
            file_id,
            [FileState.PROCESSING],
            dict(lease_expires_at=expires),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=owner,
            detail="lease renewed",
        )

    def mark_staged(
        self, file_id: int, owner: str, process_id: str, detail: str | None = None
    ) -> FileRecord:
        """PROCESSING -> STAGED, only by the worker holding the lease (``detail``: what staging
        left out, for the File's history)."""
        return self._transition(
            "mark_staged",
            file_id,
            [FileState.PROCESSING],
            _staged_values(process_id),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=process_id,
            detail=detail,
        )

    def mark_staged_many(
        self, details: dict[int, str | None], owner: str, process_id: str
    ) -> list[FileRecord]:
        """:meth:`mark_staged` of the Files ``details`` names (file id -> detail), in one
        transaction per ``BATCH`` Files; a File whose lease ``owner`` no longer holds is left
        as it is and not returned."""
        return self._transition_many(
            list(details),
            FileState.PROCESSING,
            _staged_values(process_id),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=process_id,
            details=details,
        )

    def mark_committed(
        self,
        file_id: int,
        process_id: str,
        detail: str | None = None,
        markers: Sequence[dict[str, Any]] = (),
    ) -> FileRecord:
        """STAGED -> COMMITTED, once the destination holds the Applied File Marker; ``markers``
        (one dict per target table: target_table, the row counts, applied_at, invocation_id)
        are kept with the File in the same transaction, for display."""
        moved = self.mark_committed_many({file_id: (detail, markers)}, process_id)
        if not moved:  # committed by another runner since
            raise IllegalTransition(file_id, "mark_committed", ["STAGED"], "COMMITTED")
        return moved[0]

    def mark_committed_many(
        self,
        found: dict[int, tuple[str | None, Sequence[dict[str, Any]]]],
        process_id: str,
    ) -> list[FileRecord]:
        """:meth:`mark_committed` of the Files ``found`` names (file id -> (detail, markers)),
        each File's state, event and marker counts in one transaction per ``BATCH`` Files. A
        File another runner committed since is left out of what is returned; a File in any
        other state than STAGED or COMMITTED raises :class:`IllegalTransition`."""

        def keep_markers(conn: Connection, records: list[FileRecord]) -> None:
            for r in records:
                if found[r.id][1]:
                    self._keep_markers(conn, r.id, process_id, found[r.id][1])

        moved = self._transition_many(
            list(found),
            FileState.STAGED,
            dict(state=FileState.COMMITTED.value, committed_at=utcnow()),
            process_id=process_id,
            details={i: detail for i, (detail, _) in found.items()},
            then=keep_markers,
        )
        left = sorted(set(found) - {r.id for r in moved})
        if left:
            with self.engine.connect() as conn:
                rows = conn.execute(
                    select(files_t.c.id, files_t.c.state).where(files_t.c.id.in_(left))
                )
                states: dict[int, str] = {r.id: r.state for r in rows}
            for file_id in left:
                if states.get(file_id) != FileState.COMMITTED.value:
                    raise IllegalTransition(
                        file_id, "mark_committed", ["STAGED"], states.get(file_id)
                    )
        return moved

    def note_held(self, file_ids: Iterable[int], process_id: str) -> None:
        """Note on STAGED Files that a `dbt build` of their models succeeded without applying
        them (a transaction group holds them): `runner run` does not build them again for
        their own sake, only when new Files arrive for their entities."""
        with self.engine.begin() as conn:
            for file_id in file_ids:
                self._event(conn, file_id, "STAGED", "STAGED", process_id, HELD_NOTE)

    def held(self) -> set[int]:
        """The STAGED Files whose last event is that note."""
        last = (
            select(events_t.c.file_id, func.max(events_t.c.id).label("last_id"))
            .group_by(events_t.c.file_id)
            .subquery()
        )
        query = (
            select(events_t.c.file_id)
            .join(last, events_t.c.id == last.c.last_id)
            .join(files_t, files_t.c.id == events_t.c.file_id)
            .where(files_t.c.state == FileState.STAGED.value, events_t.c.detail == HELD_NOTE)
        )
        with self.engine.connect() as conn:
            return set(conn.execute(query).scalars())

    def record_failure(self, file_id: int, owner: str, error: str) -> FileRecord:
        """PROCESSING -> PENDING to retry, or FAILED once attempts reach the maximum."""
        return self._transition(
            "record_failure",
            file_id,
            [FileState.PROCESSING],
            dict(
                state=case(
                    (files_t.c.attempts >= self.max_attempts, FileState.FAILED.value),
                    else_=FileState.PENDING.value,
                ),
                last_error=error,
                lease_owner=None,
                lease_expires_at=None,
            ),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=owner,
            detail=error,
        )

    def release(self, file_id: int, owner: str, reason: str, *, lapse: bool = False) -> FileRecord:
        """PROCESSING -> PENDING without counting the attempt: the failure was not this File's
        (a lost connection, another File's error, a run stopped before reaching it). ``lapse``:
        the failure could not be pinned on one File, so stage this one alone next time."""
        return self._transition(
            "release",
            file_id,
            [FileState.PROCESSING],
            dict(
                state=FileState.PENDING.value,
                attempts=case((files_t.c.attempts > 0, files_t.c.attempts - 1), else_=0),
                lapses=files_t.c.lapses + (1 if lapse else 0),
                last_error=reason,
                lease_owner=None,
                lease_expires_at=None,
            ),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=owner,
            detail=reason,
        )

    def quarantine(self, file_id: int, owner: str, reason: str) -> FileRecord:
        """PROCESSING -> QUARANTINED: bad input that no retry can fix."""
        return self._transition(
            "quarantine",
            file_id,
            [FileState.PROCESSING],
            dict(
                state=FileState.QUARANTINED.value,
                last_error=reason,
                lease_owner=None,
                lease_expires_at=None,
            ),
            extra_where=[files_t.c.lease_owner == owner],
            process_id=owner,
            detail=reason,
        )

    def requeue(self, file_id: int, process_id: str, reason: str) -> FileRecord:
        """FAILED or QUARANTINED -> PENDING with attempts reset: an operator's retry."""
        return self._transition(
            "requeue",
            file_id,
            [FileState.FAILED, FileState.QUARANTINED],
            dict(state=FileState.PENDING.value, attempts=0, lapses=0),
            process_id=process_id,
            detail=reason,
        )

    def recover(self, process_id: str | None = None, *, now: datetime | None = None) -> Recovery:
        """Close dead runs as ``aborted`` and give their Files back, at once.

        A run is dead when its process is gone (same host: no such pid, or the pid was reused)
        or its heartbeat is older than the lease. A PROCESSING File is reclaimed when its owner
        is not a live running run, or its lease expired. The lost claim counts as an attempt
        only when it can be pinned on the File (it was the owner's only File in flight; then
        FAILED at the maximum); otherwise the attempt is given back and a lapse recorded, so
        the File is staged alone next time.
        """
        now = now or utcnow()
        stale = now - timedelta(seconds=self.lease_seconds)
        aborted: list[str] = []
        with self.engine.connect() as conn:
            running = (
                conn.execute(
                    select(runs_t)
                    .where(runs_t.c.outcome == "running")
                    .order_by(runs_t.c.process_id)
                )
                .mappings()
                .all()
            )
        live: set[str] = set()
        for run in running:
            if run["process_id"] == process_id:
                live.add(run["process_id"])
                continue
            alive = process_alive(run["host"], run["pid"], run["started_at"])
            beat = run["heartbeat_at"] or run["started_at"]
            if alive is False or (alive is None and beat < stale):
                why = "process gone" if alive is False else f"no heartbeat since {beat:%H:%M:%S}Z"
                with self.engine.begin() as conn:
                    done = conn.execute(
                        update(runs_t)
                        .where(
                            runs_t.c.process_id == run["process_id"], runs_t.c.outcome == "running"
                        )
                        .values(
                            outcome="aborted",
                            ended_at=now,
                            detail=f"closed by {process_id or 'a later run'}: {why}",
                        )
                    ).rowcount
                if done:
                    aborted.append(run["process_id"])
            else:
                live.add(run["process_id"])
        with self.engine.connect() as conn:
            held = conn.execute(
                select(files_t.c.id, files_t.c.lease_owner, files_t.c.lease_expires_at).where(
                    files_t.c.state == FileState.PROCESSING.value
                )
            ).all()
        by_owner: dict[str | None, list[int]] = {}
        for file_id, owner, expires in held:
            if owner not in live or expires is None or expires < now:
                by_owner.setdefault(owner, []).append(file_id)
        in_flight = {o: sum(1 for _, owner, _ in held if owner == o) for o in by_owner}
        reclaimed: list[FileRecord] = []
        for owner, ids in by_owner.items():
            pinned = in_flight[owner] == 1
            why = f"claim lost: its run {owner} " + (
                "stopped" if owner not in live else "stopped renewing its lease"
            )
            values: dict[str, Any]
            if pinned:
                error = why + " while it held only this File"
                values = dict(
                    state=case(
                        (files_t.c.attempts >= self.max_attempts, FileState.FAILED.value),
                        else_=FileState.PENDING.value,
                    ),
                )
            else:
                error = why + f" with {len(ids)} Files in flight (not counted)"
                values = dict(
                    state=FileState.PENDING.value,
                    attempts=case((files_t.c.attempts > 0, files_t.c.attempts - 1), else_=0),
                    lapses=files_t.c.lapses + 1,
                )
            owned = (
                (files_t.c.lease_owner == owner)
                if owner is not None
                else files_t.c.lease_owner.is_(None)
            )
            reclaimed += self._transition_many(
                ids,
                FileState.PROCESSING,
                dict(lease_owner=None, lease_expires_at=None, last_error=error, **values),
                extra_where=[owned],
                process_id=process_id,
                details=dict.fromkeys(ids, error),
                at=now,
            )
        return Recovery(aborted, reclaimed)

    def requeue_many(
        self,
        process_id: str,
        *,
        ids: Iterable[int] = (),
        states: Iterable[str] = (),
        entity: str | None = None,
        reason: str = "operator retry",
    ) -> list[FileRecord]:
        """`runner retry`: the chosen FAILED or QUARANTINED Files back to PENDING."""
        chosen = {f.id: f for f in self.files(entity=entity, states=list(states))} if states else {}
        for file_id in ids:
            chosen.setdefault(file_id, self.get(file_id))
        return [self.requeue(i, process_id, reason) for i in sorted(chosen)]
