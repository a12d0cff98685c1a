"""The BigQuery destination: Spark validates and writes Parquet, BigQuery load jobs load it.

Idempotent per File (ADR-0004): the Files' earlier rows are deleted first (a retry), then each
Parquet part is loaded by a load job whose id is derived from the destination table, the
Files' content hashes and the attempt (the staging process id), so a client that resubmits a
job after a timeout does not load it twice, while a later attempt, which has just deleted the
rows, gets a job of its own (an id from the table and hashes alone would make BigQuery answer
409 and skip the reload). The rows are then counted per File against Spark's count, and only
then are the Files written to the staged-files manifest: the apply never sees a half-loaded
File. Credentials come from the dbt profile through dbt-bigquery's own client factory
(``method``, ``keyfile``, ``api_endpoint``, ``env_var``), never from code.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import socket
import tempfile
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from runner.contract import lineage_columns, state_table
from runner.destinations.base import (
    Destination,
    StagedBatch,
    StagingWriter,
    manifest_rows,
    staged_types,
)
from runner.errors import ConfigError, IntegrityError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from runner.entities import Entity

SIMPLE_TYPES = {
    "string": "STRING",
    "boolean": "BOOL",
    "tinyint": "INT64",
    "smallint": "INT64",
    "int": "INT64",
    "integer": "INT64",
    "bigint": "INT64",
    "float": "FLOAT64",
    "double": "FLOAT64",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP",
    "binary": "BYTES",
}


def bq_type(spark_type: str) -> tuple[str, int | None, int | None]:
    """(BigQuery type, precision, scale) for a declared Spark SQL type."""
    t = spark_type.strip().lower()
    if t in SIMPLE_TYPES:
        return SIMPLE_TYPES[t], None, None
    if re.fullmatch(r"(varchar|char)\(\s*\d+\s*\)", t):
        return "STRING", None, None
    m = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        numeric = scale <= 9 and precision - scale <= 29
        return ("NUMERIC" if numeric else "BIGNUMERIC"), precision, scale
    if t == "decimal":
        return "NUMERIC", 10, 0
    raise ConfigError(f"data_type {spark_type!r} has no BigQuery equivalent here")


def check_local_endpoint(target: dict[str, Any]) -> None:
    """A profile whose ``api_endpoint`` is on this machine (the local emulator) must answer:
    Google's client retries a refused connection for ten minutes, which looks like a hang."""

    endpoint = str(target.get("api_endpoint") or "")
    if not endpoint:
        return
    parts = urlsplit(endpoint)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=3).close()
    except OSError as exc:
        raise ConfigError(
            f"the BigQuery API at {endpoint} does not answer ({exc.strerror or exc}); "
            "start the local emulator with `make bq-up`, or point CDC_BQ_ENDPOINT at it"
        ) from exc


def bq_client(target: dict[str, Any]) -> Any:
    """A google-cloud-bigquery client from the dbt profile target, built by dbt-bigquery."""
    from dbt.adapters.bigquery.clients import create_bigquery_client
    from dbt.adapters.bigquery.credentials import BigQueryCredentials

    data = {k: v for k, v in target.items() if k not in ("type", "threads")}
    try:
        creds = BigQueryCredentials.from_dict(BigQueryCredentials.translate_aliases(data))
    except Exception as exc:  # dbt's validation error names the bad field
        raise ConfigError(f"bigquery profile target: {exc}") from exc
    return create_bigquery_client(creds)


def bq_name(*parts: str) -> str:
    """A quoted BigQuery path: `project`.`dataset`.`table`."""
    for p in parts:
        if "`" in p or "\\" in p:
            raise ConfigError(f"{p!r}: a BigQuery name may not hold a backquote or backslash")
    return ".".join(f"`{p}`" for p in parts)


