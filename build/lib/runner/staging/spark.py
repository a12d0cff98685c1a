"""Read and validate an entity's Files with PySpark; the destination's writer stores the rows.

All Files of an entity that share a header are read in one Spark job (not one per File); each
row keeps its File's identity through ``input_file_name()`` (or ``_metadata.file_path``).
Files are read unsplit (``multiLine``), so a row's position in its File is its order inside its
Spark partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from runner.contract import lineage_columns, lineage_on
from runner.destinations.base import FileToStage, StagedBatch, StagingWriter
from runner.entities import Entity
from runner.errors import ConfigError, IntegrityError
from runner.fs import FilePath, RemoteFile
from runner.staging.validate import read_header, scan_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CORRUPT = "__corrupt_record"
ERROR = "__error"
FILE_URI = "__file_uri"
ORDER = "__order"
BLOCK = "__block"
RAW = "__raw__"


@dataclass
class StageResult:
    staged: dict[int, int] = field(default_factory=dict)  # file_id -> rows staged
    quarantined: dict[int, str] = field(default_factory=dict)  # file_id -> reason

    @property
    def rows(self) -> int:
        return sum(self.staged.values())


def stage_entity(
    spark: SparkSession,
    entity: Entity,
    files: list[FileToStage],
    process_id: str,
    writer: StagingWriter,
    file_identity: str = "input_file_name",
) -> StageResult:
    """Validate and stage ``files``; bad Files are reported, never partly written.

    ``file_identity`` is how a row names its File: ``input_file_name`` or ``metadata`` (the
    ``_metadata`` column, where ``input_file_name()`` is unavailable, as on Unity Catalog)."""
    result = StageResult()
    groups: dict[tuple[str, ...], list[FileToStage]] = {}
    for f in files:
        header, problem = read_header(f.path, entity)
        if not problem and entity.format != "parquet":
            problem = scan_text(f.path, entity)
        if problem:
            result.quarantined[f.file_id] = problem
        else:
            assert header is not None
            groups.setdefault(tuple(header), []).append(f)
    ingested_at = datetime.now(UTC).replace(tzinfo=None)
    for columns, group in groups.items():
        _stage_group(
            spark,
            entity,
            list(columns),
            group,
            process_id,
            ingested_at,
            result,
            writer,
            file_identity,
        )
    return result


def _read(
    spark: SparkSession,
    entity: Entity,
    header: list[str],
    paths: list[str],
    file_identity: str = "input_file_name",
) -> DataFrame:
    """The Files' raw values: strings for CSV and JSON lines (no inference), Parquet's own types.

    ``ORDER`` sorts rows in File order: the split's byte offset, then the position in the split.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField(name, T.StringType()) for name in header]
        + [T.StructField(CORRUPT, T.StringType())]
    )
    if entity.format == "parquet":
        df = spark.read.parquet(*paths).withColumn(CORRUPT, F.lit(None).cast("string"))
    elif entity.format == "json":
        df = (
            spark.read.schema(schema)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("encoding", "UTF-8")
            .json(paths)
        )
    else:
        df = (
            spark.read.schema(schema)
            .option("header", entity.csv_header)
            .option("sep", entity.csv_delimiter)
            .option("quote", '"')
            .option("escape", '"')
            .option("multiLine", True)  # unsplit Files: row order within a File is preserved
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .option("nullValue", "")
            .option("encoding", "UTF-8")
            .csv(paths)
        )
    if file_identity == "metadata":
        df = df.withColumn(FILE_URI, F.col("_metadata.file_path")).withColumn(
            BLOCK, F.col("_metadata.file_block_start")
        )
    else:
        df = df.withColumn(FILE_URI, F.input_file_name()).withColumn(
            BLOCK, F.expr("input_file_block_start()")
        )
    return df.withColumn(ORDER, F.monotonically_increasing_id())


#: The per-File values a staged lineage column can be filled from (contract.sql, on "staged").
FILE_VALUES = ("__value_file_hash", "__value_file_name", "__value_file_path")


