"""Alembic environment: always called with a live connection from audit.store.AuditDB."""

from alembic import context
from sqlalchemy import text

from audit.models import metadata
from audit.store import MIGRATION_LOCK

config = context.config
connection = config.attributes["connection"]
schema = config.attributes.get("schema")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table_schema=schema,
    render_as_batch=connection.dialect.name == "sqlite",
    # SQLite's DDL is transactional: one transaction for every step, begun IMMEDIATE (the
    # store's connections do), so a runner starting beside another that is migrating waits and
    # then finds the Audit DB current, instead of repeating a step the other just committed.
    transactional_ddl=True,
)

with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Two runners starting at once must not both create the tables.
        connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
    context.run_migrations()
