"""The PostgreSQL destination: Spark validates and writes CSV parts, then COPY loads them.

One PostgreSQL transaction deletes the Files' earlier rows (a retry), COPYs the new ones and
records the Files in the staged-files manifest, so a File is staged whole or not at all. The
load is COPY, never row-by-row INSERTs. Column names are lowercased so that unquoted SQL in the
models (``select customer_id, op ...``) works the same on every destination.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.contract import column, lineage_columns, state_table
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
    "string": "text",
    "boolean": "boolean",
    "tinyint": "smallint",
    "smallint": "smallint",
    "int": "integer",
    "integer": "integer",
    "bigint": "bigint",
    "float": "real",
    "double": "double precision",
    "decimal": "numeric",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp",
    "binary": "bytea",
}


def pg_type(spark_type: str) -> str:
    """The PostgreSQL type for a declared Spark SQL type."""
    t = spark_type.strip().lower()
    if t in SIMPLE_TYPES:
        return SIMPLE_TYPES[t]
    m = re.fullmatch(r"(decimal|varchar|char)\((.+)\)", t)
    if m:
        name = "numeric" if m.group(1) == "decimal" else m.group(1)
        return f"{name}({m.group(2).replace(' ', '')})"
    raise ConfigError(f"data_type {spark_type!r} has no PostgreSQL equivalent here")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def q(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def connect(target: dict[str, Any]) -> Any:
    """A psycopg2 connection from the dbt profile target (password from the environment)."""
    import psycopg2

    return psycopg2.connect(
        host=target.get("host", "127.0.0.1"),
        port=int(target.get("port", 5432)),
        user=target.get("user"),
        password=target.get("password") or None,
        dbname=target.get("dbname") or target.get("database"),
        connect_timeout=int(target.get("connect_timeout", 10)),
    )


class PostgresDestination(Destination):
    """dbt-postgres targets: staged with COPY; the Audit DB defaults to the same server."""

    def writer(self) -> StagingWriter:
        return PostgresWriter(self.project.target, self.scratch_dir(), self.state_schema)

    def _fetch(self, sql: str, relation: tuple[str, str] | None = None) -> list[tuple[Any, ...]]:
        conn = connect(self.project.target)
        try:
            with conn.cursor() as cur:
                if relation is not None:
                    cur.execute("select to_regclass(%s)", (q(*relation),))
                    if cur.fetchone()[0] is None:
                        return []
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def table_rows(self, tables: list[str], spark: SparkSession | None = None) -> dict[str, int]:
        counts = {t: self._fetch(f"select count(*) from {q(*t.split('.'))}") for t in tables}
        return {t: int(rows[0][0]) for t, rows in counts.items()}

    def select_rows(
        self, schema: str, table: str, columns: list[str], spark: SparkSession | None = None
    ) -> list[dict[str, Any]] | None:
        if self._fetch(f"select to_regclass({_literal(q(schema, table))}) is null")[0][0]:
            return None
        rows = self._fetch(f"select {', '.join(q(c) for c in columns)} from {q(schema, table)}")
        return [dict(zip(columns, r, strict=True)) for r in rows]

    def delete_staged(
        self,
        entity: Entity,
        hashes: list[str],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
    ) -> int:
        table = q(entity.staging_schema, entity.staging_table)
        column = q(lineage_columns()["file_hash"])
        conn = connect(self.project.target)
        try:
            with conn, conn.cursor() as cur:
                cur.execute("select to_regclass(%s)", (table,))
                if cur.fetchone()[0] is None or not hashes:
                    return 0
                if dry_run:
                    cur.execute(f"select count(*) from {table} where {column} = any(%s)", (hashes,))
                    return int(cur.fetchone()[0])
                cur.execute(f"delete from {table} where {column} = any(%s)", (hashes,))
                return int(cur.rowcount)
        finally:
            conn.close()

    def maintain_tables(
        self,
        tables: list[tuple[str, str]],
        spark: SparkSession | None = None,
        *,
        dry_run: bool = False,
        snapshot_days: float = 1.0,
    ) -> list[str]:
        """``VACUUM (ANALYZE)`` of each table: dead rows' space reused, planner statistics
        fresh (autovacuum does the same in its own time)."""
        said = []
        conn = connect(self.project.target)
        conn.autocommit = True  # VACUUM cannot run in a transaction
        try:
            with conn.cursor() as cur:
                for schema, name in tables:
                    cur.execute("select to_regclass(%s)", (q(schema, name),))
                    if cur.fetchone()[0] is None:
                        continue
                    if not dry_run:
                        cur.execute(f"vacuum (analyze) {q(schema, name)}")
                    said.append(f"{schema}.{name}: vacuum (analyze)")
        finally:
            conn.close()
        return said

    def default_audit(self) -> tuple[str, str | None]:
        """The profile's own server, in schema ``cdc_audit``."""
        from sqlalchemy.engine import URL

        t = self.project.target
        url = URL.create(
            "postgresql+psycopg2",
            username=str(t.get("user")) if t.get("user") else None,
            password=str(t.get("password")) if t.get("password") else None,
            host=str(t.get("host", "127.0.0.1")),
            port=int(t.get("port", 5432)),
            database=str(t.get("dbname") or t.get("database")),
        ).render_as_string(hide_password=False)
        return url, "cdc_audit"