def _staged_lineage(rows: DataFrame, entity: Entity) -> list[Column]:
    """The contract's staged lineage columns, in order, each from the value its key names."""
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    values = {
        "operation": F.col(lineage["operation"]),
        "sequence": F.col(lineage["sequence"]),
        "process_id": F.col(lineage["process_id"]),
        "row_number": F.col(lineage["row_number"]),
        "ingested_at": F.col(lineage["ingested_at"]),
        "file_hash": F.col(FILE_VALUES[0]),
        "file_name": F.col(FILE_VALUES[1]),
        "file_path": F.col(FILE_VALUES[2]),
    }
    out = []
    for col in lineage_on("staged"):
        if col.key not in values:
            raise ConfigError(
                f"contract.sql: staged lineage column {col.name!r} is filled from {col.key!r}, "
                f"a value the runner does not know (it knows: {', '.join(values)})"
            )
        out.append(values[col.key].alias(col.name))
    return out


def _stage_group(
    spark: SparkSession,
    entity: Entity,
    header: list[str],
    files: list[FileToStage],
    process_id: str,
    ingested_at: datetime,
    result: StageResult,
    writer: StagingWriter,
    file_identity: str,
) -> None:
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    raw = _read(spark, entity, header, [str(f.path) for f in files], file_identity)
    numbered = raw.withColumn(
        lineage["row_number"],
        F.row_number().over(Window.partitionBy(FILE_URI).orderBy(BLOCK, ORDER)).cast("bigint"),
    )
    # Keep each raw string under its own name: checks read the raw value, the cast goes out.
    typed = numbered.select(
        *[F.col(c).alias(RAW + c) for c in header],
        CORRUPT,
        FILE_URI,
        ORDER,
        lineage["row_number"],
    )
    malformed = (
        "not a valid JSON object"
        if entity.format == "json"
        else "wrong number of fields for the header"
    )
    checks = [F.when(F.col(CORRUPT).isNotNull(), F.lit(malformed))]
    for col in entity.columns:
        raw_col = F.col(RAW + col.name)
        typed = typed.withColumn(col.name, raw_col.cast(col.data_type))
        required = col.name in entity.keys or col.name == entity.sequence
        if required:
            checks.append(
                F.when(raw_col.isNull(), F.lit(f"column {col.name!r}: NULL in a key or sequence"))
            )
        if col.data_type not in ("string",):
            checks.append(
                F.when(
                    raw_col.isNotNull() & raw_col.cast(col.data_type).isNull(),
                    F.concat(
                        F.lit(f"column {col.name!r}: cannot cast "),
                        _quoted(raw_col.cast("string"), 60),
                        F.lit(f" to {col.data_type}"),
                    ),
                )
            )
            checks.append(_changed_by_cast(col.name, raw_col, col.data_type))
        for char, why in writer.forbidden_characters.items():
            if entity.format != "parquet" or col.data_type == "string":
                checks.append(
                    F.when(
                        F.instr(raw_col.cast("string"), char) > 0,
                        F.lit(f"column {col.name!r}: {why}"),
                    )
                )
    op_map = F.create_map(*[F.lit(x) for kv in entity.operations.items() for x in kv])
    op_raw = F.col(RAW + entity.operation_column)
    checks.append(
        F.when(
            op_raw.isNull() | op_map[op_raw].isNull(),
            F.concat(
                F.lit(f"column {entity.operation_column!r}: unknown operation code "),
                F.coalesce(_quoted(op_raw.cast("string"), 20), F.lit("NULL")),
                F.lit(f" (accepted: {', '.join(entity.operations)})"),
            ),
        )
    )
    business = [c.name for c in entity.columns]
    staged = (
        typed.withColumn(ERROR, F.coalesce(*checks))
        .withColumn(lineage["operation"], op_map[op_raw])
        .withColumn(lineage["sequence"], F.col(entity.sequence))
        .withColumn(lineage["process_id"], F.lit(process_id))
        .withColumn(lineage["ingested_at"], F.lit(ingested_at).cast("timestamp"))
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # Per File as Spark saw it: rows read, bad rows (the first named), distinct good rows.
        per_file = (
            staged.groupBy(FILE_URI)
            .agg(
                F.count("*").alias("read"),
                F.count(ERROR).alias("bad"),
                F.min_by(
                    F.struct(lineage["row_number"], ERROR),
                    F.when(F.col(ERROR).isNotNull(), F.col(lineage["row_number"])),
                ).alias("first"),
                F.count_distinct(
                    F.when(F.col(ERROR).isNull(), F.struct(*[F.col(c) for c in business]))
                ).alias("distinct"),
            )
            .collect()
        )
        by_uri = _match_files([r[FILE_URI] for r in per_file], files)
        read = {by_uri[r[FILE_URI]].file_id: r for r in per_file}
        for f in files:
            if f.file_id not in read and _has_data_rows(f.path, entity):
                raise IntegrityError(
                    f"{f.path.name}: Spark read no rows from a File that has data rows",
                    path=str(f.path),
                    content_hash=f.content_hash,
                )
        deduped = staged.where(F.col(ERROR).isNull()).dropDuplicates([FILE_URI, *business])
        conflicts = (
            deduped.groupBy(FILE_URI, *entity.keys, lineage["sequence"])
            .agg(
                F.count("*").alias("n"),
                F.min(lineage["row_number"]).alias("first_row"),
                F.max(lineage["row_number"]).alias("second_row"),
            )
            .where("n > 1")
            .groupBy(FILE_URI)
            .agg(
                F.min_by(F.struct("first_row", "second_row", *entity.keys), "first_row").alias("c")
            )
            .collect()
        )
        bad: dict[int, str] = {}
        for r in per_file:
            if r["bad"]:
                line = _at(entity, r["first"][0])
                more = f" ({r['bad'] - 1} more bad rows)" if r["bad"] > 1 else ""
                bad[by_uri[r[FILE_URI]].file_id] = f"{line}, {r['first'][1]}{more}"
        for r in conflicts:
            c = r["c"]
            key = ", ".join(f"{k}={c[k]}" for k in entity.keys)
            bad.setdefault(
                by_uri[r[FILE_URI]].file_id,
                f"{_at(entity, c['second_row'])}, column {entity.sequence!r}: conflicts "
                f"with {_at(entity, c['first_row'])}: same key ({key}) and same sequence, "
                "different values",
            )
        for f in files:
            if f.file_id in bad:
                result.quarantined[f.file_id] = f"{f.path.name}: {bad[f.file_id]}"
        good = [f for f in files if f.file_id not in bad]
        if not good:
            return
        # Rows find their File by the exact string Spark gave, never by a re-spelling of it.
        file_map = spark.createDataFrame(
            [
                (uri, f.content_hash, f.path.name, str(f.path))
                for uri, f in by_uri.items()
                if f.file_id not in bad
            ],
            f"{FILE_URI} string, {FILE_VALUES[0]} string, {FILE_VALUES[1]} string, "
            f"{FILE_VALUES[2]} string",
        )
        joined = deduped.join(F.broadcast(file_map), FILE_URI, "inner")
        out = joined.select(*business, *_staged_lineage(joined, entity)).sortWithinPartitions(
            lineage["file_hash"], lineage["sequence"]
        )
        counts = {
            r[lineage["file_hash"]]: r["n"]
            for r in out.groupBy(lineage["file_hash"]).agg(F.count("*").alias("n")).collect()
        }
        for f in good:
            expected = read[f.file_id]["distinct"] if f.file_id in read else 0
            if counts.get(f.content_hash, 0) != expected:
                raise IntegrityError(
                    f"{f.path.name}: {expected} distinct rows read but "
                    f"{counts.get(f.content_hash, 0)} about to be staged",
                    path=str(f.path),
                    content_hash=f.content_hash,
                )
        writer.write(spark, StagedBatch(entity, out, good, counts, process_id, ingested_at))
        for f in good:
            result.staged[f.file_id] = counts.get(f.content_hash, 0)
    finally:
        staged.unpersist()


def _uri_spellings(uri: str) -> set[str]:
    """The paths a file URI may stand for: percent-encoded or not, local paths for file:,
    and each scheme spelling of one store (s3a:// and s3://)."""
    from urllib.parse import unquote, urlsplit

    from runner.fs import same_store_spellings

    if uri.startswith("file:"):
        plain = "/" + uri[len("file:") :].lstrip("/")
        return {plain, unquote(urlsplit("file://" + plain).path)}
    return {s for u in (uri, unquote(uri)) for s in same_store_spellings(u)}


def _match_files(uris: list[str], files: list[FileToStage]) -> dict[str, FileToStage]:
    """Each URI Spark reported, mapped to the File it read. A URI that matches no File, or
    two, is an error: its rows would otherwise be dropped without a word."""
    by_path: dict[str, FileToStage] = {}
    for f in files:
        for spelling in {str(f.path), str(f.path.resolve()), *_uri_spellings(str(f.path))}:
            by_path[spelling] = f
    out: dict[str, FileToStage] = {}
    for uri in uris:
        matches = {id(by_path[p]): by_path[p] for p in _uri_spellings(uri) if p in by_path}
        if len(matches) != 1:
            raise IntegrityError(
                f"Spark read rows from {uri!r}, which matches "
                + ("no File of this batch" if not matches else "several Files")
                + f" ({', '.join(sorted(f.path.name for f in files))[:300]})"
            )
        out[uri] = next(iter(matches.values()))
    return out


def _has_data_rows(path: FilePath, entity: Entity) -> bool:
    """Whether a File Spark read no rows from has any: a line with text after the header (text
    formats), or a row in its footer (Parquet)."""
    if entity.format == "parquet":
        import pyarrow.parquet as pq

        if isinstance(path, RemoteFile):
            with path.open("rb") as handle:
                return bool(pq.ParquetFile(handle).metadata.num_rows)
        return bool(pq.ParquetFile(path).metadata.num_rows)
    from runner.staging.validate import open_binary

    skip = 1 if entity.format == "csv" and entity.csv_header else 0
    with open_binary(path) as handle:
        for line in handle:
            if skip:
                skip -= 1
                continue
            if line.strip():
                return True
    return False


def _changed_by_cast(name: str, raw: Column, data_type: str) -> Column:
    """NULL, or why casting ``raw`` to ``data_type`` would store a different value than the File
    holds (Spark rounds 10.005 into decimal(12,2) and truncates 1.5 into int without a word)."""
    import re

    from pyspark.sql import functions as F

    text = F.trim(raw.cast("string"))
    cast = raw.cast(data_type)
    changed: Column | None = None
    t = data_type.lower()
    if t in ("tinyint", "smallint", "int", "integer", "bigint"):
        changed = ~text.rlike(r"^[+-]?[0-9]+(\.0*)?$")
    elif t.startswith("decimal"):
        m = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", t)
        scale = int(m.group(2)) if m else 0
        fraction = F.regexp_extract(text, r"^[+-]?[0-9]*\.([0-9]*)$", 1)
        changed = F.when(
            text.rlike(r"^[+-]?[0-9]*\.?[0-9]*$"),
            F.substring(fraction, scale + 1, 1 << 20).rlike("[1-9]"),
        ).otherwise(raw.cast("decimal(38,18)") != cast)
    elif t == "date":
        changed = raw.cast("timestamp") != cast.cast("timestamp")
    elif t in ("timestamp", "timestamp_ntz"):
        changed = text.rlike(r"[.,][0-9]{6}[0-9]*[1-9]")  # beyond microseconds
    elif t in ("float", "double"):
        changed = (F.abs(cast) == float("inf")) & ~text.rlike("(?i)inf")
    elif re.fullmatch(r"(varchar|char)\(\d+\)", t):
        width = int(t[t.index("(") + 1 : -1])
        changed = F.length(raw.cast("string")) > width
    if changed is None:
        return F.lit(None).cast("string")
    return F.when(
        raw.isNotNull() & cast.isNotNull() & changed,
        F.concat(
            F.lit(f"column {name!r}: "),
            _quoted(raw.cast("string"), 60),
            F.lit(f" does not fit {data_type} unchanged (it would be stored as "),
            F.coalesce(cast.cast("string"), F.lit("NULL")),
            F.lit(")"),
        ),
    )


def _quoted(column: Column, width: int) -> Column:
    """A raw value for an error message: double-quoted, cut to ``width`` characters."""
    from pyspark.sql import functions as F

    return F.concat(F.lit('"'), F.substring(column, 1, width), F.lit('"'))


def _line(entity: Entity, row_number: int) -> int:
    """Line of a data row in its File (the header is line 1)."""
    header = entity.format == "csv" and entity.csv_header
    return int(row_number) + (1 if header else 0)


def _at(entity: Entity, row_number: int) -> str:
    """Where a row is, for a message: its line in a text File, its row in a Parquet File."""
    if entity.format == "parquet":
        return f"row {int(row_number)}"
    return f"line {_line(entity, row_number)}"
