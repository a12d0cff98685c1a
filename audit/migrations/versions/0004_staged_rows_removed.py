"""files.staged_removed_at: when `runner maintain` deleted a COMMITTED File's staged rows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    # ALTER TABLE is not covered by the engine's schema_translate_map: name the schema.
    config = op.get_context().config
    return config.attributes.get("schema") if config is not None else None


def upgrade() -> None:
    column = sa.Column("staged_removed_at", sa.DateTime(), nullable=True)
    op.add_column("files", column, schema=_schema())


def downgrade() -> None:
    with op.batch_alter_table("files", schema=_schema()) as batch:
        batch.drop_column("staged_removed_at")
