"""The Spark catalog of the embedded default: Iceberg's JDBC catalog on PostgreSQL.

Which tables and views exist, and where their metadata lives, is kept in a PostgreSQL schema
(``CDC_CATALOG_SCHEMA``, default ``cdc_catalog``) instead of an embedded Derby metastore, so
several processes can open the warehouse at once. Iceberg creates its two tables there on first
use, but not the schema: :func:`ensure_schema` does, before any SparkSession is built.

:func:`migrate_derby` moves a warehouse made under the former Derby metastore: it registers the
newest metadata file of every Iceberg table folder in the JDBC catalog (views are rebuilt by the
next ``dbt build``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from runner.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_METADATA = re.compile(r"^(?:v)?(\d+)(?:-[0-9a-f-]+)?\.metadata\.json$")


@dataclass(frozen=True)
class JdbcCatalog:
    """A Spark catalog of ``type jdbc`` on PostgreSQL, as the Spark settings declare it."""

    name: str
    host: str
    port: int
    database: str
    schema: str
    user: str
    password: str

    def where(self) -> str:
        return f"PostgreSQL {self.host}:{self.port}/{self.database}, schema {self.schema}"

    def connect(self):  # noqa: ANN201
        import psycopg2

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            dbname=self.database,
            user=self.user,
            password=self.password,
            connect_timeout=10,
        )


# Iceberg 1.9's own tables of a JDBC catalog (schema version V1, which stores views). Created
# here because Iceberg looks for them with JDBC metadata calls that search every schema of the
# database: once one catalog schema exists, Iceberg would skip creating them in a new one.
CATALOG_TABLES = (
    """create table if not exists iceberg_tables (
        catalog_name varchar(255) not null,
        table_namespace varchar(255) not null,
        table_name varchar(255) not null,
        metadata_location varchar(1000),
        previous_metadata_location varchar(1000),
        iceberg_type varchar(5),
        primary key (catalog_name, table_namespace, table_name))""",
    """create table if not exists iceberg_namespace_properties (
        catalog_name varchar(255) not null,
        namespace varchar(255) not null,
        property_key varchar(255) not null,
        property_value varchar(1000),
        primary key (catalog_name, namespace, property_key))""",
)


def jdbc_catalogs(conf: dict[str, str]) -> list[JdbcCatalog]:
    """The JDBC catalogs on PostgreSQL that ``conf`` (Spark settings) declares."""
    out = []
    for key, value in conf.items():
        m = re.fullmatch(r"spark\.sql\.catalog\.([^.]+)\.type", key)
        if not m or value.strip().lower() != "jdbc":
            continue
        name = m.group(1)
        prefix = f"spark.sql.catalog.{name}."
        uri = conf.get(prefix + "uri", "")
        if not uri.startswith("jdbc:postgresql:"):
            continue  # another database: nothing to prepare
        parts = urlsplit(uri.removeprefix("jdbc:"))
        query = parse_qs(parts.query)
        schema = (query.get("currentSchema") or ["public"])[0]
        if not _IDENT.match(schema):
            raise ConfigError(
                f"{prefix}uri: currentSchema {schema!r} is not a plain identifier "
                "(letters, digits, underscores; CDC_CATALOG_SCHEMA sets it)"
            )
        out.append(
            JdbcCatalog(
                name=name,
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 5432,
                database=parts.path.lstrip("/") or "postgres",
                schema=schema,
                user=conf.get(prefix + "jdbc.user", ""),
                password=conf.get(prefix + "jdbc.password", ""),
            )
        )
    return out


def _unreachable(catalog: JdbcCatalog, exc: Exception) -> ConfigError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(
        f"the Spark catalog is kept on {catalog.where()}, which could not be reached ({first}); "
        "start PostgreSQL (on Debian: pg_ctlcluster 15 main start) or point "
        "CDC_PG_HOST/CDC_PG_PORT at one"
    )


def ensure_schema(conf: dict[str, str]) -> None:
    """Create the schema of every JDBC catalog ``conf`` declares, and Iceberg's tables in it,
    if missing; refuse a catalog whose tables' files are gone (one connection for both)."""
    for catalog in jdbc_catalogs(conf):
        try:
            conn = catalog.connect()
        except Exception as exc:  # psycopg2.OperationalError and friends
            raise _unreachable(catalog, exc) from exc
        try:
            with conn, conn.cursor() as cur:
                # Two processes starting at once would race CREATE ... IF NOT EXISTS (a unique
                # violation in PostgreSQL's catalog): one at a time, per catalog schema.
                cur.execute("select pg_advisory_xact_lock(hashtext(%s))", (catalog.schema,))
                cur.execute(f'create schema if not exists "{catalog.schema}"')
                cur.execute(f'set local search_path to "{catalog.schema}"')
                for ddl in CATALOG_TABLES:
                    cur.execute(ddl)
                _check_not_stale(cur, catalog, conf)
        finally:
            conn.close()