class PostgresWriter(StagingWriter):
    forbidden_characters = {"\x00": "a NUL character (PostgreSQL cannot store it in text)"}

    def __init__(self, target: dict[str, Any], scratch_dir: Path, state_schema: str) -> None:
        self.target = target
        self.scratch_dir = scratch_dir
        self.state_schema = state_schema

    def ensure_table(self, spark: SparkSession, entity: Entity) -> None:
        conn = connect(self.target)
        try:
            with conn, conn.cursor() as cur:
                _lock_if_missing(cur, (entity.staging_schema, entity.staging_table))
                for stmt in staging_table_ddl(entity):
                    cur.execute(stmt)
        finally:
            conn.close()

    def table_columns(self, spark: SparkSession, entity: Entity) -> dict[str, str] | None:
        conn = connect(self.target)
        try:
            with conn, conn.cursor() as cur:
                return _columns(cur, entity.staging_schema, entity.staging_table)
        finally:
            conn.close()

    def stored_type(self, spark_type: str) -> str:
        return spark_of_pg(pg_type(spark_type))

    def write(self, spark: SparkSession, batch: StagedBatch) -> None:
        entity = batch.entity
        types = {name: pg_type(t) for name, t in staged_types(entity).items()}
        columns = list(types)
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{entity.name}-", dir=self.scratch_dir))
        try:
            (
                batch.rows.select(*columns)
                .write.mode("overwrite")
                .option("header", False)
                .option("quote", '"')
                .option("escape", '"')
                .option("nullValue", "")
                .option("emptyValue", '""')
                .option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSSSSS")
                .option("encoding", "UTF-8")
                .csv(str(scratch / "rows"))
            )
            parts = sorted((scratch / "rows").glob("part-*.csv"))
            self._load(batch, columns, types, parts)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _load(
        self, batch: StagedBatch, columns: list[str], types: dict[str, str], parts: list[Path]
    ) -> None:
        entity, files, counts = batch.entity, batch.files, batch.counts
        lineage = lineage_columns()
        schema, table = entity.staging_schema, entity.staging_table
        spec = state_table("staged_files")
        hashes = [f.content_hash for f in files]
        conn = connect(self.target)
        try:
            with conn, conn.cursor() as cur:
                _lock_if_missing(cur, (schema, table), (self.state_schema, spec.identifier))
                for stmt in staging_table_ddl(entity):
                    cur.execute(stmt)
                add, widen = self.evolution(_columns(cur, schema, table) or {}, entity)
                alter = f"ALTER TABLE {q(schema, table)}"
                for c, t in add:  # in the load's transaction: a failed load adds nothing
                    cur.execute(f"{alter} ADD COLUMN {q(c.lower())} {pg_type(t)}")
                if widen:
                    # PostgreSQL cannot alter a column a view reads (stg_<entity>): the views
                    # over the table are made again from their definitions, in this transaction.
                    # (No CASCADE: anything else that reads them, a materialized view, makes
                    # the load fail with PostgreSQL's message and changes nothing.)
                    views = _dependent_views(cur, schema, table)
                    for view_schema, view, _ in reversed(views):
                        cur.execute(f"DROP VIEW {q(view_schema, view)}")
                    for c, t in widen:
                        cur.execute(f"{alter} ALTER COLUMN {q(c.lower())} TYPE {pg_type(t)}")
                    for view_schema, view, definition in views:
                        cur.execute(f"CREATE VIEW {q(view_schema, view)} AS {definition}")
                for stmt in state_table_ddl(self.state_schema, "staged_files"):
                    cur.execute(stmt)
                cur.execute(
                    f"DELETE FROM {q(schema, table)} WHERE {q(lineage['file_hash'])} = ANY(%s)",
                    (hashes,),
                )
                copied = 0
                copy = (
                    f"COPY {q(schema, table)} ({', '.join(q(c.lower()) for c in columns)}) "
                    "FROM STDIN WITH (FORMAT csv, NULL '', ENCODING 'UTF8')"
                )
                for part in parts:
                    with open(part, "rb") as handle:
                        cur.copy_expert(copy, handle)
                        copied += cur.rowcount
                expected = sum(counts.get(h, 0) for h in hashes)
                if copied != expected:
                    raise IntegrityError(
                        f"COPY into {schema}.{table} loaded {copied} rows, expected {expected}"
                    )
                manifest = q(self.state_schema, spec.identifier)
                cols = list(spec.columns)
                cur.execute(
                    f"DELETE FROM {manifest} "
                    f"WHERE {q('entity')} = %s AND {q('file_hash')} = ANY(%s)",
                    (entity.name, hashes),
                )
                cur.executemany(
                    f"INSERT INTO {manifest} ({', '.join(q(c) for c in cols)}) "
                    f"VALUES ({', '.join(['%s'] * len(cols))})",
                    [tuple(r[c] for c in cols) for r in manifest_rows(batch)],
                )
        finally:
            conn.close()


