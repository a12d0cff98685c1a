"""What the runner needs of a destination, and the shapes staging hands to it.

One subclass of ``Destination`` per dbt adapter type (``runner/destinations/<type>.py``), found
by ``destination_for``: the Python side's ``adapter.dispatch``. Nothing outside this package
branches on the target type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from runner.contract import lineage_on, state_table
from runner.destinations.spark.session import (
    DEFAULT_STAGING_CONF,
    build_session,
    runs_in_process,
)
from runner.errors import ConfigError
from runner.fs import FilePath
from runner.staging.schema import added_columns, declared_vs_table, normal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from runner.entities import Entity
    from runner.project import Project


@dataclass(frozen=True)
class FileToStage:
    file_id: int
    path: FilePath  # a local path, or a RemoteFile URI: the File's name and identity
    content_hash: str
    local: Path | None = None  # a remote File's copy in the spool (runner/spool.py), if any

    @property
    def source(self) -> FilePath:
        """Where its bytes are read from: the spool's copy, else the File itself."""
        return self.local if self.local is not None else self.path


@dataclass(frozen=True)
class StagedBatch:
    """An entity's validated rows of ``files``, ready to be written to the destination."""

    entity: Entity
    rows: DataFrame
    files: list[FileToStage]
    counts: dict[str, int]  # content hash -> rows
    process_id: str
    staged_at: datetime
    effective_dates: dict[str, date] = field(default_factory=dict)  # snapshot: hash -> date
    # Staged in one pass (writer.reads_back): called with the rows the append committed, before
    # the manifest; it fills ``counts`` from them, or raises Restage (the writer then deletes
    # what it appended, and staging checks the Files first, in two passes).
    appended: Callable[[DataFrame], None] | None = None


class Restage(Exception):  # noqa: N818 - a signal, not an error
    """A batch staged in one pass holds a bad row, a duplicate or a conflict: its rows are
    removed and its Files staged again the way that finds and names them."""


def staged_types(entity: Entity) -> dict[str, str]:
    """Every column of a staged row -> its Spark SQL type, in order: the entity's declared
    columns, then the contract's staged lineage columns (a destination maps these types)."""
    out = {c.name: c.data_type for c in entity.columns}
    for col in lineage_on("staged", entity.mode):
        out[col.name] = entity.sequence_type if col.type == "sequence" else col.type
    return out


def manifest_rows(batch: StagedBatch) -> list[dict[str, Any]]:
    """The staged-files manifest rows of a batch, one per File, keyed by the contract's columns
    (``cdc_staged_files``) in their order."""
    spec = state_table("staged_files")
    out = []
    for f in batch.files:
        values = {
            "entity": batch.entity.name,
            "file_hash": f.content_hash,
            "file_name": f.path.name,
            "process_id": batch.process_id,
            "staged_rows": batch.counts.get(f.content_hash, 0),
            "staged_at": batch.staged_at,
            "effective_date": batch.effective_dates.get(f.content_hash),
        }
        missing = [c for c in spec.columns if c not in values]
        if missing:
            raise ConfigError(
                f"contract.sql: {spec.identifier} has columns the runner cannot fill: {missing}"
            )
        out.append({c: values[c] for c in spec.columns})
    return out