def _check_not_stale(cur: Any, catalog: JdbcCatalog, conf: dict[str, str]) -> None:
    """Refuse to start on a catalog that lists tables or views of this warehouse folder whose
    metadata files are gone (the folder was deleted, or moved): Spark would fail on the first
    of them minutes later. Said in one line with the fix, before any JVM starts. ``cur``: a
    cursor on the catalog's schema (ensure_schema's)."""
    warehouse = conf.get(f"spark.sql.catalog.{catalog.name}.warehouse", "")
    if not warehouse or "://" in warehouse:
        return  # an object store: not ours to look at
    folder = Path(warehouse.removeprefix("file:")).resolve()
    cur.execute(
        "select table_namespace, table_name, metadata_location from iceberg_tables "
        "where catalog_name = %s",
        (catalog.name,),
    )
    gone = []
    for namespace, table, location in cur.fetchall():
        path = Path(str(location or "").removeprefix("file:"))
        if path.is_relative_to(folder) and not path.exists():
            gone.append(f"{namespace}.{table}")
    if gone:
        raise ConfigError(
            f"the Spark catalog on {catalog.where()} lists {len(gone)} tables and views "
            f"whose files are gone from {folder} (first: {sorted(gone)[0]}): "
            "`runner drop-catalog --yes` forgets them to start over, or restore the folder"
        )


def drop_schema(conf: dict[str, str]) -> list[str]:
    """Drop the schema of every JDBC catalog ``conf`` declares (``make clean``)."""
    dropped = []
    for catalog in jdbc_catalogs(conf):
        try:
            conn = catalog.connect()
        except Exception as exc:
            raise _unreachable(catalog, exc) from exc
        try:
            with conn, conn.cursor() as cur:
                cur.execute(f'drop schema if exists "{catalog.schema}" cascade')
        finally:
            conn.close()
        dropped.append(catalog.where())
    return dropped


def latest_metadata(table_dir: Path) -> Path | None:
    """The newest ``*.metadata.json`` of an Iceberg table folder (by its version number)."""
    best: tuple[int, Path] | None = None
    for path in (table_dir / "metadata").glob("*.metadata.json"):
        m = _METADATA.match(path.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), path)
    return best[1] if best else None


def iceberg_tables(warehouse: Path) -> list[tuple[str, str, Path]]:
    """(namespace, table, newest metadata file) of every Iceberg table under a Hive-layout
    warehouse folder (``<namespace>.db/<table>/metadata``)."""
    found = []
    for ns_dir in sorted(warehouse.glob("*.db")):
        for table_dir in sorted(p for p in ns_dir.iterdir() if p.is_dir()):
            meta = latest_metadata(table_dir)
            if meta is not None:
                found.append((ns_dir.name.removesuffix(".db"), table_dir.name, meta))
    return found


def migrate_derby(
    spark: SparkSession, warehouse: Path, catalog: str = "spark_catalog"
) -> list[str]:
    """Register every Iceberg table of a Derby-era warehouse folder in ``catalog`` (the JDBC
    catalog of ``spark``); tables it already has are left alone. Returns what was registered."""
    done = []
    for namespace, table, meta in iceberg_tables(warehouse):
        ns = f"`{namespace}`"
        spark.sql(f"create namespace if not exists {catalog}.{ns}")
        if spark.catalog.tableExists(f"{namespace}.{table}"):
            continue
        literal = str(meta.resolve()).replace("'", "''")
        spark.sql(
            f"call {catalog}.system.register_table(table => '{namespace}.{table}', "
            f"metadata_file => '{literal}')"
        )
        done.append(f"{namespace}.{table}")
    return done