# PostgreSQL's spellings of types (format_type) as Spark SQL types, to compare with declared ones.
_PG_NAMES = {
    "text": "string",
    "boolean": "boolean",
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "real": "float",
    "double precision": "double",
    "numeric": "numeric",  # unbounded: never equal to a declared decimal(p,s)
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp": "timestamp",
    "bytea": "binary",
}


def spark_of_pg(pg: str) -> str:
    """A PostgreSQL type (as ``pg_type`` or ``format_type`` spell it) as a Spark SQL type."""
    t = re.sub(r"\s+", " ", pg.strip().lower())
    if t in _PG_NAMES:
        return _PG_NAMES[t]
    m = re.fullmatch(r"(numeric|character varying|varchar|character|char)\((.+)\)", t)
    if m:
        kind = {"numeric": "decimal", "character varying": "varchar", "character": "char"}
        return f"{kind.get(m.group(1), m.group(1))}({m.group(2).replace(' ', '')})"
    return t


def _dependent_views(cur: Any, schema: str, table: str) -> list[tuple[str, str, str]]:
    """The views that read a table, directly or through other views, as (schema, name,
    definition), each after the views it reads."""
    cur.execute(
        """
        WITH RECURSIVE deps(oid, depth) AS (
            SELECT r.ev_class, 1 FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
            WHERE d.refobjid = %(table)s::regclass AND r.ev_class <> %(table)s::regclass
            UNION
            SELECT r.ev_class, deps.depth + 1 FROM deps
            JOIN pg_depend d ON d.refobjid = deps.oid JOIN pg_rewrite r ON r.oid = d.objid
            WHERE r.ev_class <> deps.oid AND deps.depth < 50
        )
        SELECT n.nspname, c.relname, pg_get_viewdef(c.oid), max(deps.depth) FROM deps
        JOIN pg_class c ON c.oid = deps.oid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'v' GROUP BY n.nspname, c.relname, c.oid ORDER BY max(deps.depth)
        """,
        {"table": q(schema, table)},
    )
    return [(r[0], r[1], r[2]) for r in cur.fetchall()]


def _columns(cur: Any, schema: str, table: str) -> dict[str, str] | None:
    """A table's columns with their types as Spark SQL types; None when it is missing."""
    cur.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        (schema, table),
    )
    rows = cur.fetchall()
    return {name: spark_of_pg(kind) for name, kind in rows} or None


def _lock_if_missing(cur: Any, *tables: tuple[str, str]) -> None:
    """Before the first CREATE ... IF NOT EXISTS of a table: PostgreSQL checks, then inserts the
    catalog rows, so of two runners meeting a new entity at once the second fails on the
    catalog's unique index. When one of the tables is missing, the transaction first takes the
    advisory lock the package's state tables are created under (held to the commit): the second
    waits, then finds the tables. Once they exist it is never taken."""
    for schema, table in tables:
        cur.execute("SELECT to_regclass(%s)", (q(schema, table),))
        if cur.fetchone()[0] is None:
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended('cdc state tables', 0))")
            return


def staging_table_ddl(entity: Entity) -> list[str]:
    """CREATE statements for an entity's staging table, with an index on the File's hash."""
    schema, table = entity.staging_schema, entity.staging_table
    types = {name: pg_type(t) for name, t in staged_types(entity).items()}
    return [
        f"CREATE SCHEMA IF NOT EXISTS {q(schema)}",
        f"CREATE TABLE IF NOT EXISTS {q(schema, table)} ("
        + ", ".join(f"{q(c.lower())} {t}" for c, t in types.items())
        + ")",
        f"CREATE INDEX IF NOT EXISTS {q(table + '__by_file')} "
        f"ON {q(schema, table)} ({q(column('file_hash'))})",
    ]


def state_table_ddl(schema: str, name: str) -> list[str]:
    """CREATE statements for one state table, from the contract: the schema, the table, and a
    unique index on its key (PostgreSQL enforces what the other destinations only declare).
    The dbt package's ``postgres__`` state-table macros make the same."""
    spec = state_table(name)
    cols = ", ".join(f"{q(c)} {pg_type(t)}" for c, t in spec.columns.items())
    out = [
        f"CREATE SCHEMA IF NOT EXISTS {q(schema)}",
        f"CREATE TABLE IF NOT EXISTS {q(schema, spec.identifier)} ({cols})",
    ]
    # A table made by an earlier version gains the columns the contract appended since.
    out += [
        f"ALTER TABLE {q(schema, spec.identifier)} ADD COLUMN IF NOT EXISTS {q(c)} {pg_type(t)}"
        for c, t in spec.columns.items()
    ]
    if spec.key:
        out.append(
            f"CREATE UNIQUE INDEX IF NOT EXISTS {q(spec.identifier + '__key')} "
            f"ON {q(schema, spec.identifier)} ({', '.join(q(k) for k in spec.key)})"
        )
    return out
