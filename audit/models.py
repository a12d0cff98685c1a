"""Audit DB tables: runs, Files and the history of every File state change.

All times are naive UTC. The Audit DB is the control plane (ADR-0004): it never lives in the
destination, and it must never lose track of a File.
"""

from __future__ import annotations

import enum

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)


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

# SQLAlchemy Core tables (no ORM: a run with nothing new imports as little as it can).

# One runner invocation; its process_id goes into every row it stages.
runs = Table(
    "runs",
    metadata,
    Column("process_id", String(36), primary_key=True),
    Column("command", String(64), nullable=False),
    Column("target", String(128)),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", DateTime(), nullable=False),
    Column("ended_at", DateTime()),
    # running, ok, failed (finished with failed or quarantined Files), error, aborted (the
    # process died without ending its run; closed by a later run)
    Column("outcome", String(16), nullable=False, server_default="running"),
    Column("detail", Text),
    # Renewed by the run's heartbeat thread while it works; a stale one means the run died.
    Column("heartbeat_at", DateTime()),
)

# One landed File, identified by (entity, content hash). A byte-identical copy seen under
# another path is kept as its own row in state DUPLICATE pointing at the original, so operators
# see every path that was landed. A reload File rewritten at its path with bytes it held before
# (meta.cdc.reloads) is a new File: its content_hash is the sighting's identity (the bytes' hash,
# the path and the new modification time hashed together) and reload_of names the row at that
# path whose content_hash is the bytes' hash.
files = Table(
    "files",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("entity", String(128), nullable=False),
    Column("path", String(2048), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("mtime", DateTime(), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    # Claims of this File, less those lost in a crash that cannot be pinned on it (FAILED once
    # a failure pinned on it happens at audit.max_attempts).
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Claims lost with other Files in flight (a crash that cannot be pinned on this File): such
    # a File is staged alone next time, so that a crash it causes is pinned on it.
    Column("lapses", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", DateTime()),
    Column("registered_by", ForeignKey("runs.process_id"), nullable=False),
    Column("staged_by", ForeignKey("runs.process_id")),
    Column("duplicate_of", ForeignKey("files.id")),
    Column("reload_of", ForeignKey("files.id")),
    Column("created_at", DateTime(), nullable=False),
    Column("updated_at", DateTime(), nullable=False),
    Column("staged_at", DateTime()),
    Column("committed_at", DateTime()),
    # When `runner maintain` deleted this COMMITTED File's rows from the staging table.
    Column("staged_removed_at", DateTime()),
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

# Every state change of every File, written in the same transaction as the change.
file_events = Table(
    "file_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("file_id", ForeignKey("files.id"), nullable=False, index=True),
    Column("from_state", String(16)),
    Column("to_state", String(16), nullable=False),
    Column("at", DateTime(), nullable=False),
    Column("process_id", String(36)),
    Column("detail", Text),
)

# The counts of a File's Applied File Marker in one target table, copied from the destination
# when reconcile commits the File (`runner status`, the run summary).
file_markers = Table(
    "file_markers",
    metadata,
    Column("file_id", BigId, ForeignKey("files.id"), primary_key=True),
    Column("target_table", String(512), primary_key=True),
    Column("rows_inserted", BigInteger, nullable=False),
    Column("rows_updated", BigInteger, nullable=False),
    Column("rows_deleted", BigInteger, nullable=False),
    Column("rows_skipped", BigInteger, nullable=False),
    Column("applied_at", DateTime()),
    Column("invocation_id", String(64)),
    Column("recorded_by", String(36)),
)


# Each transaction group's state as the last run that applied it read it from its ledger (in the
# destination): `runner status` shows it without reaching the destination.
group_states = Table(
    "group_states",
    metadata,
    Column("group_name", String(128), primary_key=True),
    Column("state", Text, nullable=False),  # JSON: runner.transactions.GroupStatus.as_json()
    Column("recorded_by", String(36)),
    Column("recorded_at", DateTime(), nullable=False),
)
