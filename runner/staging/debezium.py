"""Debezium JSON lines (``format: debezium``): one change event envelope per line, as a Kafka
Connect sink writes them, bare or wrapped in ``{"schema": ..., "payload": ...}``.

The reader turns each envelope into a flat row of the declared columns, so that the rest of
staging (typing, checks, duplicates, lineage) is the same as for any other format:

- a column named in ``meta.cdc.debezium.fields`` comes from that envelope field (``op``,
  ``ts_ms``, ``source.<field>``, ``transaction.<field>``); any other column is the row image's
  field of the same name: ``after``, or ``before`` for a delete (``op`` d);
- ``ENVELOPE`` says why an envelope does not match the declaration (NULL when it does), naming
  the field; staging quarantines the File with its line, like any bad row;
- ``TS_MS`` is the envelope's ``ts_ms``, the first tie-break of the order;
- values encoded as Kafka Connect and Debezium logical types (decimals as base64, dates and
  times as epoch counts) are decoded to the declared type's text (``staging.decode``);
- ``TOMBSTONE`` marks a blank or ``null`` line (a Kafka tombstone): skipped and counted. Lines
  are read as text first, so a row's number is its line, blank lines included.

The staged sequence (the lineage column of key ``sequence``, a string) is the declared
sequence column (an integer zero-padded to 20 digits, or a string as it is), then ``ts_ms``
(15 digits), then a tie-break (4 digits): 0, or the event's rank among the File's events of
one key with the same sequence and ``ts_ms`` but different values, in line order (see
``staging.spark``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from runner.entities import INTEGER_TYPES, Entity, binlog_file
from runner.staging.decode import SCHEMA, decode_columns, line_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

ENVELOPE = "__envelope_problem"
# A Kafka tombstone: a blank or ``null`` line (the value Kafka keeps after a delete, written
# by sinks as such a line): skipped and counted, never a bad row.
TOMBSTONE = "__tombstone"
TS_MS = "__ts_ms"
SEQUENCE_BASE = "__sequence_base"
UPSERT_OPS = ("c", "r", "u")


def read_debezium(
    spark: SparkSession, entity: Entity, paths: list[str], corrupt: str, metadata: bool = False
) -> DataFrame:
    """The envelopes of ``paths`` as raw string rows: the declared columns, ``ENVELOPE``,
    ``TS_MS`` and ``corrupt`` (the line, when it is not a JSON object of this shape); with
    ``metadata``, the reader's ``_metadata`` column too (how rows name their File on Unity
    Catalog)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = entity.debezium_fields
    image_columns = [c.name for c in entity.columns if c.name not in fields]
    image = T.StructType([T.StructField(n, T.StringType()) for n in image_columns])

    def struct_of(prefix: str) -> T.StructType:
        names = sorted({p.split(".", 1)[1] for p in fields.values() if p.startswith(prefix + ".")})
        return T.StructType([T.StructField(n, T.StringType()) for n in names or ["__none"]])

    envelope = T.StructType(
        [
            T.StructField("before", image),
            T.StructField("after", image),
            T.StructField("op", T.StringType()),
            T.StructField("ts_ms", T.StringType()),
            T.StructField("source", struct_of("source")),
            T.StructField("transaction", struct_of("transaction")),
        ]
    )
    schema = T.StructType(
        [
            *envelope.fields,
            T.StructField("payload", envelope),
            T.StructField("schema", T.StringType()),
            T.StructField(corrupt, T.StringType()),
        ]
    )
    # Line by line (a text read, then the JSON parse), so that a blank line keeps its place:
    # a row's number is its line, and Kafka tombstones (blank or ``null`` lines) are rows.
    text = spark.read.option("encoding", "UTF-8").text(paths)
    parsed = F.from_json(
        F.col("value"), schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt}
    )
    raw = text.select(
        parsed.alias("__line"),
        F.trim(F.col("value")).isin("", "null").alias(TOMBSTONE),
        *([F.col("_metadata")] if metadata else []),
    ).select("__line.*", TOMBSTONE, *(["_metadata"] if metadata else []))
    may_have_schema = entity.debezium_envelope != "plain"
    if may_have_schema:
        raw = raw.withColumn(SCHEMA, line_schema(F.col("schema")))
    wrapped, env = unwrapped()
    op = env("op")
    row_image = F.when(op == F.lit("d"), env("before")).otherwise(env("after"))
    images = {c.name: row_image.getField(c.name) for c in entity.columns if c.name not in fields}
    raw, texts, problems = decode_columns(raw, entity, images, may_have_schema)
    values = [
        (env(fields[c.name]) if c.name in fields else texts[c.name]).alias(c.name)
        for c in entity.columns
    ]
    tombstone = F.col(TOMBSTONE)
    return raw.select(
        *values,
        F.when(~tombstone, F.coalesce(_problem(entity, wrapped, op, env), *problems)).alias(
            ENVELOPE
        ),
        env("ts_ms").alias(TS_MS),
        F.when(~tombstone, F.col(corrupt)).alias(corrupt),
        tombstone,
        *([F.col("_metadata")] if metadata else []),
    )


