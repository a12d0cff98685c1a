"""Alembic environment: always called with a live connection from audit.store.AuditDB."""

from alembic import context
from sqlalchemy import text

from audit.models import metadata

config = context.config
connection = config.attributes["connection"]
schema = config.attributes.get("schema")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table_schema=schema,
    render_as_batch=connection.dialect.name == "sqlite",
)

with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Two runners starting at once must not both create the tables.
        connection.execute(text("SELECT pg_advisory_xact_lock(7426193)"))
    context.run_migrations()
