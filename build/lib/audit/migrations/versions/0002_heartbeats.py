"""Heartbeats and lapses: a run's last sign of life, and a File's unpinned lost attempts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    # ALTER TABLE is not covered by the engine's schema_translate_map: name the schema.
    config = op.get_context().config
    return config.attributes.get("schema") if config is not None else None


def upgrade() -> None:
    schema = _schema()
    op.add_column("runs", sa.Column("heartbeat_at", sa.DateTime(), nullable=True), schema=schema)
    op.add_column(
        "files",
        sa.Column("lapses", sa.Integer(), server_default="0", nullable=False),
        schema=schema,
    )


def downgrade() -> None:
    schema = _schema()
    with op.batch_alter_table("files", schema=schema) as batch:
        batch.drop_column("lapses")
    with op.batch_alter_table("runs", schema=schema) as batch:
        batch.drop_column("heartbeat_at")