def read_json_lines(
    spark: SparkSession, schema: StructType, paths: list[str], corrupt: str
) -> DataFrame:
    """JSON lines read with ``schema`` (every value as the schema says, nothing inferred); a
    line that does not parse into it keeps its text in ``corrupt``."""
    return (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", corrupt)
        .option("encoding", "UTF-8")
        .json(paths)
    )


def unwrapped() -> tuple[Column, Callable[[str], Column]]:
    """(whether a line is wrapped in schema/payload, a field of the envelope by path: from
    ``payload`` when wrapped, else from the line itself)."""
    from pyspark.sql import functions as F

    wrapped = F.col("payload").isNotNull() | F.col("schema").isNotNull()

    def env(path: str) -> Column:
        return F.when(wrapped, F.col("payload." + path)).otherwise(F.col(path))

    return wrapped, env


def _problem(entity: Entity, wrapped: Column, op: Column, get: Callable[[str], Column]) -> Column:
    """Why an envelope does not match the declaration, naming the field; NULL when it does."""
    from pyspark.sql import functions as F

    checks = []
    if entity.debezium_envelope == "payload":
        checks.append(
            F.when(
                F.col("payload").isNull(),
                F.lit(
                    "field 'payload': missing (meta.cdc.debezium.envelope is payload: every "
                    'line is {"schema": ..., "payload": ...})'
                ),
            )
        )
    elif entity.debezium_envelope == "plain":
        checks.append(
            F.when(
                wrapped,
                F.lit(
                    "field 'payload': a schema/payload wrapper, but meta.cdc.debezium.envelope "
                    "is plain (set it to payload or auto)"
                ),
            )
        )
    checks += [
        F.when(
            F.col("schema").isNotNull() & F.col("payload").isNull(),
            F.lit("field 'payload': missing next to 'schema'"),
        ),
        F.when(op.isNull(), F.lit("field 'op': missing")),
        F.when(
            op.isin(*UPSERT_OPS) & get("after").isNull(),
            F.concat(F.lit("field 'after': missing on an event with op \""), op, F.lit('"')),
        ),
        F.when(
            (op == F.lit("d")) & get("before").isNull(),
            F.lit("field 'before': missing on a delete (op \"d\")"),
        ),
        F.when(get("ts_ms").isNull(), F.lit("field 'ts_ms': missing")),
        F.when(
            ~get("ts_ms").rlike("^[0-9]{1,15}$"),
            F.lit("field 'ts_ms': not a number of milliseconds"),
        ),
    ]
    return F.coalesce(*checks)


def column_field(entity: Entity, column: str) -> str:
    """How an error message names a column's value: its envelope field, or ``after.<name>``."""
    return entity.debezium_fields.get(column) or f"after.{column}"


