"""The Spark destination (the embedded default and any Spark cluster): an Iceberg table per
entity, plus the staged-files manifest, written through the runner's SparkSession.

A retry first deletes the Files' earlier rows (a no-op on the normal path), then appends the
new ones, so a File's rows are never duplicated. The manifest row is written last: the apply
only reads Files listed there, so it never sees a File whose rows are half written.
The table is not partitioned by File: a thousand small Files would mean a thousand folders
and data files per write (measured: minutes, and a Hadoop chmod per folder).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from runner.contract import contract, lineage_columns, state_table
from runner.destinations.base import (
    Destination,
    Restage,
    StagedBatch,
    StagingWriter,
    manifest_rows,
    staged_types,
)
from runner.destinations.spark.session import build_session
from runner.errors import ConfigError, IntegrityError, TransientError, disk_full
from runner.staging.schema import normal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from runner.entities import Entity


_HEX = re.compile(r"^[0-9a-f]{64}$")


# What Iceberg and Spark say when another writer got there first: a commit that lost the race,
# a table created since this writer looked, or (a copy-on-write table) a commit between the
# statement's planning and its runtime file filter.
_CONFLICT = re.compile(
    r"CommitFailedException|ValidationException|conflicting files|already exists"
    r"|concurrently modified",
    re.I,
)


# The state tables on Iceberg, as the package's cdc.state_table_properties() makes them: shared
# by every entity's runner and apply, so written merge-on-read (no copy-on-write runtime filter
# that fails when another writer committed between planning and writing), and a commit retried
# more often than Iceberg's default 4 times while other writers keep committing. They are also
# partitioned by their first key column (the target table; the manifest's entity): Iceberg's
# conflict check then looks only at what another apply added to the same target.
STATE_TABLE_PROPERTIES = {
    "write.delete.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "commit.retry.num-retries": "20",
}


def _create_unless_there(create: Callable[[], object]) -> bool:
    """Create a table that was missing a moment ago; another runner creating it at the same
    time is no error. Whether this call created it."""
    try:
        create()
    except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise several types for this
        if not _CREATED_MEANWHILE.search(str(exc)):
            raise
        return False
    return True


# What the catalog says when another runner created the table since this one looked: Spark's
# check, or (both past it) the JDBC catalog's insert of the table's row.
_CREATED_MEANWHILE = re.compile(
    r'already exists|violates unique constraint "iceberg_tables_pkey"', re.I
)


def _retry_on_conflict(write: Callable[[], object], attempts: int = 5) -> None:
    """Run an idempotent write again when a concurrent commit made it fail."""
    for attempt in range(1, attempts + 1):
        try:
            write()
            return
        except Exception as exc:  # noqa: BLE001 - py4j/pyspark raise several types for this
            if attempt == attempts or not _CONFLICT.search(str(exc)):
                raise
            time.sleep(0.2 * attempt)


def _ensure_namespace(spark: SparkSession, name: str) -> None:
    """CREATE DATABASE IF NOT EXISTS, where a runner creating it at the same time is no error
    (the catalog checks, then creates)."""
    _create_unless_there(lambda: spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}"))


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    """The columns of a table's partition spec, as `DESCRIBE TABLE` lists them after its
    "# Partition Information" line (identity partitions by name, others as transforms)."""
    rows = [str(r["col_name"]) for r in spark.sql(f"DESCRIBE TABLE {table}").collect()]
    if "# Partition Information" not in rows:
        return []
    after = rows[rows.index("# Partition Information") + 1 :]
    return [name for name in after if name and not name.startswith("#")]


def quote(*parts: str) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


# The apply's classification joins a day's keys with its target through those keys
# (macros/apply/steps/classify.sql: apply_dest_rows); Spark filters the target's scan by a
# bloom filter of them when the scan is over 32 MB (its default: 10 GB). As in
# profiles.example.yml, for profiles written before these settings were there.
APPLY_JOIN_DEFAULTS: dict[str, str] = {
    "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "32MB",
    "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "1GB",
}


class SparkDestination(Destination):
    """dbt-spark targets. The profile's ``server_side_parameters`` are THE Spark settings: the
    runner's session and a standalone ``dbt build`` read them from the same place (the
    runner's session adds ``APPLY_JOIN_DEFAULTS`` where the profile does not set them)."""

    reads_through_spark = True

    def spark_conf(self) -> dict[str, str]:
        from dbt.adapters.spark.connections import SparkCredentials

        project = self.project
        data = {k: v for k, v in project.target.items() if k not in ("type", "threads")}
        try:
            creds = SparkCredentials.from_dict(data)
        except Exception as exc:  # dbt's validation error names the bad field
            raise ConfigError(f"profile target {project.target_name!r}: {exc}") from exc
        return dict(creds.server_side_parameters)

    def spark_session(
        self, app_name: str = "cdc-runner", *, small_work: bool = False
    ) -> SparkSession:
        # enableHiveSupport(), like dbt-spark's session method, so that a dbt run in the same
        # process gets this very session back from getOrCreate().
        conf = {**APPLY_JOIN_DEFAULTS, **self.spark_conf()}  # the profile's settings win
        return build_session(self.project, conf, app_name, hive_support=True, small_work=small_work)

    def writer(self) -> StagingWriter:
        return SparkTableWriter("iceberg", state_schema=self.state_schema)

    def _session(self, spark: SparkSession | None) -> SparkSession:
        return spark if spark is not None else self.spark_session()

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        return spark_table_rows(self._session(spark), tables)

    def select_rows(
        self, schema: str, table: str, columns: list[str], spark: SparkSession | None = None
    ) -> list[dict[str, Any]] | None:
        return spark_select_rows(self._session(spark), [schema], table, columns)

    def delete_staged(
        self,
        entity: Entity,
        hashes: list[str],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
    ) -> int:
        return spark_delete_staged(
            self._session(spark), [entity.staging_schema, entity.staging_table], hashes, dry_run
        )

    def maintain_tables(
        self,
        tables: list[tuple[str, str]],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
        snapshot_days: float = 1.0,
    ) -> list[str]:
        session = self._session(spark)
        left = drop_left_scratch(session, "spark_catalog", tables, dry_run)
        if session.conf.get(f"spark.sql.catalog.{SCRATCH_CATALOG}", None):
            left += drop_left_scratch(session, SCRATCH_CATALOG, tables, dry_run)
        return left + iceberg_maintenance(session, "spark_catalog", tables, dry_run, snapshot_days)


