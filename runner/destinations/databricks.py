"""The Databricks destination: staging tables written through the SparkSession the runner is
given, Delta by default, named ``catalog.schema.table`` (Unity Catalog).

Which session: the active one (a Databricks job or notebook, where the runner is called as a
library or `runner` runs on the driver), else Databricks Connect when it is installed
(``DatabricksSession``, configured by its own environment: DATABRICKS_HOST, a profile, ...),
else a local session from runner.yml (``staging_spark_conf`` and the target's ``spark_conf``):
the stand-in the tests use here, where Delta cannot be had offline and Iceberg takes its place
(``targets.<target>.table_format: iceberg``). Rows name their File through
``_metadata.file_path``: ``input_file_name()`` is not available on Unity Catalog.

dbt-databricks applies the staged rows with the package's ``databricks__`` macros, whose SQL
runs here on local Spark + Iceberg (tests/test_render.py); it has never run on Databricks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from runner.destinations.base import Destination, StagingWriter
from runner.destinations.spark.destination import (
    SparkTableWriter,
    spark_delete_staged,
    spark_select_rows,
    spark_table_rows,
)
from runner.project import validate_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from runner.entities import Entity


class DatabricksDestination(Destination):
    file_identity: ClassVar[str] = "metadata"
    spools_remote_files: ClassVar[bool] = False  # its cluster reads the URIs itself
    reads_through_spark = True

    @property
    def catalog(self) -> str | None:
        value = self.project.target.get("catalog")
        return validate_identifier(str(value), "databricks catalog") if value else None

    @property
    def table_format(self) -> str:
        value = str(self.project.target_setting("table_format") or "delta")
        return validate_identifier(value, "table_format")

    def spark_session(
        self, app_name: str = "cdc-runner", *, small_work: bool = False
    ) -> SparkSession:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        try:
            from databricks.connect import DatabricksSession
        except ImportError:
            return super().spark_session(app_name, small_work=small_work)
        session: SparkSession = DatabricksSession.builder.getOrCreate()
        return session

    def writer(self) -> StagingWriter:
        return SparkTableWriter(
            self.table_format, catalog=self.catalog, state_schema=self.state_schema
        )

    def select_rows(
        self, schema: str, table: str, columns: list[str], spark: SparkSession | None = None
    ) -> list[dict[str, Any]] | None:
        namespace = [self.catalog, schema] if self.catalog else [schema]
        return spark_select_rows(spark or self.spark_session(), namespace, table, columns)

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        prefix = f"{self.catalog}." if self.catalog else ""
        counts = spark_table_rows(spark or self.spark_session(), [prefix + t for t in tables])
        return {t: counts[prefix + t] for t in tables}

    def delete_staged(
        self,
        entity: Entity,
        hashes: list[str],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
    ) -> int:
        name = [entity.staging_schema, entity.staging_table]
        name = [self.catalog, *name] if self.catalog else name
        return spark_delete_staged(spark or self.spark_session(), name, hashes, dry_run)