def sequence_base(entity: Entity) -> Column:
    """The declared sequence columns then ts_ms, as one sortable string (typed columns in
    scope): integers as 20 digits, a binlog file name as its base name and its number (20
    digits), a string as it is. Each is followed by ``.``; in a sequence of several columns a
    string is followed by U+0001 instead, below any character it holds, so that a shorter
    string sorts before a longer one it begins (``ab`` before ``ab-``) whatever comes next.
    A column a snapshot's read event leaves NULL (the checks allow it only there) is empty, so
    the read sorts before every streamed change that agrees with it on the columns before."""
    from pyspark.sql import functions as F

    several = len(entity.sequence_columns) > 1
    parts: list[Column] = []
    for name in entity.sequence_columns:
        seq, end = F.col(name), "\u0001" if several else "."
        if entity.column(name).data_type in INTEGER_TYPES:
            seq, end = F.lpad(seq.cast("string"), 20, "0"), "."
        elif binlog_file(entity.debezium_fields, name):
            base = F.regexp_extract(seq, r"^(.*?)[0-9]*$", 1)
            number = F.regexp_extract(seq, r"^.*?0*([0-9]*)$", 1)  # without leading zeros
            seq = F.concat(base, F.lpad(number, 20, "0"))
        parts += [F.coalesce(seq, F.lit("")), F.lit(end)]
    return F.concat(*parts, F.lpad(F.col(TS_MS), 15, "0"))


def negative_sequence(entity: Entity) -> Column | None:
    """Why an integer sequence column cannot be ordered as text (negative), or None when no
    sequence column is an integer."""
    from pyspark.sql import functions as F

    whens = [
        F.when(F.col(name) < 0, F.lit(f"field {column_field(entity, name)!r}: negative sequence"))
        for name in entity.sequence_columns
        if entity.column(name).data_type in INTEGER_TYPES
    ]
    return F.coalesce(*whens) if whens else None


def read_transactions(
    spark: SparkSession,
    paths: list[str],
    corrupt: str,
    identify: Callable[[DataFrame], DataFrame],
    identity: tuple[str, ...],
) -> DataFrame:
    """Debezium transaction metadata (BEGIN and END records, bare or wrapped in
    schema/payload) as raw string rows of ``TRANSACTION_COLUMNS``: one per BEGIN, one per data
    collection an END counts. ``identify`` adds each line's File, block and id before the
    explode, so a row's number is its line (``identity``: those columns' names)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    counted = T.StructType(
        [
            T.StructField("data_collection", T.StringType()),
            T.StructField("event_count", T.StringType()),
        ]
    )
    record = T.StructType(
        [
            T.StructField("status", T.StringType()),
            T.StructField("id", T.StringType()),
            T.StructField("ts_ms", T.StringType()),
            T.StructField("event_count", T.StringType()),
            T.StructField("data_collections", T.ArrayType(counted)),
        ]
    )
    schema = T.StructType(
        [
            *record.fields,
            T.StructField("payload", record),
            T.StructField("schema", T.StringType()),
            T.StructField(corrupt, T.StringType()),
        ]
    )
    raw = identify(read_json_lines(spark, schema, paths, corrupt))
    _, env = unwrapped()
    status = env("status")
    problem = F.coalesce(
        F.when(
            F.col("schema").isNotNull() & F.col("payload").isNull(),
            F.lit("field 'payload': missing next to 'schema'"),
        ),
        F.when(env("ts_ms").isNull(), F.lit("field 'ts_ms': missing")),
        F.when(
            ~env("ts_ms").rlike("^[0-9]{1,15}$"),
            F.lit("field 'ts_ms': not a number of milliseconds"),
        ),
        F.when(
            (status == F.lit("END")) & env("data_collections").isNull(),
            F.lit("field 'data_collections': missing on an END record (the per-table counts)"),
        ),
    )
    rows = raw.select(
        status.alias("status"),
        env("id").alias("id"),
        env("ts_ms").alias("ts_ms"),
        env("event_count").alias("event_count"),
        F.explode_outer(env("data_collections")).alias("__counted"),
        problem.alias(ENVELOPE),
        env("ts_ms").alias(TS_MS),
        F.col(corrupt),
        *identity,
    )
    return rows.select(
        "status",
        "id",
        "ts_ms",
        "event_count",
        F.coalesce(F.col("__counted.data_collection"), F.lit("")).alias("data_collection"),
        F.col("__counted.event_count").alias("collection_events"),
        ENVELOPE,
        TS_MS,
        F.lit(False).alias(TOMBSTONE),  # the transaction topic has no tombstones
        corrupt,
        *identity,
    )