# The catalog of the apply's scratch tables where the profile declares it (profiles.example.yml,
# macros/apply/sql_helpers.sql: scratch_catalog_name).
SCRATCH_CATALOG = "cdc_scratch"
# An apply's scratch table on Spark (macros/apply/sql_helpers.sql: spark__scratch_relation):
# `<model>__cdc_<step>_<16 hex digits of the build's dbt invocation id>`.
SCRATCH = re.compile(r"^(?P<model>.+)__cdc_(files|batch|truncate|dedupe)_[0-9a-f]{16}$")


def drop_left_scratch(
    spark: SparkSession,
    catalog: str,
    tables: list[tuple[str, str]],
    dry_run: bool,
    age_seconds: int = 86400,
) -> list[str]:
    """The scratch tables of ``tables``' apply models that stopped builds left (a build drops
    its own at its end): each one last written more than ``age_seconds`` ago (a day: no build
    runs that long), dropped with its files."""
    from pyspark.errors import AnalysisException

    said = []
    for schema in sorted({s for s, _ in tables}):
        models = {t for s, t in tables if s == schema}
        try:
            listed = spark.sql(f"SHOW TABLES IN {quote(catalog, schema)} LIKE '*__cdc_*'").collect()
        except AnalysisException:  # no such schema (no apply has made a table there yet)
            continue
        for row in listed:
            name = row["tableName"]
            found = SCRATCH.match(name)
            if not found or found.group("model") not in models:
                continue
            table = quote(catalog, schema, name)
            old = spark.sql(
                "SELECT coalesce(max(committed_at) < current_timestamp() - INTERVAL "
                f"{int(age_seconds)} SECONDS, true) FROM {table}.snapshots"
            ).first()
            if old is None or not old[0]:
                continue  # written lately: its build may still be running
            if not dry_run:
                spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
            would = "would be " if dry_run else ""
            where = f"{schema}.{name}"
            where = where if catalog == "spark_catalog" else f"{catalog}.{where}"
            said.append(f"{where}: scratch table of a stopped build {would}dropped")
    return said


