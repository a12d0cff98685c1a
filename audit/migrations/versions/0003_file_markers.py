"""file_markers: each committed File's marker counts per target table, copied at reconcile.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "file_markers",
        sa.Column("file_id", BigId, nullable=False),
        sa.Column("target_table", sa.String(512), nullable=False),
        sa.Column("rows_inserted", sa.BigInteger(), nullable=False),
        sa.Column("rows_updated", sa.BigInteger(), nullable=False),
        sa.Column("rows_deleted", sa.BigInteger(), nullable=False),
        sa.Column("rows_skipped", sa.BigInteger(), nullable=False),
        sa.Column("applied_at", sa.DateTime(), nullable=True),
        sa.Column("invocation_id", sa.String(64), nullable=True),
        sa.Column("recorded_by", sa.String(36), nullable=True),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], name="fk_file_markers_file_id_files"),
        sa.PrimaryKeyConstraint("file_id", "target_table", name="pk_file_markers"),
    )


def downgrade() -> None:
    op.drop_table("file_markers")
