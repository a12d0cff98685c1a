"""Runs, Files and File events.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATES = "'PENDING', 'PROCESSING', 'STAGED', 'COMMITTED', 'FAILED', 'QUARANTINED', 'DUPLICATE'"
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("process_id", sa.String(36), nullable=False),
        sa.Column("command", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("outcome", sa.String(16), server_default="running", nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("process_id", name="pk_runs"),
    )
    op.create_table(
        "files",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("entity", sa.String(128), nullable=False),
        sa.Column("path", sa.String(2048), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mtime", sa.DateTime(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("registered_by", sa.String(36), nullable=False),
        sa.Column("staged_by", sa.String(36), nullable=True),
        sa.Column("duplicate_of", BigId, nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("staged_at", sa.DateTime(), nullable=True),
        sa.Column("committed_at", sa.DateTime(), nullable=True),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_files_state_known"),
        sa.CheckConstraint(
            "(state = 'DUPLICATE') = (duplicate_of IS NOT NULL)",
            name="ck_files_duplicate_has_original",
        ),
        sa.CheckConstraint("attempts >= 0", name="ck_files_attempts_non_negative"),
        sa.ForeignKeyConstraint(
            ["registered_by"], ["runs.process_id"], name="fk_files_registered_by_runs"
        ),
        sa.ForeignKeyConstraint(["staged_by"], ["runs.process_id"], name="fk_files_staged_by_runs"),
        sa.ForeignKeyConstraint(["duplicate_of"], ["files.id"], name="fk_files_duplicate_of_files"),
        sa.PrimaryKeyConstraint("id", name="pk_files"),
    )
    op.create_index(
        "uq_files_entity_content_hash",
        "files",
        ["entity", "content_hash"],
        unique=True,
        sqlite_where=sa.text("duplicate_of IS NULL"),
        postgresql_where=sa.text("duplicate_of IS NULL"),
    )
    op.create_index(
        "uq_files_entity_path_content_hash",
        "files",
        ["entity", "path", "content_hash"],
        unique=True,
    )
    op.create_index("ix_files_state_entity", "files", ["state", "entity"])
    op.create_table(
        "file_events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("file_id", BigId, nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("process_id", sa.String(36), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], name="fk_file_events_file_id_files"),
        sa.PrimaryKeyConstraint("id", name="pk_file_events"),
    )
    op.create_index("ix_file_events_file_id", "file_events", ["file_id"])


def downgrade() -> None:
    op.drop_index("ix_file_events_file_id", table_name="file_events")
    op.drop_table("file_events")
    op.drop_index("ix_files_state_entity", table_name="files")
    op.drop_index("uq_files_entity_path_content_hash", table_name="files")
    op.drop_index("uq_files_entity_content_hash", table_name="files")
    op.drop_table("files")
    op.drop_table("runs")