def spark_delete_staged(
    spark: SparkSession, name: list[str], hashes: list[str], dry_run: bool
) -> int:
    """One DELETE of the rows of ``hashes`` (validated hex digests) from a staging table."""
    good = [h for h in hashes if _HEX.match(h)]
    if not good or not spark.catalog.tableExists(".".join(name)):
        return 0
    where = f"`{lineage_columns()['file_hash']}` IN ({', '.join(repr(h) for h in good)})"
    first = spark.sql(f"SELECT count(*) FROM {quote(*name)} WHERE {where}").first()
    rows = int(first[0]) if first is not None else 0
    if rows and not dry_run:
        spark.sql(f"DELETE FROM {quote(*name)} WHERE {where}")
    return rows


def _table_files(spark: SparkSession, table: str) -> tuple[int, int]:
    """(data and delete files, snapshots) of an Iceberg table's current state."""
    live = spark.sql(f"SELECT count(*) FROM {table}.files").first()
    snaps = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()
    return int(live[0]) if live else 0, int(snaps[0]) if snaps else 0


# Iceberg writes a metadata file per commit and keeps them all unless told otherwise: a table
# that commits every run would hold one per run forever (expiring snapshots does not remove them).
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
}


def _keep_few_metadata_files(spark: SparkSession, table: str) -> None:
    have = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    wanted = {k: v for k, v in METADATA_PROPERTIES.items() if have.get(k) != v}
    if wanted:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in wanted.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({pairs})")


def iceberg_maintenance(
    spark: SparkSession,
    catalog: str,
    tables: list[tuple[str, str]],
    dry_run: bool,
    snapshot_days: float,
) -> list[str]:
    """Iceberg's own upkeep of each table, with its stored procedures: small data files
    rewritten into fewer, and data files with deletes rewritten without them (position delete
    files left applying to no data file dropped), snapshots older than
    ``snapshot_days`` expired (the newest always kept), and files no snapshot references
    removed (Iceberg's default: older than 3 days, so a write in flight is never touched).
    From the first maintenance on, a table keeps its last 10 metadata files only."""
    said = []
    cutoff = datetime.now(UTC) - timedelta(days=snapshot_days)
    older = f"TIMESTAMP '{cutoff.strftime('%Y-%m-%d %H:%M:%S.%f')} UTC'"
    for schema, name in tables:
        if not spark.catalog.tableExists(f"{schema}.{name}"):
            continue
        table = quote(catalog, schema, name)
        before = _table_files(spark, table)
        if dry_run:
            said.append(f"{schema}.{name}: {before[0]} files, {before[1]} snapshots")
            continue
        _keep_few_metadata_files(spark, table)
        arg = f"table => '{schema}.{name}'"
        call = f"CALL {quote(catalog)}.system"
        # Also every data file with a delete file: the merge-on-read targets' deletes folded in.
        options = "map('min-input-files', '2', 'delete-file-threshold', '1')"
        spark.sql(f"{call}.rewrite_data_files({arg}, options => {options})")
        # Every delete file rewritten: those that apply to no data file any more are dropped.
        every = "options => map('rewrite-all', 'true')"
        spark.sql(f"{call}.rewrite_position_delete_files({arg}, {every})")
        spark.sql(f"{call}.expire_snapshots({arg}, older_than => {older}, retain_last => 1)")
        spark.sql(f"{call}.remove_orphan_files({arg})")
        after = _table_files(spark, table)
        said.append(
            f"{schema}.{name}: files {before[0]} -> {after[0]}, snapshots {before[1]} -> {after[1]}"
        )
    return said


def spark_select_rows(
    spark: SparkSession, namespace: list[str], table: str, columns: list[str]
) -> list[dict[str, Any]] | None:
    if not spark.catalog.tableExists(".".join([*namespace, table])):
        return None
    cols = ", ".join(quote(c) for c in columns)
    return [
        r.asDict() for r in spark.sql(f"select {cols} from {quote(*namespace, table)}").collect()
    ]


