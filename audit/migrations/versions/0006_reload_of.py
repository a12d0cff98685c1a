"""files.reload_of: a reload File rewritten at its path with bytes it held before is a new File
naming the earlier row with those bytes (meta.cdc.reloads).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    # ALTER TABLE is not covered by the engine's schema_translate_map: name the schema.
    config = op.get_context().config
    return config.attributes.get("schema") if config is not None else None


def upgrade() -> None:
    schema = _schema()
    if op.get_context().dialect.name == "sqlite":
        # SQLite adds a column with its reference in place (no copy of the table).
        op.execute(
            "ALTER TABLE files ADD COLUMN reload_of INTEGER "
            "CONSTRAINT fk_files_reload_of_files REFERENCES files (id)"
        )
        return
    op.add_column("files", sa.Column("reload_of", sa.BigInteger(), nullable=True), schema=schema)
    op.create_foreign_key(
        "fk_files_reload_of_files", "files", "files", ["reload_of"], ["id"],
        source_schema=schema, referent_schema=schema,
    )  # fmt: skip


def downgrade() -> None:
    with op.batch_alter_table("files", schema=_schema()) as batch:
        batch.drop_constraint("fk_files_reload_of_files", type_="foreignkey")
        batch.drop_column("reload_of")
