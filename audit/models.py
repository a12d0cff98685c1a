"""Audit DB tables: runs, Files and the history of every File state change.

All times are naive UTC. The Audit DB is the control plane (ADR-0004): it never lives in the
destination, and it must never lose track of a File.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class FileState(enum.StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    STAGED = "STAGED"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"
    QUARANTINED = "QUARANTINED"
    DUPLICATE = "DUPLICATE"


STATE_VALUES = ", ".join(f"'{s.value}'" for s in FileState)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = metadata


class Run(Base):
    """One runner invocation; its process_id goes into every row it stages."""

    __tablename__ = "runs"

    process_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    command: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(128))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime())
    ended_at: Mapped[datetime | None] = mapped_column(DateTime())
    # running, ok, failed (finished with failed or quarantined Files), error, aborted (the
    # process died without ending its run; closed by a later run)
    outcome: Mapped[str] = mapped_column(String(16), server_default="running")
    detail: Mapped[str | None] = mapped_column(Text)
    # Renewed by the run's heartbeat thread while it works; a stale one means the run died.
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime())


class AuditFile(Base):
    """One landed File, identified by (entity, content hash).

    A byte-identical copy seen under another path is kept as its own row in state DUPLICATE
    pointing at the original, so operators see every path that was landed.
    """

    __tablename__ = "files"
    __table_args__ = (
        # The same content can be registered once per entity; copies are DUPLICATE rows.
        Index(
            "uq_files_entity_content_hash",
            "entity",
            "content_hash",
            unique=True,
            sqlite_where=text("duplicate_of IS NULL"),
            postgresql_where=text("duplicate_of IS NULL"),
        ),
        # A path seen again with the same bytes is the same sighting, never a second row.
        Index("uq_files_entity_path_content_hash", "entity", "path", "content_hash", unique=True),
        Index("ix_files_state_entity", "state", "entity"),
        CheckConstraint(f"state IN ({STATE_VALUES})", name="state_known"),
        CheckConstraint(
            "(state = 'DUPLICATE') = (duplicate_of IS NOT NULL)", name="duplicate_has_original"
        ),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    entity: Mapped[str] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(String(2048))
    size: Mapped[int] = mapped_column(BigInteger)
    mtime: Mapped[datetime] = mapped_column(DateTime())
    content_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    # Claims of this File, less those lost in a crash that cannot be pinned on it (FAILED once
    # a failure pinned on it happens at audit.max_attempts).
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    # Claims lost with other Files in flight (a crash that cannot be pinned on this File): such
    # a File is staged alone next time, so that a crash it causes is pinned on it.
    lapses: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime())
    registered_by: Mapped[str] = mapped_column(ForeignKey("runs.process_id"))
    staged_by: Mapped[str | None] = mapped_column(ForeignKey("runs.process_id"))
    duplicate_of: Mapped[int | None] = mapped_column(ForeignKey("files.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime())
    updated_at: Mapped[datetime] = mapped_column(DateTime())
    staged_at: Mapped[datetime | None] = mapped_column(DateTime())
    committed_at: Mapped[datetime | None] = mapped_column(DateTime())
    # When `runner maintain` deleted this COMMITTED File's rows from the staging table.
    staged_removed_at: Mapped[datetime | None] = mapped_column(DateTime())


class FileEvent(Base):
    """Every state change of every File, written in the same transaction as the change."""

    __tablename__ = "file_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id"), index=True)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(DateTime())
    process_id: Mapped[str | None] = mapped_column(String(36))
    detail: Mapped[str | None] = mapped_column(Text)


class FileMarker(Base):
    """The counts of a File's Applied File Marker in one target table, copied from the
    destination when reconcile commits the File (``runner status``, the run summary)."""

    __tablename__ = "file_markers"

    file_id: Mapped[int] = mapped_column(BigId, ForeignKey("files.id"), primary_key=True)
    target_table: Mapped[str] = mapped_column(String(512), primary_key=True)
    rows_inserted: Mapped[int] = mapped_column(BigInteger)
    rows_updated: Mapped[int] = mapped_column(BigInteger)
    rows_deleted: Mapped[int] = mapped_column(BigInteger)
    rows_skipped: Mapped[int] = mapped_column(BigInteger)
    applied_at: Mapped[datetime | None] = mapped_column(DateTime())
    invocation_id: Mapped[str | None] = mapped_column(String(64))
    recorded_by: Mapped[str | None] = mapped_column(String(36))
