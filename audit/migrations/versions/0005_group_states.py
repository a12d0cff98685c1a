"""group_states: each transaction group's watermark, held and quarantined transactions, as the
run that applied the group last read them from its ledger.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "group_states",
        sa.Column("group_name", sa.String(128), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("recorded_by", sa.String(36), nullable=True),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("group_name", name="pk_group_states"),
    )


def downgrade() -> None:
    op.drop_table("group_states")
