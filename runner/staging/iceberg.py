"""Staging on Spark destinations: an Iceberg table per entity, plus the staged-files manifest.

A retry first deletes the Files' earlier rows (a no-op on the normal path), then appends the
new ones, so a File's rows are never duplicated. The manifest row is written last: the apply
only reads Files listed there, so it never sees a File whose rows are half written.
The table is not partitioned by File: a thousand small Files would mean a thousand folders
and data files per write (measured: minutes, and a Hadoop chmod per folder).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from runner.errors import IntegrityError
from runner.lineage import lineage_columns, state_tables
from runner.staging.spark import StagedBatch, StagingWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_HEX = re.compile(r"^[0-9a-f]{64}$")


def quote(*parts: str) -> str:
    return ".".join(f"`{p}`" for p in parts)


class IcebergWriter(StagingWriter):
    def __init__(self, table_format: str = "iceberg") -> None:
        self.table_format = table_format

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:
        entity, out = batch.entity, batch.rows
        lineage = lineage_columns()
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{entity.staging_schema}`")
        table = quote(entity.staging_schema, entity.staging_table)
        if not spark.catalog.tableExists(f"{entity.staging_schema}.{entity.staging_table}"):
            out.limit(0).writeTo(table).using(self.table_format).create()
        hashes = ", ".join(f"'{f.content_hash}'" for f in batch.files if _HEX.match(f.content_hash))
        if hashes:
            spark.sql(f"DELETE FROM {table} WHERE `{lineage['file_hash']}` IN ({hashes})")
        expected = sum(batch.counts.get(f.content_hash, 0) for f in batch.files)
        before = self._last_snapshot(spark, table)
        out.writeTo(table).append()
        after = self._last_snapshot(spark, table)
        if expected and after == before:
            raise IntegrityError(f"appending {expected} rows to {table} committed nothing")
        if after is not None and after != before and int(after[1]) != expected:
            raise IntegrityError(
                f"{table}: the append committed {after[1]} rows, {expected} were staged"
            )
        self._manifest(spark, batch)

    @staticmethod
    def _last_snapshot(spark: SparkSession, table: str) -> tuple[int, str] | None:
        """(snapshot id, rows it added) of the table's newest Iceberg snapshot."""
        row = spark.sql(
            f"SELECT snapshot_id, summary['added-records'] AS added FROM {table}.snapshots "
            "ORDER BY committed_at DESC LIMIT 1"
        ).first()
        return (int(row["snapshot_id"]), str(row["added"] or 0)) if row else None

    def _manifest(self, spark: SparkSession, batch: StagedBatch) -> None:
        entity = batch.entity
        spec = state_tables()["staged_files"]
        cols = spec["columns"]
        table = quote(entity.staging_schema, spec["identifier"])
        rows = [
            (
                entity.name,
                f.content_hash,
                f.path.name,
                batch.process_id,
                batch.counts.get(f.content_hash, 0),
                batch.staged_at,
            )
            for f in batch.files
        ]
        types = ["string", "string", "string", "string", "bigint", "timestamp"]
        new = spark.createDataFrame(
            rows, ", ".join(f"{c} {t}" for c, t in zip(cols, types, strict=True))
        )
        if not spark.catalog.tableExists(f"{entity.staging_schema}.{spec['identifier']}"):
            new.limit(0).writeTo(table).using(self.table_format).create()
        view = "__cdc_new_staged_files"
        new.createOrReplaceTempView(view)
        try:
            spark.sql(
                f"MERGE INTO {table} t USING {view} s "
                f"ON t.{cols[0]} = s.{cols[0]} AND t.{cols[1]} = s.{cols[1]} "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
        finally:
            spark.catalog.dropTempView(view)
