"""What the runner needs of a destination, and the shapes staging hands to it.

One subclass of ``Destination`` per dbt adapter type (``runner/destinations/<type>.py``), found
by ``destination_for``: the Python side's ``adapter.dispatch``. Nothing outside this package
branches on the target type.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from runner.fs import FilePath

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from runner.entities import Entity
    from runner.project import Project


@dataclass(frozen=True)
class FileToStage:
    file_id: int
    path: FilePath  # a local path, or a RemoteFile URI
    content_hash: str


@dataclass(frozen=True)
class StagedBatch:
    """An entity's validated rows of ``files``, ready to be written to the destination."""

    entity: Entity
    rows: DataFrame
    files: list[FileToStage]
    counts: dict[str, int]  # content hash -> rows
    process_id: str
    staged_at: datetime


class StagingWriter:
    """Writes a batch to the destination: the Files' rows (replacing their earlier rows, so a
    retried File is never duplicated), then their staged-files manifest rows."""

    # Characters the destination cannot store in a string: a value holding one is bad input.
    forbidden_characters: ClassVar[dict[str, str]] = {}

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:  # pragma: no cover
        raise NotImplementedError


class Destination:
    """A dbt target's destination, as the runner sees it."""

    #: How staging learns which File a row came from: ``input_file_name()`` or, where that is
    #: unavailable (Databricks Unity Catalog), the ``_metadata.file_path`` column.
    file_identity: ClassVar[str] = "input_file_name"

    def __init__(self, project: Project) -> None:
        self.project = project

    @property
    def schema(self) -> str:
        """The target's schema (dataset on BigQuery): where dbt keeps the state tables."""
        return str(self.project.target_context.get("schema", ""))

    # --- Spark, which stages every destination's Files -----------------------------------
    def spark_conf(self) -> dict[str, str]:
        """Spark settings for staging: defaults, then runner.yml's ``staging_spark_conf``, then
        its ``targets.<target>.spark_conf``."""
        from runner.spark_session import DEFAULT_STAGING_CONF

        conf = dict(DEFAULT_STAGING_CONF)
        conf.update(self.project.settings.staging_spark_conf)
        extra = self.project.target_setting("spark_conf") or {}
        conf.update({str(k): str(v) for k, v in dict(extra).items()})
        return conf

    def spark_session(self, app_name: str = "cdc-runner") -> SparkSession:
        from runner.spark_session import build_session

        return build_session(self.project, self.spark_conf(), app_name, hive_support=False)

    # --- staging --------------------------------------------------------------------------
    def writer(self) -> StagingWriter:  # pragma: no cover
        raise NotImplementedError

    # --- reading back what dbt wrote ------------------------------------------------------
    def applied_markers(self, spark: SparkSession | None = None) -> list[tuple[str, str]]:
        """(content hash, target table) of every Applied File Marker; [] before the first
        apply."""
        raise NotImplementedError  # pragma: no cover

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        """Row counts of ``schema.table`` relations, for the run summary."""
        raise NotImplementedError  # pragma: no cover

    # --- the Audit DB ---------------------------------------------------------------------
    def default_audit(self) -> tuple[str, str | None]:
        """Where this target's Audit DB lives when nothing else says: a SQLite file under the
        project's state folder, one per target."""
        path = self.project.state_dir / self.project.target_name / "audit.db"
        return f"sqlite:///{path}", None

    def scratch_dir(self) -> Path:
        """A local folder for files on their way to the destination (created on demand)."""
        return self.project.state_dir / self.project.target_name / "scratch"
