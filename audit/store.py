"""The Audit DB: one class, ``AuditDB``, made of its parts: Files and their states
(audit/files.py), runs (audit/runs.py), kept marker counts (audit/markers.py) and retention
(audit/retention.py); here its connection and its schema's migrations."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    String,
    Table,
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, ProgrammingError

from audit.files import Files
from audit.groups import Groups
from audit.records import (
    MARKER_COUNTS,
    AuditError,
    FileRecord,
    IllegalTransition,
    Recovery,
    Registration,
    process_alive,
    redact_url,
    utcnow,
)
from audit.retention import Retention
from audit.runs import Runs

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The newest migration's revision (tests/test_audit_states.py checks it is Alembic's head): a
# run compares the Audit DB's revision with it and imports Alembic only to migrate.
HEAD_REVISION = "0006"
# How long a SQLite Audit DB's writers wait for one another (busy timeout, WAL switch).
BUSY_SECONDS = 30
# The PostgreSQL advisory lock migrations hold (audit/migrations/env.py takes it too).
MIGRATION_LOCK = 7426193
# Alembic's record of the revision a database is at.
_alembic_version_t = Table("alembic_version", MetaData(), Column("version_num", String(32)))


def _set_wal(cur: Any) -> None:
    """Switch a new SQLite Audit DB to WAL. Runners opening it together can find it locked
    without SQLite's busy handler waiting for them (it does not, where waiting could deadlock):
    they retry for as long as the busy timeout."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_begin_immediate(engine: Engine) -> None:
    """Make every SQLite transaction take the write lock up front.

    With SQLite's default deferred transactions two writers that both read first deadlock and
    one gets SQLITE_BUSY at once, ignoring the busy timeout. BEGIN IMMEDIATE makes them queue.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let us issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")
        _set_wal(cur)
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class AuditDB(Files, Runs, Retention, Groups):
    """Library API of the Audit DB; the CLI and the stages call these methods."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        max_attempts: int = 3,
        lease_seconds: int = 60,
    ) -> None:
        self.url = url
        self.schema = schema
        self.max_attempts = max_attempts
        self.lease_seconds = lease_seconds
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": BUSY_SECONDS})
            _sqlite_begin_immediate(engine)
            if schema:
                raise AuditError("audit schema is only supported on PostgreSQL")
        elif self.dialect == "postgresql":
            engine = create_engine(url, pool_pre_ping=True)
        else:
            raise AuditError(
                f"unsupported Audit DB {redact_url(url)}: use sqlite:/// or postgresql://"
            )
        if schema:
            engine = engine.execution_options(schema_translate_map={None: schema})
        self.engine: Engine = engine

    def __repr__(self) -> str:
        return f"AuditDB({redact_url(self.url)!r}, schema={self.schema!r})"

    def dispose(self) -> None:
        self.engine.dispose()

    # -- schema -------------------------------------------------------------------------

    def _alembic_config(self, connection: Connection) -> Any:
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        cfg.attributes["connection"] = connection
        cfg.attributes["schema"] = self.schema
        return cfg

    def upgrade(self, revision: str = "head") -> None:
        """Create or migrate the Audit DB tables (Alembic)."""
        from alembic import command

        with self.engine.connect() as conn:
            if self.schema and self.dialect == "postgresql":
                # Two runners creating the schema at once would both insert it into the catalog.
                conn.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
                conn.commit()
            command.upgrade(self._alembic_config(conn), revision)
            conn.commit()

    def current_revision(self) -> str | None:
        """The revision the Audit DB is at, read from Alembic's version table without importing
        Alembic; None when it has no tables yet (or, with several, not one revision)."""
        with self.engine.connect() as conn:
            # Asked of the catalog first: a query of a missing table would be an ERROR in the
            # server's log for every new Audit DB.
            if not inspect(conn).has_table(_alembic_version_t.name, schema=self.schema):
                return None
            try:
                revisions = conn.execute(select(_alembic_version_t.c.version_num)).scalars().all()
            except (OperationalError, ProgrammingError):  # dropped since: a new database
                revisions = []
            conn.rollback()
        return str(revisions[0]) if len(revisions) == 1 else None

    def head_revision(self) -> str | None:
        from alembic.script import ScriptDirectory

        return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()

    def ensure_current(self) -> None:
        """Upgrade to the newest revision when behind; a no-op when current."""
        if self.current_revision() != HEAD_REVISION:
            self.upgrade()


@contextmanager
def open_audit_db(url: str, **kwargs: Any) -> Iterator[AuditDB]:
    db = AuditDB(url, **kwargs)
    try:
        yield db
    finally:
        db.dispose()


__all__ = [
    "AuditDB",
    "open_audit_db",
    "AuditError",
    "FileRecord",
    "HEAD_REVISION",
    "IllegalTransition",
    "MARKER_COUNTS",
    "MIGRATIONS_DIR",
    "Recovery",
    "Registration",
    "process_alive",
    "redact_url",
    "utcnow",
]
