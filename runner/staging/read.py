"""Read: an entity's Files as Spark rows of raw values (strings for CSV and JSON lines, Parquet's
own types), each with its File, block and id; the declared columns cast to their types; the
strings Spark names a File by; a File's place in AWS DMS's order and a snapshot's effective
date. The checks are in check.py, the order of the steps in spark.py.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from runner.destinations.base import FileToStage
from runner.entities import Entity, is_number_type
from runner.errors import ConfigError, IntegrityError
from runner.fs import FilePath, RemoteFile, same_store_spellings
from runner.staging.debezium import (
    ENVELOPE,
    SEQUENCE_BASE,
    TOMBSTONE,
    TS_MS,
    read_debezium,
    read_json_lines,
    read_transactions,
    sequence_base,
)
from runner.staging.validate import (
    SCHEMA_HINT,
    open_binary,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


CORRUPT = "__corrupt_record"
FILE_URI = "__file_uri"
ID = "__id"
BLOCK = "__block"
RAW = "__raw__"

DMS_LOAD = re.compile(r"^LOAD(?:_(\d+)_)?([0-9A-Fa-f]+)\.")
DMS_CHANGES = re.compile(r"^(\d{8})-(\d+)\.")


def dms_file_order(name: str) -> str | None:
    """A File's place in AWS DMS's order, as text that sorts like it: the full load's Files
    (``LOAD00000001.csv``, hexadecimal counters; ``LOAD_2_00000001`` with parallel load) before
    the change Files, which are named by the time they were written
    (``20260301-080500658.csv``; date folders do not change the name). None for another name."""
    load = DMS_LOAD.match(name)
    if load:
        segment = int(load.group(1) or 0)
        return f"0.{segment:06d}.{load.group(2).upper().rjust(16, '0')}"
    changes = DMS_CHANGES.match(name)
    if changes:
        return f"1.{changes.group(1)}-{changes.group(2).ljust(12, '0')}"
    return None


def file_effective_date(
    entity: Entity, name: str, given: date | None
) -> tuple[date | None, str | None]:
    """(a snapshot File's effective date, or None when its rows hold it; a problem, or None)."""
    eff = entity.effective_date
    assert eff is not None
    if eff.option:
        if given is None:
            raise ConfigError(
                f"entity {entity.name} takes each File's effective date from "
                "`runner ingest --effective-date YYYY-MM-DD`, and none was given"
            )
        return given, None
    if eff.file_pattern:
        m = re.search(eff.file_pattern, name)
        if m is None:
            return None, (
                f"the file name does not match effective_date file_pattern {eff.file_pattern!r}"
            )
        text = m.group("date") if "date" in m.re.groupindex else m.group(1)
        try:
            return datetime.strptime(text, eff.format).date(), None
        except ValueError:
            return None, (
                f"{text!r} in the file name is not a date in the format {eff.format!r} "
                "(effective_date file_pattern)"
            )
    return None, None


def read_files(
    spark: SparkSession,
    entity: Entity,
    header: list[str],
    paths: list[str],
    file_identity: str = "input_file_name",
    whole: bool = True,
) -> DataFrame:
    """The Files' raw values: strings for CSV and JSON lines (no inference), Parquet's own types;
    with each row's File, block (split start) and id (increasing within a task, in File order).
    ``whole`` reads CSV Files unsplit (records may span lines)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField(name, T.StringType()) for name in header]
        + [T.StructField(CORRUPT, T.StringType())]
    )
    if entity.format == "parquet":
        df = spark.read.parquet(*paths).withColumn(CORRUPT, F.lit(None).cast("string"))
    elif entity.format == "debezium" and entity.is_transactions:
        # One row per BEGIN, one per data collection of an END: identified before the explode
        # so that a row's number is its line.
        return read_transactions(
            spark, paths, CORRUPT, lambda df: identify(df, file_identity), (FILE_URI, BLOCK, ID)
        )
    elif entity.format == "debezium":
        df = read_debezium(spark, entity, paths, CORRUPT, file_identity == "metadata")
    elif entity.format == "json":
        df = read_json_lines(spark, schema, paths, CORRUPT)
    else:
        df = (
            spark.read.schema(schema)
            .option("header", entity.csv_header)
            .option("sep", entity.csv_delimiter)
            .option("quote", '"')
            .option("escape", '"')
            .option("multiLine", whole)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("nullValue", "")
            .option("encoding", "UTF-8")
            .csv(paths)
        )
    return identify(df, file_identity)


def identify(df: DataFrame, file_identity: str) -> DataFrame:
    """Each row's File, block (split start) and id (increasing within a task, in File order)."""
    from pyspark.sql import functions as F

    if file_identity == "metadata":
        df = df.withColumn(FILE_URI, F.col("_metadata.file_path")).withColumn(
            BLOCK, F.col("_metadata.file_block_start")
        )
    else:
        df = df.withColumn(FILE_URI, F.input_file_name()).withColumn(
            BLOCK, F.expr("input_file_block_start()")
        )
    return df.withColumn(ID, F.monotonically_increasing_id())


#: The per-File values a staged lineage column can be filled from (contract.sql, on "staged").
FILE_VALUES = ("__value_file_hash", "__value_file_name", "__value_file_path")


def typed_columns(raw: DataFrame, entity: Entity, header: list[str]) -> DataFrame:
    """The declared columns cast to their types (raw strings kept under ``RAW`` names)."""
    from pyspark.sql import functions as F

    placeholder = entity.unchanged_placeholder

    def raw_value(c: str) -> Column:
        # A partial update's placeholder ("unchanged", e.g. an unavailable TOAST value) is read
        # as the NULL that null_means: unchanged keeps the previous value for.
        if placeholder is not None and c in entity.unchanged_columns:
            return F.when(F.col(c).cast("string") == F.lit(placeholder), F.lit(None)).otherwise(
                F.col(c)
            )
        return F.col(c)

    envelope = [ENVELOPE, TS_MS, TOMBSTONE] if entity.format == "debezium" else []
    # A File without the operation column (a DMS full load): each row is operation_missing.
    # A column the File lacks (sync_all_columns, or one an earlier File added): NULL.
    absent = [
        (
            F.lit(entity.op_missing_means)
            if c.name == entity.operation_column
            else F.lit(None).cast("string")
        ).alias(RAW + c.name)
        for c in entity.columns
        if c.name not in header
    ]
    out = raw.select(
        *[raw_value(c).alias(RAW + c) for c in header],
        *absent,
        CORRUPT,
        *envelope,
        FILE_URI,
        BLOCK,
        ID,
    )
    out = out.select(
        "*", *[F.col(RAW + c.name).cast(c.data_type).alias(c.name) for c in entity.columns]
    )
    if entity.format == "debezium":
        out = out.withColumn(SEQUENCE_BASE, sequence_base(entity))
    elif len(entity.sequence_columns) > 1:
        out = out.withColumn(SEQUENCE_BASE, composite_sequence(entity))
    return out


def composite_sequence(entity: Entity) -> Column:
    """A sequence of several columns as one sortable string: each column's sortable text, a
    string followed by U+0001 (below any character it holds, so that a shorter string sorts
    before a longer one it begins), any other by ``.``."""
    from pyspark.sql import functions as F

    parts: list[Column] = []
    for name in entity.sequence_columns:
        kind = entity.column(name).data_type
        text = sortable_text(F.col(name), kind)
        as_text = not is_number_type(kind) and kind.lower() not in TIME_TYPES
        parts += [text, F.lit("\u0001" if as_text else ".")]
    return F.concat(*parts)


TIME_TYPES = ("timestamp", "timestamp_ntz", "date")


def sortable_text(value: Column, data_type: str) -> Column:
    """A sequence value as text that sorts like the value (non-negative numbers)."""
    from pyspark.sql import functions as F

    t = data_type.lower()
    if t in ("timestamp", "timestamp_ntz"):
        return F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if t == "date":
        return F.date_format(value, "yyyy-MM-dd")
    if is_number_type(t):
        return F.lpad(value.cast("string"), 40, "0")
    return value.cast("string")


def sequence_of(entity: Entity) -> str:
    """The column that orders an entity's changes in staging: the declared sequence, or for
    Debezium the sequence then ts_ms (``SEQUENCE_BASE``; a tie-break is appended at the write),
    and for a sequence of several columns their sortable text in turn (``SEQUENCE_BASE``)."""
    if entity.format == "debezium" or len(entity.sequence_columns) > 1:
        return SEQUENCE_BASE
    return ID if entity.file_order is not None else entity.sequence  # file order: see _by_line


def op_map(entity: Entity) -> Column:
    from pyspark.sql import functions as F

    return F.create_map(*[F.lit(x) for kv in entity.operations.items() for x in kv])


def file_spellings(f: FileToStage) -> set[str]:
    """The strings Spark may name a local File by (``input_file_name()``)."""
    assert isinstance(f.source, Path)
    plain = {str(f.source.resolve()), str(f.source)}
    encoded = {quote(p) for p in plain}
    return {*plain, *(f"file:{p}" for p in plain | encoded),
            *(f"file://{p}" for p in plain | encoded)}  # fmt: skip


_GLOB_CHARACTERS = re.compile(r"([\\*?\[\]{}])")


def literal_path(path: str) -> str:
    """``path`` as Spark's readers take it literally: they expand glob patterns (Hadoop's, where
    a backslash escapes the next character), so a File named ``a \\ b.csv`` or ``x[1].csv``
    would otherwise be "not found" or stand for other Files."""
    return _GLOB_CHARACTERS.sub(r"\\\1", path)


def uri_spellings(uri: str) -> set[str]:
    """The paths a file URI may stand for: percent-encoded or not, local paths for file:,
    and each scheme spelling of one store (s3a:// and s3://)."""

    if uri.startswith("file:"):
        plain = "/" + uri[len("file:") :].lstrip("/")
        return {plain, unquote(urlsplit("file://" + plain).path)}
    return {s for u in (uri, unquote(uri)) for s in same_store_spellings(u)}


def json_fields(
    spark: SparkSession, entity: Entity, files: list[FileToStage], file_identity: str
) -> dict[int, list[str]]:
    """Per JSON-lines File, the fields its lines hold that the entity does not declare, in the
    order they first appear."""
    from pyspark.sql import functions as F

    if not files:
        return {}
    declared = [c.name for c in entity.columns]
    text = identify(spark.read.text([literal_path(str(f.source)) for f in files]), file_identity)
    found = (
        text.select(FILE_URI, ID, F.explode(F.expr("json_object_keys(value)")).alias("field"))
        .where(~F.col("field").isin(declared))
        .groupBy(FILE_URI, "field")
        .agg(F.min(ID).alias("first"))
        .collect()
    )
    if not found:
        return {}
    by_uri = match_files(sorted({r[FILE_URI] for r in found}), files)
    out: dict[int, list[tuple[int, str]]] = {}
    for r in found:
        out.setdefault(by_uri[r[FILE_URI]].file_id, []).append((r["first"], r["field"]))
    return {k: [name for _, name in sorted(v)] for k, v in out.items()}


def undeclared_json_field(path: FilePath, entity: Entity, fields: list[str]) -> str:
    """Why a JSON-lines File with undeclared fields is quarantined, naming the first such
    field's line (the File is read again up to it: a rare path)."""
    wanted = set(fields)
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and wanted & record.keys():
                field = next(k for k in record if k in wanted)
                return (
                    f"{path.name}: line {number}, field {field!r}: not declared for entity "
                    f"{entity.name!r}" + SCHEMA_HINT
                )
    return (
        f"{path.name}: field {fields[0]!r}: not declared for entity {entity.name!r}" + SCHEMA_HINT
    )


def match_files(uris: list[str], files: list[FileToStage]) -> dict[str, FileToStage]:
    """Each URI Spark reported, mapped to the File it read. A URI that matches no File, or
    two, is an error: its rows would otherwise be dropped without a word."""
    by_path: dict[str, FileToStage] = {}
    for f in files:
        for spelling in {str(f.source), str(f.source.resolve()), *uri_spellings(str(f.source))}:
            by_path[spelling] = f
    out: dict[str, FileToStage] = {}
    for uri in uris:
        matches = {id(by_path[p]): by_path[p] for p in uri_spellings(uri) if p in by_path}
        if len(matches) != 1:
            raise IntegrityError(
                f"Spark read rows from {uri!r}, which matches "
                + ("no File of this batch" if not matches else "several Files")
                + f" ({', '.join(sorted(f.path.name for f in files))[:300]})"
            )
        out[uri] = next(iter(matches.values()))
    return out


def has_data_rows(path: FilePath, entity: Entity) -> bool:
    """Whether a File Spark read no rows from has any: a line with text after the header (text
    formats), or a row in its footer (Parquet)."""
    if entity.format == "parquet":
        import pyarrow.parquet as pq

        if isinstance(path, RemoteFile):
            with path.open("rb") as handle:
                return bool(pq.ParquetFile(handle).metadata.num_rows)
        return bool(pq.ParquetFile(path).metadata.num_rows)

    skip = 1 if entity.format == "csv" and entity.csv_header else 0
    with open_binary(path) as handle:
        for line in handle:
            if skip:
                skip -= 1
                continue
            if line.strip():
                return True
    return False