class BigQueryDestination(Destination):
    """dbt-bigquery targets (a real BigQuery, or the local emulator the tests use)."""

    @property
    def gcp_project(self) -> str:
        value = self.project.target_context.get("database")
        if not value:
            raise ConfigError(f"profile target {self.project.target_name!r} has no project")
        return str(value)

    @cached_property
    def client(self) -> Any:
        """One client per destination (dbt-bigquery builds it from the profile)."""
        return bq_client(self.project.target)

    def preflight(self) -> None:
        check_local_endpoint(self.project.target)

    def writer(self) -> StagingWriter:
        return BigQueryWriter(self)

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r.values()) for r in self.client.query(sql).result()]

    def create_dataset(self, name: str) -> None:
        from google.cloud import bigquery

        dataset = bigquery.Dataset(f"{self.gcp_project}.{name}")
        location = self.project.target.get("location")
        if location:
            dataset.location = str(location)
        self.client.create_dataset(dataset, exists_ok=True)

    def _exists(self, dataset: str, table: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self.client.get_table(f"{self.gcp_project}.{dataset}.{table}")
        except NotFound:
            return False
        return True

    def select_rows(
        self, schema: str, table: str, columns: list[str], spark: SparkSession | None = None
    ) -> list[dict[str, Any]] | None:
        if not self._exists(schema, table):
            return None
        cols = ", ".join(bq_name(c) for c in columns)
        rows = self._rows(f"select {cols} from {bq_name(self.gcp_project, schema, table)}")
        return [dict(zip(columns, r, strict=True)) for r in rows]

    def delete_staged(
        self,
        entity: Entity,
        hashes: list[str],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
    ) -> int:
        from google.cloud import bigquery

        if not hashes or not self._exists(entity.staging_schema, entity.staging_table):
            return 0
        table = bq_name(self.gcp_project, entity.staging_schema, entity.staging_table)
        where = f"{bq_name(lineage_columns()['file_hash'])} in unnest(@hashes)"
        conf = bigquery.QueryJobConfig(
            query_parameters=[bigquery.ArrayQueryParameter("hashes", "STRING", hashes)]
        )
        if dry_run:
            sql = f"select count(*) from {table} where {where}"
            return int(next(iter(self.client.query(sql, job_config=conf).result()))[0])
        job = self.client.query(f"delete from {table} where {where}", job_config=conf)
        job.result()
        return int(job.num_dml_affected_rows or 0)

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in tables:
            dataset, table = t.split(".")
            name = bq_name(self.gcp_project, dataset, table)
            out[t] = int(self._rows(f"select count(*) from {name}")[0][0])
        return out


class BigQueryWriter(StagingWriter):
    def __init__(self, destination: BigQueryDestination) -> None:
        self.destination = destination

    def schema(self, batch: StagedBatch) -> list[Any]:
        return schema_fields(staged_types(batch.entity))

    def ensure_table(self, spark: SparkSession, entity: Entity) -> None:
        from google.cloud import bigquery

        dest = self.destination
        dest.create_dataset(entity.staging_schema)
        table_id = f"{dest.gcp_project}.{entity.staging_schema}.{entity.staging_table}"
        schema = schema_fields(staged_types(entity))
        dest.client.create_table(bigquery.Table(table_id, schema=schema), exists_ok=True)

    def table_columns(self, spark: SparkSession, entity: Entity) -> dict[str, str] | None:
        from google.api_core.exceptions import NotFound

        dest = self.destination
        table_id = f"{dest.gcp_project}.{entity.staging_schema}.{entity.staging_table}"
        try:
            return self._columns(table_id)
        except NotFound:
            return None

    def _columns(self, table_id: str) -> dict[str, str]:
        """The table's columns: named as a query reads them (a zero-row query, no bytes
        scanned), typed by the table's schema where it says more (a NUMERIC's precision)."""
        client = self.destination.client
        described = {f.name.lower(): spark_of_bq(f) for f in client.get_table(table_id).schema}
        project, dataset, table = table_id.split(".")
        read = client.query(f"select * from {bq_name(project, dataset, table)} where false")
        return {f.name: described.get(f.name.lower(), spark_of_bq(f)) for f in read.result().schema}

    def stored_type(self, spark_type: str) -> str:
        kind, precision, scale = bq_type(spark_type)
        return (
            _BQ_NAMES.get(kind, kind.lower())
            if precision is None
            else f"decimal({precision},{scale})"
        )

    def _evolve(self, table_id: str, table: str, entity: Entity) -> None:
        """The columns the batch adds (nullable), then the declared types that widen."""
        client = self.destination.client
        add, widen = self.evolution(self._columns(table_id), entity)
        for c, t in add:
            kind, precision, scale = bq_type(t)
            spelled = kind if precision is None else f"{kind}({precision}, {scale})"
            client.query(f"alter table {table} add column if not exists `{c}` {spelled}").result()
        for c, t in widen:
            kind, precision, scale = bq_type(t)
            spelled = kind if precision is None else f"{kind}({precision}, {scale})"
            client.query(f"alter table {table} alter column `{c}` set data type {spelled}").result()

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:
        entity = batch.entity
        columns = self._prepare(batch)
        scratch_root = self.destination.scratch_dir()
        scratch_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{entity.name}-", dir=scratch_root))
        # BigQuery reads Parquet timestamps as INT64 micros, not Spark's default INT96.
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        try:
            batch.rows.select(*columns).write.mode("overwrite").parquet(str(scratch / "rows"))
            parts = sorted((scratch / "rows").glob("part-*.parquet"))
            self._load(batch, parts, columns)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _prepare(self, batch: StagedBatch) -> list[str]:
        """The staging table made (or evolved) for the batch; its columns in the table's
        order, which a load's file follows."""
        from google.cloud import bigquery

        dest, entity = self.destination, batch.entity
        dest.create_dataset(entity.staging_schema)
        table_id = f"{dest.gcp_project}.{entity.staging_schema}.{entity.staging_table}"
        dest.client.create_table(
            bigquery.Table(table_id, schema=self.schema(batch)), exists_ok=True
        )
        self._evolve(table_id, bq_name(*table_id.split(".")), entity)
        staged = staged_types(entity)
        order = [c for c in self._columns(table_id) if c in staged]
        return order + [c for c in staged if c not in order]

    def _load(self, batch: StagedBatch, parts: list[Path], columns: list[str]) -> None:
        from google.api_core.exceptions import Conflict
        from google.cloud import bigquery

        dest = self.destination
        client = dest.client
        entity = batch.entity
        lineage = lineage_columns()
        project = dest.gcp_project
        location = dest.project.target.get("location")
        table_id = f"{project}.{entity.staging_schema}.{entity.staging_table}"
        types = staged_types(entity)
        schema = schema_fields({c: types[c] for c in columns})
        table = bq_name(project, entity.staging_schema, entity.staging_table)
        hashes = sorted(f.content_hash for f in batch.files)
        by_hash = [bigquery.ArrayQueryParameter("hashes", "STRING", hashes)]
        params = bigquery.QueryJobConfig(query_parameters=by_hash)
        client.query(
            f"delete from {table} where `{lineage['file_hash']}` in unnest(@hashes)",
            job_config=params,
        ).result()
        attempt = hashlib.sha256(
            "\n".join([table_id, batch.process_id, *hashes]).encode()
        ).hexdigest()[:40]
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.PARQUET,
            write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
            schema=schema,
        )
        for i, part in enumerate(parts):
            job_id = f"cdc_stage_{entity.staging_table}_{attempt}_{i}"
            try:
                with open(part, "rb") as handle:
                    job = client.load_table_from_file(
                        handle, table_id, job_id=job_id, job_config=config, location=location
                    )
            except Conflict:  # the same load was submitted before (a resubmitted request)
                job = client.get_job(job_id, location=location)
            job.result()
        counted = {
            r[0]: int(r[1])
            for r in client.query(
                f"select `{lineage['file_hash']}`, count(*) from {table} "
                f"where `{lineage['file_hash']}` in unnest(@hashes) group by 1",
                job_config=params,
            ).result()
        }
        for h in hashes:
            if counted.get(h, 0) != batch.counts.get(h, 0):
                raise IntegrityError(
                    f"load into {table_id}: {counted.get(h, 0)} rows of File {h[:12]} "
                    f"in BigQuery, {batch.counts.get(h, 0)} were staged"
                )
        self._manifest(client, batch)

    def _manifest(self, client: Any, batch: StagedBatch) -> None:
        from google.cloud import bigquery

        dest = self.destination
        project, dataset = dest.gcp_project, dest.state_schema
        spec = state_table("staged_files")
        cols = list(spec.columns)
        dest.create_dataset(dataset)
        table_id = f"{project}.{dataset}.{spec.identifier}"
        fields = schema_fields(spec.columns)
        existing = client.create_table(bigquery.Table(table_id, schema=fields), exists_ok=True)
        have = {f.name.lower() for f in existing.schema}
        missing = [f for f in fields if f.name.lower() not in have]
        if missing:  # a table made by an earlier version gains the columns appended since
            existing.schema = [*existing.schema, *missing]
            client.update_table(existing, ["schema"])
        table = bq_name(project, dataset, spec.identifier)
        params: list[Any] = []
        rows = []
        for i, row in enumerate(manifest_rows(batch)):
            items = []
            for j, c in enumerate(cols):
                kind = bq_type(spec.columns[c])[0]
                params.append(bigquery.ScalarQueryParameter(f"v{i}_{j}", kind, row[c]))
                items.append(f"@v{i}_{j} as `{c}`")
            rows.append("select " + ", ".join(items))
        # One statement: a File is in the manifest once, with this attempt's values.
        names = ", ".join(f"`{c}`" for c in cols)
        on = " and ".join(f"t.`{k}` = s.`{k}`" for k in spec.key)
        script = (
            f"merge {table} t using ({' union all '.join(rows)}) s on {on} "
            "when matched then update set "
            + ", ".join(f"`{c}` = s.`{c}`" for c in cols if c not in spec.key)
            + f" when not matched then insert ({names}) values "
            + f"({', '.join(f's.`{c}`' for c in cols)})"
        )
        client.query(script, job_config=bigquery.QueryJobConfig(query_parameters=params)).result()