def spark_table_rows(spark: SparkSession, tables: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tables:
        first = spark.sql(f"select count(*) from {quote(*t.split('.'))}").first()
        out[t] = int(first[0]) if first is not None else 0
    return out


class SparkTableWriter(StagingWriter):
    """Staging tables in the session's catalog, as ``table_format`` (iceberg, delta)."""

    def __init__(
        self, table_format: str = "iceberg", catalog: str | None = None, *, state_schema: str
    ) -> None:
        self.table_format = table_format
        self.catalog = catalog
        self.state_schema = state_schema
        self._state_tables_made = False

    def _name(self, *parts: str) -> tuple[str, str]:
        """(quoted name for SQL, plain name for the catalog API)."""
        full = [self.catalog, *parts] if self.catalog else list(parts)
        return quote(*full), ".".join(full)

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:
        try:
            self._write(spark, batch)
        except Exception as exc:
            full = disk_full(exc, where=self._location(spark, batch.entity))
            if full:  # said with the table's folder: the disk under it is the one to free
                raise TransientError(full) from exc
            raise

    def _location(self, spark: SparkSession, entity: Entity) -> str | None:
        """Where the entity's staging table keeps its files, if the catalog can say."""
        table = self._name(entity.staging_schema, entity.staging_table)[0]
        try:
            rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
        except Exception:  # noqa: BLE001 - no table yet, or the catalog cannot say
            return None
        found = next((r["data_type"] for r in rows if r["col_name"] == "Location"), None)
        return str(found).removeprefix("file:") if found else None

    def _write(self, spark: SparkSession, batch: StagedBatch) -> None:
        entity, out = batch.entity, batch.rows
        lineage = lineage_columns()
        _ensure_namespace(spark, self._name(entity.staging_schema)[0])
        table, plain = self._name(entity.staging_schema, entity.staging_table)
        # From the entity's types when rows are observed while written: a query of the rows
        # before the append (even an empty one) would take the observation.
        make = (
            partial(self._create_empty, spark, table, entity)
            if batch.appended is not None
            else out.limit(0).writeTo(table).using(self.table_format).create
        )
        created = not spark.catalog.tableExists(plain) and _create_unless_there(make)
        hashes = ", ".join(f"'{f.content_hash}'" for f in batch.files if _HEX.match(f.content_hash))
        delete = f"DELETE FROM {table} WHERE `{lineage['file_hash']}` IN ({hashes})"
        if not created:
            self._evolve(spark, table, plain, entity)
        if hashes and not created:  # a new table holds no earlier rows
            spark.sql(delete)
        before = self._last_commit(spark, table)
        out.writeTo(table).append()
        after = self._last_commit(spark, table)
        if batch.appended is not None:
            try:
                batch.appended(self._appended(spark, plain, before, after))
            except Restage:
                if hashes:
                    spark.sql(delete)  # what the append committed
                raise
        expected = sum(batch.counts.get(f.content_hash, 0) for f in batch.files)
        if expected and after == before:
            raise IntegrityError(f"appending {expected} rows to {table} committed nothing")
        if after is not None and after != before and int(after[1]) != expected:
            raise IntegrityError(
                f"{table}: the append committed {after[1]} rows, {expected} were staged"
            )
        self._manifest(spark, batch)

    @property
    def reads_back(self) -> bool:
        return self.table_format == "iceberg"

    @staticmethod
    def _appended(
        spark: SparkSession,
        plain: str,
        before: tuple[int, str] | None,
        after: tuple[int, str] | None,
    ) -> DataFrame:
        """The rows one append committed: the data files of the snapshots after ``before`` up
        to ``after`` (Iceberg's incremental read), none when it committed nothing."""
        if after is None or after == before:
            return spark.table(plain).limit(0)
        if before is None:  # the table's first snapshot: all of it
            return spark.read.option("snapshot-id", str(after[0])).table(plain)
        return (
            spark.read.option("start-snapshot-id", str(before[0]))
            .option("end-snapshot-id", str(after[0]))
            .table(plain)
        )

    def table_columns(self, spark: SparkSession, entity: Entity) -> dict[str, str] | None:
        plain = self._name(entity.staging_schema, entity.staging_table)[1]
        if not spark.catalog.tableExists(plain):
            return None
        return {f.name: f.dataType.simpleString() for f in spark.table(plain).schema.fields}

    def stored_type(self, spark_type: str) -> str:
        # As staging writes them: char(n) and varchar(n) values are Spark strings.
        return re.sub(r"^(var)?char\(\d+\)$", "string", normal(spark_type))

    def _evolve(self, spark: SparkSession, table: str, plain: str, entity: Entity) -> None:
        """The columns the batch adds, then the declared types that widen, in place."""
        have = {f.name: f.dataType.simpleString() for f in spark.table(plain).schema.fields}
        add, widen = self.evolution(have, entity)
        if add:
            spec = ", ".join(f"{quote(c)} {self.stored_type(t)}" for c, t in add)
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({spec})")
        for c, t in widen:
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quote(c)} TYPE {self.stored_type(t)}")

    def ensure_table(self, spark: SparkSession, entity: Entity) -> None:
        table, plain = self._name(entity.staging_schema, entity.staging_table)
        if spark.catalog.tableExists(plain):
            return
        _ensure_namespace(spark, self._name(entity.staging_schema)[0])
        _create_unless_there(partial(self._create_empty, spark, table, entity))

    def _create_empty(self, spark: SparkSession, table: str, entity: Entity) -> None:
        """Create the entity's staging table from its declared types, empty."""
        # As staging writes them: char(n) and varchar(n) values are Spark strings.
        types = {
            c: re.sub(r"^(var)?char\(\d+\)$", "string", t) for c, t in staged_types(entity).items()
        }
        schema = ", ".join(f"`{c}` {t}" for c, t in types.items())
        spark.createDataFrame([], schema).writeTo(table).using(self.table_format).create()

    def _last_commit(self, spark: SparkSession, table: str) -> tuple[int, str] | None:
        """(commit id, rows it added) of the table's newest commit."""
        if self.table_format == "delta":
            # Not run here: no Delta jars offline (docs/destinations.md, "Verified where").
            row = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()
            if row is None:
                return None
            metrics = row["operationMetrics"] or {}
            return int(row["version"]), str(metrics.get("numOutputRows", 0))
        return self._last_snapshot(spark, table)

    @staticmethod
    def _last_snapshot(spark: SparkSession, table: str) -> tuple[int, str] | None:
        """(snapshot id, rows it added) of the table's newest Iceberg snapshot."""
        row = spark.sql(
            f"SELECT snapshot_id, summary['added-records'] AS added FROM {table}.snapshots "
            "ORDER BY committed_at DESC LIMIT 1"
        ).first()
        return (int(row["snapshot_id"]), str(row["added"] or 0)) if row else None

    def _state_tables(self, spark: SparkSession) -> None:
        """Every state table that is missing, made as the package makes it. Here, before dbt
        runs, because the models of one build apply at once (threads) and would otherwise
        all find the markers table missing and create it together."""
        if self._state_tables_made:
            return
        _ensure_namespace(spark, self._name(self.state_schema)[0])
        for spec in contract().state_tables.values():
            table, plain = self._name(self.state_schema, spec.identifier)
            if spark.catalog.tableExists(plain):
                if self.table_format == "iceberg":
                    self._partition_state_table(spark, table, spec.key[0])
                continue
            # DDL, not an empty DataFrame's CTAS: creating a table runs no Spark job
            columns = ", ".join(f"`{c}` {kind}" for c, kind in spec.columns.items())
            ddl = f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING {self.table_format}"
            if self.table_format == "iceberg":
                props = ", ".join(f"'{k}' = '{v}'" for k, v in STATE_TABLE_PROPERTIES.items())
                ddl += f" PARTITIONED BY (`{spec.key[0]}`) TBLPROPERTIES ({props})"
            _create_unless_there(partial(spark.sql, ddl))
        self._state_tables_made = True

    @staticmethod
    def _partition_state_table(spark: SparkSession, table: str, column: str) -> None:
        """A state table made unpartitioned (by an earlier version) gains its partition field,
        as a new one is made: otherwise the applies of two targets at once conflict on it."""
        if partition_columns(spark, table):
            return
        try:
            spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD `{column}`")
        except Exception:  # noqa: BLE001 - another runner may have added it meanwhile
            if not partition_columns(spark, table):
                raise

    def _manifest(self, spark: SparkSession, batch: StagedBatch) -> None:
        spec = state_table("staged_files")
        cols = list(spec.columns)
        self._state_tables(spark)
        table, plain = self._name(self.state_schema, spec.identifier)
        rows = [tuple(r[c] for c in cols) for r in manifest_rows(batch)]
        new = spark.createDataFrame(rows, ", ".join(f"`{c}` {spec.columns[c]}" for c in cols))
        # a table made by an earlier version gains the columns appended since
        have = {c.lower() for c in spark.table(plain).columns}
        missing = [c for c in cols if c.lower() not in have]
        if missing:
            added = ", ".join(f"`{c}` {spec.columns[c]}" for c in missing)
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({added})")
        view = "__cdc_new_staged_files"
        new.createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in spec.key)
        try:
            # Runners of other entities write this table too: a MERGE that lost the race to
            # commit is run again (it is an upsert by key, so running it twice is harmless).
            _retry_on_conflict(
                lambda: spark.sql(
                    f"MERGE INTO {table} t USING {view} s ON {on} "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                )
            )
        finally:
            spark.catalog.dropTempView(view)
