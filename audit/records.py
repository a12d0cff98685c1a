"""The Audit DB's records and the helpers its parts share: a File's row as read, a registration,
the errors, the time and process checks."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Engine,
)
from sqlalchemy.engine import make_url

from audit.models import FileState
from audit.models import file_markers as markers_t
from audit.models import files as files_t

# The row counts a marker carries, as the file_markers table has them (its rows_* columns; a
# test checks they are the contract's cdc_applied_files counts).
MARKER_COUNTS = tuple(c.name for c in markers_t.columns if c.name.startswith("rows_"))

# Files per statement of a batched transition (well under SQLite's bound on parameters).
BATCH = 500
# The event that notes a STAGED File held by its transaction group (note_held).
HELD_NOTE = "built without a marker: held by its transaction group"


def _claim_values(owner: str, expires: datetime) -> dict[str, Any]:
    """PENDING -> PROCESSING: the lease and one more attempt."""
    return dict(
        state=FileState.PROCESSING.value,
        lease_owner=owner,
        lease_expires_at=expires,
        attempts=files_t.c.attempts + 1,
    )


def _staged_values(process_id: str) -> dict[str, Any]:
    """PROCESSING -> STAGED: who staged it, when; the lease and the last error cleared."""
    return dict(
        state=FileState.STAGED.value,
        staged_by=process_id,
        staged_at=utcnow(),
        lease_owner=None,
        lease_expires_at=None,
        last_error=None,
    )


def utcnow() -> datetime:
    """Naive UTC, the one time convention of the Audit DB."""
    return datetime.now(UTC).replace(tzinfo=None)


class AuditError(Exception):
    """Root of Audit DB errors."""


class IllegalTransition(AuditError):
    """The File was not in a state the transition accepts (or the lease is not ours)."""

    def __init__(self, file_id: int, transition: str, expected: Sequence[str], actual: str | None):
        self.file_id = file_id
        self.transition = transition
        self.expected = tuple(expected)
        self.actual = actual
        super().__init__(
            f"File {file_id}: cannot {transition}: expected state {'/'.join(expected)}"
            + (" with our lease" if transition in _LEASED else "")
            + f", found {actual or 'no such File'}"
        )


_LEASED = {"mark_staged", "record_failure", "release", "quarantine", "renew_lease"}


@dataclass(frozen=True)
class Recovery:
    """What :meth:`AuditDB.recover` found: runs closed as aborted, Files given back."""

    aborted_runs: list[str]
    reclaimed: list[FileRecord]


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def process_alive(host: str, pid: int, started_at: datetime) -> bool | None:
    """Whether the process that started a run is still alive: None when it cannot be told
    (another host), False when no such process exists or the pid now belongs to a process
    started after the run did (pid reuse)."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    boot = _boot_time()
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5): start time in clock ticks after boot
    except (OSError, IndexError, ValueError):
        return True
    if fields[0] == "Z":  # a zombie: dead, not yet reaped by its parent
        return False
    if boot is None:
        return True
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    run_start = started_at.replace(tzinfo=UTC).timestamp()
    return started <= run_start + 2.0


@dataclass(frozen=True)
class FileRecord:
    """A read-only view of one Audit DB File row."""

    id: int
    entity: str
    path: str
    size: int
    mtime: datetime
    content_hash: str
    state: str
    attempts: int
    lapses: int
    last_error: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    registered_by: str
    staged_by: str | None
    duplicate_of: int | None
    created_at: datetime
    updated_at: datetime
    staged_at: datetime | None
    committed_at: datetime | None
    staged_removed_at: datetime | None = None
    # A reload File rewritten at its path with bytes it held before: the row at that path whose
    # content_hash is those bytes' hash (this row's content_hash is the sighting's identity).
    reload_of: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The shape `runner status --json` prints: stable keys, ISO times."""
        out: dict[str, Any] = {
            "id": self.id,
            "entity": self.entity,
            "path": self.path,
            "size": self.size,
            "content_hash": self.content_hash,
            "state": self.state,
            "attempts": self.attempts,
            "lapses": self.lapses,
            "last_error": self.last_error,
            "process_id": self.staged_by,
            "registered_by": self.registered_by,
            "duplicate_of": self.duplicate_of,
            "reload_of": self.reload_of,
            "lease_owner": self.lease_owner,
        }
        for key in (
            "mtime",
            "lease_expires_at",
            "created_at",
            "updated_at",
            "staged_at",
            "committed_at",
            "staged_removed_at",
        ):
            value = getattr(self, key)
            out[key] = value.isoformat() + "Z" if value is not None else None
        return out


@dataclass(frozen=True)
class Registration:
    file: FileRecord
    created: bool  # False when this (entity, path, content) was already known


def redact_url(url: str) -> str:
    """The URL as it may appear in logs and errors: never with its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable audit URL>"


class _Store:
    """What every part of the Audit DB's API shares (set by AuditDB.__init__)."""

    engine: Engine
    dialect: str
    schema: str | None
    max_attempts: int
    lease_seconds: int