_BQ_NAMES = {
    "STRING": "string",
    "BOOL": "boolean",
    "BOOLEAN": "boolean",
    "INT64": "bigint",
    "INTEGER": "bigint",
    "FLOAT64": "double",
    "FLOAT": "double",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "BYTES": "binary",
}


def spark_of_bq(field: Any) -> str:
    """A BigQuery schema field's type as a Spark SQL type (as ``stored_type`` spells one)."""
    kind = str(field.field_type).upper()
    if kind in ("NUMERIC", "BIGNUMERIC", "DECIMAL", "BIGDECIMAL"):
        if field.precision is not None:
            return f"decimal({field.precision},{field.scale or 0})"
        return "numeric" if kind in ("NUMERIC", "DECIMAL") else "bignumeric"
    return _BQ_NAMES.get(kind, kind.lower())


def schema_fields(types: dict[str, str]) -> list[Any]:
    """BigQuery schema fields for columns with Spark SQL types (declared, or the contract's)."""
    from google.cloud.bigquery import SchemaField

    fields = []
    for name, spark_type in types.items():
        kind, precision, scale = bq_type(spark_type)
        if precision is None or scale is None:
            fields.append(SchemaField(name, kind))
        else:
            fields.append(SchemaField(name, kind, precision=precision, scale=scale))
    return fields
