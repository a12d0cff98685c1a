"""One command's context, built once and passed down: the project and its target, the
target's destination, the Audit DB, and the SparkSession, started only when a step needs it.

The CLI builds one per command (``Invocation.load``); library callers and tests build one
from what they hold (``Invocation.of``). ``recorded_run`` records the command as a run in the
Audit DB, recovers what earlier runs left behind, and keeps the run alive while it works.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from audit import AuditDB
from runner.destinations import Destination, destination_for
from runner.destinations.spark.session import SMALL_WORK_BYTES
from runner.entities import Entity, load_entities
from runner.errors import ConfigError, error_line
from runner.heartbeat import Heartbeat
from runner.ids import new_process_id
from runner.project import Project, validate_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("runner")


def audit_location(
    project: Project,
    destination: Destination,
    url: str | None = None,
    schema: str | None = None,
) -> tuple[str, str | None]:
    """Which Audit DB this invocation uses, as (SQLAlchemy URL, PostgreSQL schema or None).

    In order: an explicit URL (``--audit-url`` or ``CDC_AUDIT_URL``); runner.yml's
    ``targets.<target>.audit_url``; the destination's default (for a postgres target, the same
    server in its own schema; otherwise a SQLite file under the state folder, one per target).
    """
    given = "--audit-schema"
    if schema and os.environ.get("CDC_AUDIT_SCHEMA") == schema:
        given = "CDC_AUDIT_SCHEMA, set in the environment"
    elif not schema and project.target_setting("audit_schema"):
        given = f"runner.yml's targets.{project.target_name}.audit_schema"
    schema = schema or project.target_setting("audit_schema")
    url = url or project.target_setting("audit_url")
    if url:
        url = os.path.expandvars(str(url))
    else:
        url, default_schema = destination.default_audit()
        schema = schema or default_schema
    if schema:
        validate_identifier(schema, "audit schema")
        if not url.startswith("postgresql"):
            raise ConfigError(
                f"an audit schema ({schema}, from {given}) can only be used with a PostgreSQL "
                f"Audit DB, not with the {project.target_name} target's: unset it, or use a "
                "postgres target"
            )
    return url, schema


@dataclass
class Invocation:
    project: Project
    destination: Destination
    audit_url: str
    audit_schema: str | None = None
    _db: AuditDB | None = field(default=None, repr=False)
    _spark: SparkSession | None = field(default=None, repr=False)
    _entities: dict[str, Entity] | None = field(default=None, repr=False)

    @classmethod
    def load(
        cls,
        project_dir: str | None = None,
        target: str | None = None,
        profiles_dir: str | None = None,
        audit_url: str | None = None,
        audit_schema: str | None = None,
    ) -> Invocation:
        project = Project.load(project_dir, target, profiles_dir)
        destination = destination_for(project)
        url, schema = audit_location(project, destination, audit_url, audit_schema)
        return cls(project, destination, url, schema)

    @classmethod
    def of(
        cls, project: Project, db: AuditDB | None = None, spark: SparkSession | None = None
    ) -> Invocation:
        """An invocation around what a caller already holds (a library caller, a test)."""
        destination = destination_for(project)
        if db is not None:
            return cls(project, destination, db.url, db.schema, _db=db, _spark=spark)
        url, schema = audit_location(project, destination)
        return cls(project, destination, url, schema, _spark=spark)

    @property
    def db(self) -> AuditDB:
        """The Audit DB, migrated to the newest revision (opened on first use)."""
        if self._db is None:
            settings = self.project.settings.audit
            db = AuditDB(
                self.audit_url,
                schema=self.audit_schema,
                max_attempts=settings.max_attempts,
                lease_seconds=settings.lease_seconds,
            )
            db.ensure_current()
            self._db = db
        return self._db

    @property
    def entities(self) -> dict[str, Entity]:
        """The project's declared entities by name (read on first use)."""
        if self._entities is None:
            self._entities = load_entities(self.project)
        return self._entities

    @property
    def spark(self) -> SparkSession:
        """The target's SparkSession (started on first use, or the running one)."""
        if self._spark is None:
            self._spark = self.destination.spark_session(small_work=self.small_work)
        return self._spark

    @property
    def small_work(self) -> bool:
        """Whether every File the Audit DB has registered (this run's too) adds up to at most
        ``SMALL_WORK_BYTES``: no job of this run can meet much data, and its JVM compiles for
        a short run (``session.with_quick_jit``). False where the command has not opened the
        Audit DB (`runner migrate-catalog`): it is not opened, let alone created, for this."""
        if self._db is None:
            return False
        return self._db.landed_bytes() <= SMALL_WORK_BYTES

    @property
    def reading_spark(self) -> SparkSession | None:
        """The SparkSession to read the destination with (markers, row counts, ledgers):
        this invocation's, started here if needed, where the destination reads through Spark;
        None where it reads with its own client (PostgreSQL, BigQuery)."""
        return self.spark if self.destination.reads_through_spark else None

    def close(self) -> None:
        if self._db is not None:
            self._db.dispose()
            self._db = None


@dataclass
class RecordedRun:
    """One command's run, recorded in the Audit DB: its invocation and process id."""

    inv: Invocation
    process_id: str
    outcome: str = "error"
    detail: str | None = None  # why it failed: the line the user saw (runs.detail)

    @property
    def db(self) -> AuditDB:
        return self.inv.db


@contextmanager
def recorded_run(inv: Invocation, command: str) -> Iterator[RecordedRun]:
    """Record a run in the Audit DB, keep it alive with a heartbeat while it works, and end it
    with the outcome the command set, whatever happens. Runs that died before are closed first
    and their Files given back (a crash is recovered by running the command again)."""
    if command in ("ingest", "run", "reconcile"):
        inv.destination.preflight()  # fail fast when the destination cannot answer
    db = inv.db
    run = RecordedRun(inv, new_process_id())
    db.start_run(run.process_id, command, inv.project.target_name)
    try:
        with Heartbeat(db, run.process_id):
            recovery = db.recover(run.process_id)
            for pid in recovery.aborted_runs:
                log.warning("run %s had stopped without ending; closed as aborted", pid)
            for rec in recovery.reclaimed:
                log.warning("%s: %s; back to %s", rec.path, rec.last_error, rec.state)
            yield run
    except KeyboardInterrupt:
        run.detail = run.detail or "stopped (Ctrl-C)"
        raise
    except Exception as exc:
        run.detail = run.detail or error_line(exc)
        raise
    finally:
        db.end_run(run.process_id, run.outcome, run.detail)
        inv.close()