class StagingWriter:
    """Writes a batch to the destination: the Files' rows (replacing their earlier rows, so a
    retried File is never duplicated), then their staged-files manifest rows."""

    # Characters the destination cannot store in a string: a value holding one is bad input.
    forbidden_characters: ClassVar[dict[str, str]] = {}

    @property
    def reads_back(self) -> bool:
        """Whether the writer can read back the rows one append committed (StagedBatch.appended):
        then staging checks what it wrote instead of reading the Files twice."""
        return False

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:  # pragma: no cover
        raise NotImplementedError

    def ensure_table(self, spark: SparkSession, entity: Entity) -> None:  # pragma: no cover
        """Create the entity's staging table, empty, when it is missing: so that `dbt build`
        works for an entity no File has arrived for yet."""
        raise NotImplementedError

    def table_columns(self, spark: SparkSession, entity: Entity) -> dict[str, str] | None:
        """The entity's staging table's columns, each with its type spelled as a Spark SQL
        type (see ``stored_type``); None when the table is missing."""
        return None

    def stored_type(self, spark_type: str) -> str:
        """A declared Spark SQL type as this destination stores it, spelled as
        ``table_columns`` spells the table's (so that the two compare)."""
        return normal(spark_type)

    def evolution(
        self, table: dict[str, str], entity: Entity
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """What writing a batch of ``entity`` changes in its staging table first: (columns to
        add, columns to widen), each (name, Spark SQL type). A change that is not a widening
        never gets here: staging quarantines the Files (runner/staging/schema.py)."""
        widen, _ = declared_vs_table(entity, table, self.stored_type)
        return added_columns(table, staged_types(entity)), widen


class Destination:
    """A dbt target's destination, as the runner sees it."""

    #: How staging learns which File a row came from: ``input_file_name()`` or, where that is
    #: unavailable (Databricks Unity Catalog), the ``_metadata.file_path`` column.
    file_identity: ClassVar[str] = "input_file_name"
    #: Whether markers, row counts and ledgers are read through the SparkSession.
    reads_through_spark: ClassVar[bool] = False

    def __init__(self, project: Project) -> None:
        self.project = project

    @property
    def schema(self) -> str:
        """The target's schema (dataset on BigQuery)."""
        return str(self.project.target_context.get("schema", ""))

    @property
    def state_schema(self) -> str:
        """Where the state tables live, for the runner and dbt alike (``Project.state_schema``)."""
        return self.project.state_schema

    def preflight(self) -> None:
        """Raise ConfigError, at once and in one line, when the destination plainly cannot be
        reached (before any File is claimed). Nothing to check by default."""

    # --- Spark, which stages every destination's Files -----------------------------------
    def spark_conf(self) -> dict[str, str]:
        """Spark settings for staging: defaults, then runner.yml's ``staging_spark_conf``, then
        its ``targets.<target>.spark_conf``."""
        conf = dict(DEFAULT_STAGING_CONF)
        conf.update(self.project.settings.staging_spark_conf)
        extra = self.project.target_setting("spark_conf") or {}
        conf.update({str(k): str(v) for k, v in dict(extra).items()})
        return conf

    def spark_session(
        self, app_name: str = "cdc-runner", *, small_work: bool = False
    ) -> SparkSession:
        """The SparkSession that stages (started, or the running one); ``small_work``: the
        project's Files are few bytes (``session.with_quick_jit``)."""
        return build_session(
            self.project, self.spark_conf(), app_name, hive_support=False, small_work=small_work
        )

    @property
    def spools_remote_files(self) -> bool:
        """Whether remote Files are staged from local copies (runner/spool.py): when the Spark
        that stages runs in this process (``spark.master`` local, pyspark's default), which
        has no connector for object storage. A cluster reads the URIs itself."""
        return runs_in_process(self.spark_conf())

    # --- staging --------------------------------------------------------------------------
    def writer(self) -> StagingWriter:  # pragma: no cover
        raise NotImplementedError

    # --- reading back what dbt wrote ------------------------------------------------------
    def markers(self, spark: SparkSession | None = None) -> list[dict[str, Any]]:
        """Every Applied File Marker, with the contract's cdc_applied_files columns (content
        hash, target table, row counts, when, by which dbt invocation); [] before the first
        apply."""
        spec = state_table("applied_files")
        rows = self.select_rows(self.state_schema, spec.identifier, list(spec.columns), spark)
        return rows or []

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        """Row counts of ``schema.table`` relations, for the run summary."""
        raise NotImplementedError  # pragma: no cover

    def select_rows(
        self, schema: str, table: str, columns: list[str], spark: SparkSession | None = None
    ) -> list[dict[str, Any]] | None:
        """``columns`` of every row of a table dbt built (a transaction ledger), or None when
        the table does not exist yet. Names are validated identifiers, quoted here."""
        raise NotImplementedError  # pragma: no cover

    # --- maintenance (`runner maintain`) --------------------------------------------------
    def delete_staged(
        self,
        entity: Entity,
        hashes: list[str],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
    ) -> int:
        """Delete the rows of these Files (content hashes) from the entity's staging table, in
        one statement; how many rows went (or would go, with ``dry_run``)."""
        raise NotImplementedError  # pragma: no cover

    def maintain_tables(
        self,
        tables: list[tuple[str, str]],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
        snapshot_days: float = 1.0,
    ) -> list[str]:
        """Compact and clean what the destination keeps of these ``(schema, table)`` tables
        (the missing ones are passed over); one line per table said. Nothing by default: a
        warehouse that manages its own storage (BigQuery)."""
        return []

    # --- the Audit DB ---------------------------------------------------------------------
    def default_audit(self) -> tuple[str, str | None]:
        """Where this target's Audit DB lives when nothing else says: a SQLite file under the
        project's state folder, one per target."""
        path = self.project.state_dir / self.project.target_name / "audit.db"
        return f"sqlite:///{path}", None

    def scratch_dir(self) -> Path:
        """A local folder for files on their way to the destination (created on demand)."""
        return self.project.state_dir / self.project.target_name / "scratch"
