"""Read and validate an entity's Files with PySpark; the destination's writer stores the rows.

All Files of an entity that share a header are read in one Spark job (not one per File); each
row keeps its File's identity through ``input_file_name()`` (or ``_metadata.file_path``).

Two passes over the Files, each a single Spark job, and nothing cached:

1. One aggregate (SQL ``GROUPING SETS``, so the Files are scanned once) gives, per File block
   (a split: one for a small File, one per ``maxPartitionBytes`` of a large one), its rows, its
   first row id and its bad rows (the first named); and per File its exact duplicates (same
   key, same sequence, same values: dropped) and conflicts (same key and sequence, different
   values: the File is quarantined). Values are compared by two hashes of the typed row (96
   bits).
2. The write: rows of the good Files, typed, numbered, with their lineage, sorted by sequence
   within each task, in one append (one commit) and one manifest write.

A row's position in its File comes without a sort: Spark reads a split in order and
``monotonically_increasing_id()`` counts the rows of a task, so a row's number is the rows of
the File's earlier blocks plus its distance from its block's first id. CSV Files without a
newline inside quotes (found while scanning the bytes) are read split at lines, so a large File
is read by many tasks; a File with such records is read whole (``multiLine``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from runner.contract import lineage_columns, lineage_on
from runner.destinations.base import FileToStage, Restage, StagedBatch, StagingWriter
from runner.entities import INTEGER_TYPES, Entity
from runner.entities import Column as EntityColumn
from runner.errors import ConfigError, IntegrityError
from runner.fs import FilePath, RemoteFile, same_store_spellings
from runner.staging import reloads
from runner.staging.debezium import (
    ENVELOPE,
    SEQUENCE_BASE,
    TOMBSTONE,
    TS_MS,
    column_field,
    negative_sequence,
    read_debezium,
    read_json_lines,
    read_transactions,
    sequence_base,
)
from runner.staging.row_hash import hash_of
from runner.staging.schema import Evolution, declared_vs_table, evolve, parquet_types
from runner.staging.validate import (
    SCHEMA_HINT,
    open_binary,
    read_header,
    scan_text_file,
    undeclared,
)

log = logging.getLogger("runner.staging")

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CORRUPT = "__corrupt_record"
ERROR = "__error"
FILE_URI = "__file_uri"
ID = "__id"
BLOCK = "__block"
RAW = "__raw__"
FIRST_ID = "__first_id"
OFFSET = "__offset"
H1, H2 = "__h1", "__h2"
EFFECTIVE = "__value_effective_date"
FILE_ORDER = "__value_file_order"
CSV_PRUNING = "spark.sql.csv.parser.columnPruning.enabled"
LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"


@dataclass
class StageResult:
    staged: dict[int, int] = field(default_factory=dict)  # file_id -> rows staged
    quarantined: dict[int, str] = field(default_factory=dict)  # file_id -> reason
    skipped: dict[int, int] = field(default_factory=dict)  # file_id -> Kafka tombstones skipped
    # file_id -> the columns its File added to the staging table (on_schema_change)
    added: dict[int, list[EntityColumn]] = field(default_factory=dict)

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
    effective_date: date | None = None,
    earlier: Sequence[Sequence[str]] = (),
) -> StageResult:
    """Validate and stage ``files``; bad Files are reported, never partly written.

    ``file_identity`` is how a row names its File: ``input_file_name`` or ``metadata`` (the
    ``_metadata`` column, where ``input_file_name()`` is unavailable, as on Unity Catalog).
    ``effective_date`` is `runner ingest --effective-date`, for snapshot entities that take it.
    ``earlier``: the names of the entity's Files staged before, batch by batch in staging order
    (what tells a DMS reload from the first full load: runner/staging/reloads.py)."""
    result = StageResult()
    table = writer.table_columns(spark, entity)
    _, problem = declared_vs_table(entity, table, writer.stored_type)
    if problem:  # staging would lose values: every File waits for the declaration to agree
        result.quarantined.update({f.file_id: f"{f.path.name}: {problem}" for f in files})
        return result
    groups: dict[tuple[tuple[str, ...], bool], list[FileToStage]] = {}
    evolved: dict[tuple[tuple[str, ...], bool], Evolution] = {}
    # JSON lines name their fields line by line: the undeclared ones, per File (one Spark job).
    json_extra = (
        _json_fields(spark, entity, files, file_identity) if entity.format == "json" else {}
    )
    dates: dict[int, date] = {}
    orders: dict[int, str] = {}
    reload = reloads.plan(
        entity,
        earlier,
        [(f.file_id, f.path.name) for f in files],
        {n: p for n in {*(n for b in earlier for n in b), *(f.path.name for f in files)}
         if (p := dms_file_order(n)) is not None},
    )  # fmt: skip
    for f in files:
        if entity.file_order is not None:
            place = reload.places.get(f.file_id) or dms_file_order(f.path.name)
            if place is None:
                result.quarantined[f.file_id] = (
                    f"{f.path.name}: not a name AWS DMS gives its Files (LOAD<hex counter> for "
                    "the full load, <yyyymmdd>-<time digits> for changes); meta.cdc.sequence "
                    "file_order: dms orders Files by those names"
                )
                continue
            orders[f.file_id] = place
        if entity.is_snapshot:
            when, problem = file_effective_date(entity, f.path.name, effective_date)
            if problem:
                result.quarantined[f.file_id] = f"{f.path.name}: {problem}"
                continue
            if when is not None:
                dates[f.file_id] = when
        header, problem = read_header(f.source, entity)
        if header is not None and json_extra.get(f.file_id):
            header = header + json_extra[f.file_id]
            if entity.on_schema_change == "fail":
                extra = json_extra[f.file_id]
                header, problem = None, undeclared_json_field(f.source, entity, extra)
        whole = False
        if not problem and entity.format != "parquet":
            scan = scan_text_file(f.source, entity)
            problem, whole = scan.problem, scan.multiline_records
        if problem:
            result.quarantined[f.file_id] = problem
        else:
            assert header is not None
            left_out = undeclared(header, f.path, entity)
            if left_out and not entity.evolves:
                log.warning(
                    "%s: %s not declared for %s: staged without (meta.cdc.on_schema_change: "
                    "ignore)", f.path.name, ", ".join(repr(c) for c in left_out), entity.name
                )  # fmt: skip
            key = (tuple(header), whole)
            if key not in evolved:
                types = parquet_types(f.source) if entity.format == "parquet" and left_out else None
                evolved[key] = evolve(entity, header, table, types)
            if evolved[key].added:
                result.added[f.file_id] = evolved[key].added
            groups.setdefault(key, []).append(f)
    ingested_at = datetime.now(UTC).replace(tzinfo=None)
    # A CSV row with the wrong number of fields is malformed only when every column is parsed:
    # with column pruning (Spark's default) a query reading some columns misses it.
    # Local Files are listed by the driver: past Spark's threshold (32 paths) it lists them
    # with a job of one task per File, seconds for what a stat per File does at once.
    local = all(isinstance(f.source, Path) for f in files)
    settings = {CSV_PRUNING: "false", **({LISTING: str(len(files) + 1)} if local else {})}
    with _session_conf(spark, settings):
        for (columns, whole), group in groups.items():
            _stage_group(
                spark,
                evolved[(columns, whole)].entity,
                list(columns),
                whole,
                group,
                process_id,
                ingested_at,
                result,
                writer,
                file_identity,
                dates,
                orders,
                reload,
            )
    return result


@contextmanager
def _session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The session's ``settings`` while the block runs; each one as it was afterwards."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


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


def _read(
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
            spark, paths, CORRUPT, lambda df: _identify(df, file_identity), (FILE_URI, BLOCK, ID)
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
    return _identify(df, file_identity)


def _identify(df: DataFrame, file_identity: str) -> DataFrame:
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


def _staged_lineage(rows: DataFrame, entity: Entity) -> list[Column]:
    """The contract's staged lineage columns, in order, each from the value its key names."""
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    values = {
        "key_hash": F.col(lineage["key_hash"]),
        "row_hash": F.col(lineage["row_hash"]),
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
    for col in lineage_on("staged", entity.mode):
        if col.key not in values:
            raise ConfigError(
                f"contract.sql: staged lineage column {col.name!r} is filled from {col.key!r}, "
                f"a value the runner does not know (it knows: {', '.join(values)})"
            )
        out.append(values[col.key].alias(col.name))
    return out


def _typed(raw: DataFrame, entity: Entity, header: list[str]) -> DataFrame:
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
    return out


def _error(entity: Entity, writer: StagingWriter) -> Column:
    """NULL for a good row, else why it is bad (the first reason)."""
    from pyspark.sql import functions as F

    malformed = {
        "json": "not a valid JSON object",
        "debezium": "not a Debezium envelope (invalid JSON, or a field of the wrong JSON type)",
    }.get(
        entity.format,
        "wrong number of fields for the header"
        if entity.csv_header
        else "wrong number of fields (the File has no header row: its fields are the declared "
        "columns, in order)",
    )
    checks = [F.when(F.col(CORRUPT).isNotNull(), F.lit(malformed))]
    debezium = entity.format == "debezium"
    if debezium:
        checks.append(F.col(ENVELOPE))

    def named(column: str) -> str:
        return f"field {column_field(entity, column)!r}" if debezium else f"column {column!r}"

    eff = entity.effective_date
    op_value = _op_map(entity)[F.col(RAW + entity.operation_column)]

    def null_key(column: str, what: str) -> Column:
        """A NULL key or sequence; a Debezium delete's key is its ``before``'s field."""
        if not debezium or column in entity.debezium_fields:
            return F.lit(f"{named(column)}: NULL in {what}")
        side = F.when(op_value == F.lit("D"), F.lit("before.")).otherwise(F.lit("after."))
        return F.concat(F.lit("field '"), side, F.lit(f"{column}': NULL in {what}"))

    truncate = F.coalesce(op_value == F.lit("T"), F.lit(False)) if entity.truncates else None
    for col in entity.columns:
        raw_col = F.col(RAW + col.name)
        if col.name in entity.keys and truncate is not None:
            # A truncate is of the whole table: its key columns may be empty.
            checks.append(F.when(raw_col.isNull() & ~truncate, null_key(col.name, "a key")))
        elif col.name in entity.keys or col.name in entity.sequence_columns:
            what = "a key" if entity.is_snapshot else "a key or sequence"
            checks.append(F.when(raw_col.isNull(), null_key(col.name, what)))
        elif eff is not None and col.name == eff.column:
            checks.append(
                F.when(raw_col.isNull(), F.lit(f"column {col.name!r}: NULL effective date"))
            )
        if col.data_type not in ("string",):
            checks.append(
                F.when(
                    raw_col.isNotNull() & F.col(col.name).isNull(),
                    F.concat(
                        F.lit(f"{named(col.name)}: cannot cast "),
                        _quoted(raw_col.cast("string"), 60),
                        F.lit(f" to {col.data_type}"),
                    ),
                )
            )
            checks.append(_changed_by_cast(named(col.name), raw_col, col.data_type))
        for char, why in writer.forbidden_characters.items():
            if entity.format != "parquet" or col.data_type == "string":
                checks.append(
                    F.when(
                        F.instr(raw_col.cast("string"), char) > 0,
                        F.lit(f"{named(col.name)}: {why}"),
                    )
                )
    if entity.is_snapshot:
        return F.coalesce(*checks)
    if debezium and (negative := negative_sequence(entity)) is not None:
        checks.append(negative)
    if not debezium and entity.sequence_ties:
        checks.append(_unsortable_sequence(entity))
    op_raw = F.col(RAW + entity.operation_column)
    checks.append(
        F.when(
            op_raw.isNull() | _op_map(entity)[op_raw].isNull(),
            F.concat(
                F.lit(f"{named(entity.operation_column)}: unknown operation code "),
                F.coalesce(_quoted(op_raw.cast("string"), 20), F.lit("NULL")),
                F.lit(f" (accepted: {', '.join(entity.operations)})"),
            ),
        )
    )
    if debezium:
        return F.when(~F.col(TOMBSTONE), F.coalesce(*checks))
    return F.coalesce(*checks)


def _sequence_of(entity: Entity) -> str:
    """The column that orders an entity's changes in staging: the declared sequence, or for
    Debezium the sequence then ts_ms (``SEQUENCE_BASE``; a tie-break is appended at the write)."""
    if entity.format == "debezium":
        return SEQUENCE_BASE
    return ID if entity.file_order is not None else entity.sequence  # file order: see _by_line


def _op_map(entity: Entity) -> Column:
    from pyspark.sql import functions as F

    return F.create_map(*[F.lit(x) for kv in entity.operations.items() for x in kv])


@dataclass
class _FileStats:
    """What pass 1 learnt about one File (as Spark named it). Ids are
    ``monotonically_increasing_id()`` values: the task's index in the upper bits, so one task
    holds at most one block of a File (blocks are as large as tasks)."""

    blocks: dict[int, tuple[int, int]] = field(default_factory=dict)  # start -> (rows, first id)
    bad: int = 0
    bad_ids: list[int] = field(default_factory=list)  # the first bad row's id per block
    first_bad: int | None = None  # id of the File's first bad row
    duplicates: int = 0  # rows dropped as exact duplicates of an earlier row
    tombstones: int = 0  # Kafka tombstones (blank or null lines) skipped
    conflict: tuple[int, int] | None = None  # ids of two rows of one conflict
    # snapshot Files whose rows hold the effective date: (lowest, its id), (highest, its id)
    date_low: tuple[date, int] | None = None
    date_high: tuple[date, int] | None = None

    @property
    def read(self) -> int:
        return sum(rows for rows, _ in self.blocks.values())

    def offsets(self) -> dict[int, int]:
        """Block start -> rows of the File before it."""
        out, before = {}, 0
        for start in sorted(self.blocks):
            out[start] = before
            before += self.blocks[start][0]
        return out

    def block_of(self, row_id: int) -> int:
        task = row_id >> 33
        return next(b for b, (_, first) in self.blocks.items() if first >> 33 == task)

    def row_number(self, row_id: int) -> int:
        """The 1-based position in the File of the row with id ``row_id``."""
        block = self.block_of(row_id)
        return self.offsets()[block] + row_id - self.blocks[block][1] + 1


def _scan_stats(
    spark: SparkSession, typed: DataFrame, entity: Entity, writer: StagingWriter
) -> dict[str, _FileStats]:
    """Pass 1: every File's blocks, bad rows, exact duplicates and conflicts (fixed-width
    aggregates only, so Spark keeps them in a hash map, never sorts).

    Duplicates and conflicts can only be where a File holds one key and sequence twice. One job
    counts the rows of each File's blocks and, beside it, the good rows per 64-bit hash of
    (File, key, sequence): a narrow group that holds no values. Only when some hash is on two
    rows does a second job compare those rows' keys, sequences and values exactly (equal hashes
    of different keys are told apart there)."""
    from pyspark.sql import functions as F

    business = [c.name for c in entity.columns]
    keys = [f"__k{i}" for i in range(len(entity.keys))]
    eff = entity.effective_date
    snapshot = entity.is_snapshot
    tombstone = F.col(TOMBSTONE) if entity.format == "debezium" else F.lit(False)
    bad = _error(entity, writer).isNotNull()
    # Ties broken by the line: every row its own group (no duplicates, no conflicts).
    by_line = entity.ordered_by_line
    sequence = F.lit(None) if snapshot or by_line else F.col(_sequence_of(entity))
    skip = bad | tombstone
    key_values = [F.col(k) for k in entity.keys]
    rows = typed.select(
        FILE_URI,
        BLOCK,
        ID,
        bad.alias("__bad"),
        tombstone.alias("__tomb"),
        *[F.col(k).alias(a) for k, a in zip(entity.keys, keys, strict=True)],
        sequence.alias("__seq"),
        (
            F.lit(None).cast("bigint")
            if by_line
            else F.when(~skip, F.xxhash64(F.col(FILE_URI), *key_values, sequence))
        ).alias("__kh"),
        F.xxhash64(*[F.col(c) for c in business]).alias(H1),
        F.hash(*[F.col(c) for c in business]).alias(H2),
        (F.col(eff.column) if eff and eff.column else F.lit(None).cast("date")).alias("__eff"),
    )
    view = f"__cdc_stage_{id(rows)}"
    rows.createOrReplaceTempView(view)
    try:
        found = spark.sql(
            f"""
            SELECT {FILE_URI} AS f, {BLOCK} AS b, __kh AS kh, grouping({BLOCK}) AS by_key,
                count(*) AS n, min({ID}) AS first_id,
                count_if(__bad) AS bad, min(CASE WHEN __bad THEN {ID} END) AS first_bad,
                count_if(__tomb) AS tomb,
                min(__eff) AS eff_low, min_by({ID}, __eff) AS eff_low_id,
                max(__eff) AS eff_high, max_by({ID}, __eff) AS eff_high_id
            FROM {view}
            GROUP BY GROUPING SETS (({FILE_URI}, {BLOCK}), (__kh))
            HAVING by_key = 0 OR (kh IS NOT NULL AND n > 1)
            """
        ).collect()
        twice = [int(r["kh"]) for r in found if r["by_key"] != 0]
        groups = _same_key_and_sequence(spark, view, keys, snapshot, twice) if twice else []
    finally:
        spark.catalog.dropTempView(view)
    stats: dict[str, _FileStats] = {}
    for r in found:
        if r["by_key"] != 0:
            continue
        st = stats.setdefault(r["f"], _FileStats())
        st.blocks[int(r["b"])] = (int(r["n"]), int(r["first_id"]))
        st.bad += int(r["bad"])
        st.tombstones += int(r["tomb"] or 0)
        if r["eff_low"] is not None:
            low = (r["eff_low"], int(r["eff_low_id"]))
            high = (r["eff_high"], int(r["eff_high_id"]))
            st.date_low = min(st.date_low or low, low, key=lambda d: d[0])
            st.date_high = max(st.date_high or high, high, key=lambda d: d[0])
        if r["first_bad"] is not None:
            st.bad_ids.append(int(r["first_bad"]))  # the first of its block
    for r in groups:
        st = stats[r["f"]]
        st.duplicates += int(r["duplicates"] or 0)
        if r["conflict_first"] is not None:
            st.conflict = (int(r["conflict_first"]), int(r["conflict_last"]))
    for st in stats.values():
        if st.bad_ids:
            st.first_bad = min(st.bad_ids, key=st.row_number)
    return stats


def _same_key_and_sequence(
    spark: SparkSession, view: str, keys: list[str], snapshot: bool, hashes: list[int]
) -> list[Any]:
    """Per File, its exact duplicates and its first conflict, among the good rows whose
    (File, key, sequence) hash is one of ``hashes``: groups of one key and sequence holding
    more than one row are duplicates when their values are equal, conflicts when not."""
    # In a snapshot File a key is on one row: two rows of a key conflict even when equal.
    differ = "true" if snapshot else f"min({H1}) <> max({H1}) OR min({H2}) <> max({H2})"
    wanted = f"__cdc_twice_{id(hashes)}"
    spark.createDataFrame([(h,) for h in hashes], "kh bigint").createOrReplaceTempView(wanted)
    try:
        return spark.sql(
            f"""
            WITH g AS (
                SELECT {FILE_URI} AS f, count(*) AS n, min({ID}) AS first_id,
                    max({ID}) AS last_id, {differ} AS differ
                FROM {view}
                WHERE __kh IN (SELECT kh FROM {wanted})
                GROUP BY {FILE_URI}, {", ".join(keys)}, __seq
                HAVING n > 1
            )
            SELECT f, sum(CASE WHEN NOT differ THEN n - 1 ELSE 0 END) AS duplicates,
                min(CASE WHEN differ THEN first_id END) AS conflict_first,
                min_by(last_id, CASE WHEN differ THEN first_id END) AS conflict_last
            FROM g GROUP BY f
            """
        ).collect()
    finally:
        spark.catalog.dropTempView(wanted)


def _explain(
    typed: DataFrame, entity: Entity, writer: StagingWriter, wanted: dict[str, list[int]]
) -> dict[tuple[str, int], Any]:
    """(File, id) -> that row's reason (when bad) and key values, for the few rows an error
    message names: a scan of the Files, only when some File is bad."""
    from pyspark.sql import functions as F

    cond = None
    for uri, ids in wanted.items():
        c = (F.col(FILE_URI) == F.lit(uri)) & F.col(ID).isin(ids)
        cond = c if cond is None else cond | c
    if cond is None:
        return {}
    found = (
        typed.select(FILE_URI, ID, _error(entity, writer).alias(ERROR), *entity.keys)
        .where(cond)
        .collect()
    )
    return {(r[FILE_URI], int(r[ID])): r for r in found}


def _stage_group(
    spark: SparkSession,
    entity: Entity,
    header: list[str],
    whole: bool,
    files: list[FileToStage],
    process_id: str,
    ingested_at: datetime,
    result: StageResult,
    writer: StagingWriter,
    file_identity: str,
    dates: dict[int, date],
    orders: dict[int, str],
    reload: reloads.ReloadPlan | None = None,
) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if _one_pass_fits(entity, files, writer, reload):
        try:
            with _session_conf(spark, {SPLIT: WHOLE_FILE, OPEN_COST: WHOLE_FILE}):
                _stage_in_one_pass(
                    spark, entity, header, whole, files, process_id, ingested_at, result,
                    writer, file_identity, orders,
                )  # fmt: skip
            return
        except Restage:
            log.info("%s: a File holds a bad row, a duplicate or a conflict; checking each "
                     "File before staging it", entity.name)  # fmt: skip
    lineage = lineage_columns()
    paths = [literal_path(str(f.source)) for f in files]
    raw = _read(spark, entity, header, paths, file_identity, whole)
    typed = _typed(raw, entity, header)
    stats = _scan_stats(spark, typed, entity, writer)
    by_uri = _match_files(list(stats), files)
    seen = {by_uri[uri].file_id for uri in stats}
    for f in files:
        if f.file_id not in seen and _has_data_rows(f.source, entity):
            raise IntegrityError(
                f"{f.path.name}: Spark read no rows from a File that has data rows",
                path=str(f.path),
                content_hash=f.content_hash,
            )
    conflicts = entity.format != "debezium"  # Debezium: ties, ordered by line (no message)
    named = {
        uri: [i for i in (st.first_bad, *((conflicts and st.conflict) or ())) if i is not None]
        for uri, st in stats.items()
        if st.first_bad is not None or (conflicts and st.conflict is not None)
    }
    eff = entity.effective_date
    for uri, st in stats.items():  # snapshot Files whose rows hold the effective date
        if st.date_low and st.date_high and st.date_low[0] != st.date_high[0]:
            named.setdefault(uri, []).extend([st.date_low[1], st.date_high[1]])
    rows_named = _explain(typed, entity, writer, named) if named else {}
    bad: dict[int, str] = {}
    ties = False  # Debezium: events of one key with the same sequence and ts_ms in a File
    for uri, st in stats.items():
        f = by_uri[uri]
        if st.first_bad is not None:
            row = rows_named[(uri, st.first_bad)]
            more = f" ({st.bad - 1} more bad rows)" if st.bad > 1 else ""
            bad[f.file_id] = f"{_at(entity, st.row_number(st.first_bad))}, {row[ERROR]}{more}"
        elif st.conflict is not None and entity.format == "debezium":
            ties = True  # ordered by line at the write (the sequence's tie-break)
        elif st.conflict is not None:
            row = rows_named[(uri, st.conflict[0])]
            names = ", ".join(f"{k}={row[k]}" for k in entity.keys)
            first, second = sorted(st.row_number(i) for i in st.conflict)
            if entity.is_snapshot:
                bad[f.file_id] = (
                    f"{_at(entity, second)}: same key ({names}) as {_at(entity, first)}; "
                    "a snapshot File has one row per key"
                )
            else:
                bad[f.file_id] = (
                    f"{_at(entity, second)}, column {entity.sequence!r}: conflicts with "
                    f"{_at(entity, first)}: same key ({names}) and same sequence, different values"
                )
        elif st.date_low and st.date_high and st.date_low[0] != st.date_high[0]:
            assert eff is not None and eff.column is not None
            (low, low_id), (high, high_id) = st.date_low, st.date_high
            a, b = sorted([(st.row_number(low_id), low), (st.row_number(high_id), high)])
            bad[f.file_id] = (
                f"{_at(entity, b[0])}, column {eff.column!r}: effective date {b[1]} differs from "
                f"{a[1]} at {_at(entity, a[0])}; a snapshot File has one effective date"
            )
        elif st.date_low is not None:
            dates[f.file_id] = st.date_low[0]
    if eff is not None and eff.column:
        for f in files:
            if f.file_id not in dates and f.file_id not in bad:
                bad[f.file_id] = (
                    f"no data rows, so no effective date (it comes from column {eff.column!r})"
                )
    for f in files:
        if f.file_id in bad:
            result.quarantined[f.file_id] = f"{f.path.name}: {bad[f.file_id]}"
    good = [f for f in files if f.file_id not in bad]
    if not good:
        return
    counts = {f.content_hash: 0 for f in good}
    blocks = []  # rows find their File by the exact string Spark gave, never a re-spelling
    for uri, st in stats.items():
        f = by_uri[uri]
        if f.file_id in bad:
            continue
        counts[f.content_hash] = st.read - st.duplicates - st.tombstones
        if st.tombstones:
            result.skipped[f.file_id] = st.tombstones
        offsets = st.offsets()
        for start, (_, first_id) in st.blocks.items():
            blocks.append(
                (
                    uri,
                    start,
                    first_id,
                    offsets[start],
                    f.content_hash,
                    f.path.name,
                    str(f.path),
                    dates.get(f.file_id),
                    orders.get(f.file_id),
                )
            )
    block_map = spark.createDataFrame(
        blocks,
        f"{FILE_URI} string, {BLOCK} bigint, {FIRST_ID} bigint, {OFFSET} bigint, "
        f"{FILE_VALUES[0]} string, {FILE_VALUES[1]} string, {FILE_VALUES[2]} string, "
        f"{EFFECTIVE} date, {FILE_ORDER} string",
    )
    business = [c.name for c in entity.columns]
    # Pass 2. Every row of a good File is a good row: no checks to evaluate again.
    if entity.format == "debezium":
        typed = typed.where(~F.col(TOMBSTONE))
    rows = (
        typed.join(F.broadcast(block_map), [FILE_URI, BLOCK], "inner")
        .withColumn(lineage["row_number"], F.col(ID) - F.col(FIRST_ID) + F.col(OFFSET) + F.lit(1))
        .withColumn(lineage["process_id"], F.lit(process_id))
        .withColumn(lineage["ingested_at"], F.lit(ingested_at).cast("timestamp"))
    )
    if entity.is_snapshot:
        # The operation is the apply's to say (I or U); the sequence is the effective date.
        types = {c.name: c.data_type for c in entity.columns}
        rows = (
            rows.withColumn(lineage["operation"], F.lit(None).cast("string"))
            .withColumn(lineage["sequence"], F.col(EFFECTIVE))
            .withColumn(lineage["key_hash"], hash_of([(k, types[k]) for k in entity.keys]))
            .withColumn(lineage["row_hash"], hash_of([(c, types[c]) for c in entity.compare]))
        )
    else:
        rows = rows.withColumn(
            lineage["operation"], _op_map(entity)[F.col(RAW + entity.operation_column)]
        ).withColumn(lineage["sequence"], F.col(_sequence_of(entity)))
    if any(stats[uri].duplicates for uri in stats if by_uri[uri].file_id not in bad):
        # The first of each group of exact duplicates stays (rare: a second pass over them).
        # With Debezium ties, a group is also one set of values (the others are ties).
        group = [FILE_URI, *entity.keys, _sequence_of(entity)]
        if ties:
            values = [F.col(c) for c in business]
            rows = rows.withColumn(H1, F.xxhash64(*values)).withColumn(H2, F.hash(*values))
            group += [H1, H2]
        # A window, not a join: a truncate's key is NULL, and NULLs partition together.
        earliest = F.min(lineage["row_number"]).over(Window.partitionBy(*group))
        rows = (
            rows.withColumn("__keep", earliest)
            .where(F.col(lineage["row_number"]) == F.col("__keep"))
            .drop("__keep")
        )
    if entity.format == "debezium":
        rows = rows.withColumn(lineage["sequence"], _with_tie_break(rows, entity, ties))
    elif entity.ordered_by_line:
        rows = rows.withColumn(lineage["sequence"], _by_line(entity))
    out = rows.select(*business, *_staged_lineage(rows, entity)).sortWithinPartitions(
        lineage["file_hash"], lineage["sequence"]
    )
    carrier = None
    if reload is not None and reload.starts and not reload.carried:
        carrier = _reload_truncate(spark, entity, rows, good, orders, reload)
    if carrier is not None:
        f, sequence = carrier
        out = out.unionByName(
            _truncate_row(spark, out, entity, f, sequence, process_id, ingested_at)
        )
        counts[f.content_hash] = counts.get(f.content_hash, 0) + 1
    effective = {f.content_hash: dates[f.file_id] for f in good if f.file_id in dates}
    writer.write(spark, StagedBatch(entity, out, good, counts, process_id, ingested_at, effective))
    if carrier is not None:
        assert reload is not None
        reload.carried = True
        log.info(
            "%s: a reload of %s (a new epoch: keys it lacks are deleted)",
            carrier[0].path.name,
            entity.name,
        )
    for f in good:
        synthetic = int(carrier is not None and carrier[0] is f)
        result.staged[f.file_id] = counts.get(f.content_hash, 0) - synthetic


#: One pass: each File read whole by a task of its own (a task's ids are then the File's rows).
SPLIT = "spark.sql.files.maxPartitionBytes"
OPEN_COST = "spark.sql.files.openCostInBytes"
WHOLE_FILE = str(1 << 40)
#: Staged in one pass: batches of at most this many Files, none larger than this or than a
#: quarter of the batch (more, smaller Files are packed into tasks by the two passes; a File
#: larger than that is split among tasks by them).
ONE_PASS_FILES = 64
ONE_PASS_BYTES = 128 << 20


def _one_pass_fits(
    entity: Entity,
    files: list[FileToStage],
    writer: StagingWriter,
    reload: reloads.ReloadPlan | None,
) -> bool:
    """Whether a group is staged in one pass: a change entity of CSV, JSON or Parquet Files,
    a writer that reads back what it appended, local Files, few enough and none too large."""
    if not writer.reads_back or entity.mode != "cdc" or entity.format == "debezium":
        return False
    if reload is not None and reload.starts and not reload.carried:
        return False  # a reload's truncate row is written by the two passes
    local = [f.source for f in files if isinstance(f.source, Path)]
    if len(files) > ONE_PASS_FILES or len(local) != len(files):
        return False
    sizes = [p.stat().st_size for p in local]
    # One task per File: a File much larger than the others would be one long task.
    return max(sizes, default=0) <= max(ONE_PASS_BYTES, sum(sizes) // 4)


def _stage_in_one_pass(
    spark: SparkSession,
    entity: Entity,
    header: list[str],
    whole: bool,
    files: list[FileToStage],
    process_id: str,
    ingested_at: datetime,
    result: StageResult,
    writer: StagingWriter,
    file_identity: str,
    orders: dict[int, str],
) -> None:
    """Read, check and write every File once: each File is one task, so a row's place in its
    File is its id's place in the task; the bad rows are counted (an observation) while the
    good ones are written; then the written rows' narrow columns tell each File's count and
    whether a File holds one key and sequence twice. Anything found raises Restage: the
    writer removes what it appended and the two passes name it."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    raw = _read(spark, entity, header, [literal_path(str(f.source)) for f in files],
                file_identity, whole)  # fmt: skip
    typed = _typed(raw, entity, header).withColumn(ERROR, _error(entity, writer))
    read = Observation(f"cdc_stage_{id(typed)}")
    typed = typed.observe(
        read, F.count(F.lit(1)).alias("rows"), F.count_if(F.col(ERROR).isNotNull()).alias("bad")
    )
    spellings = [
        (uri, f.content_hash, f.path.name, str(f.path), orders.get(f.file_id))
        for f in files
        for uri in _file_spellings(f)
    ]
    by_file = spark.createDataFrame(
        spellings,
        f"{FILE_URI} string, {FILE_VALUES[0]} string, {FILE_VALUES[1]} string, "
        f"{FILE_VALUES[2]} string, {FILE_ORDER} string",
    )
    task_row = F.col(ID) - F.shiftleft(F.shiftright(F.col(ID), 33), 33)
    rows = (
        typed.where(F.col(ERROR).isNull())
        .join(F.broadcast(by_file), [FILE_URI], "inner")
        .withColumn(lineage["row_number"], task_row + F.lit(1))
        .withColumn(lineage["process_id"], F.lit(process_id))
        .withColumn(lineage["ingested_at"], F.lit(ingested_at).cast("timestamp"))
        .withColumn(lineage["operation"], _op_map(entity)[F.col(RAW + entity.operation_column)])
        .withColumn(lineage["sequence"], F.col(_sequence_of(entity)))
    )
    if entity.ordered_by_line:
        rows = rows.withColumn(lineage["sequence"], _by_line(entity))
    business = [c.name for c in entity.columns]
    # Each task is one File: ordered by the sequence alone (with the File's hash first, every
    # comparison would tie on it and compare both values whole).
    out = rows.select(*business, *_staged_lineage(rows, entity)).sortWithinPartitions(
        lineage["sequence"]
    )
    counts = {f.content_hash: 0 for f in files}

    def check(appended: DataFrame) -> None:
        seen = read.get
        if int(seen.get("bad") or 0):
            raise Restage()
        counts.update(_written_counts(entity, appended))
        if sum(counts.values()) != int(seen.get("rows") or 0):
            raise Restage()  # a row not matched to its File, or a key and sequence twice
        for f in files:
            if not counts.get(f.content_hash) and _has_data_rows(f.source, entity):
                raise Restage()  # Spark read no rows of it: said by the two passes

    writer.write(
        spark,
        StagedBatch(entity, out, files, counts, process_id, ingested_at, appended=check),
    )
    for f in files:
        result.staged[f.file_id] = counts.get(f.content_hash, 0)
    log.debug("staged %d Files of %s in one pass", len(files), entity.name)


def _file_spellings(f: FileToStage) -> set[str]:
    """The strings Spark may name a local File by (``input_file_name()``)."""
    assert isinstance(f.source, Path)
    plain = {str(f.source.resolve()), str(f.source)}
    encoded = {quote(p) for p in plain}
    return {*plain, *(f"file:{p}" for p in plain | encoded),
            *(f"file://{p}" for p in plain | encoded)}  # fmt: skip


def _written_counts(entity: Entity, appended: DataFrame) -> dict[str, int]:
    """Rows per File hash among ``appended``, where no File holds one key and sequence on two
    rows (a duplicate or a conflict raises Restage). Reads the narrow columns only."""
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    file_hash = F.col(lineage["file_hash"])
    # Two narrow queries, not one of grouping sets: the counts reduce to a row per File in
    # each task, and the check shuffles one 64-bit hash per row.
    found = appended.groupBy(file_hash.alias("f")).count().collect()
    if not entity.ordered_by_line:  # by the line, every row has its own place: never twice
        group = F.xxhash64(file_hash, *[F.col(k) for k in entity.keys], F.col(lineage["sequence"]))
        twice = appended.select(group.alias("kh")).groupBy("kh").count().where("count > 1")
        if twice.limit(1).collect():
            raise Restage()
    return {r["f"]: int(r["count"]) for r in found}


def _reload_truncate(
    spark: SparkSession,
    entity: Entity,
    rows: DataFrame,
    good: list[FileToStage],
    orders: dict[int, str],
    reload: reloads.ReloadPlan,
) -> tuple[FileToStage, str] | None:
    """The File that carries a starting reload's truncate (its first, by DMS's order or name)
    and the truncate's staged sequence; None when this group holds none of the reload's Files."""
    from pyspark.sql import functions as F

    files = [f for f in good if f.file_id in reload.reload_ids]
    if not files:
        return None
    first = min(files, key=lambda f: (orders.get(f.file_id, ""), f.path.name))
    if reload.truncate is not None:
        return first, reload.truncate
    # By a commit-time column: just before the earliest transfer time of the reload's rows.
    base = sortable_text(F.col(entity.sequence), entity.column(entity.sequence).data_type)
    hashes = [f.content_hash for f in files]
    earliest = rows.where(F.col(FILE_VALUES[0]).isin(hashes)).agg(F.min(base)).first()
    if earliest is None or earliest[0] is None:
        return None  # the reload's Files hold no rows: nothing to place the epoch by
    return first, f"{earliest[0]}."


def _truncate_row(
    spark: SparkSession,
    out: DataFrame,
    entity: Entity,
    f: FileToStage,
    sequence: str,
    process_id: str,
    ingested_at: datetime,
) -> DataFrame:
    """One staged row of operation T (a truncate of the whole table), line 0 of ``f``."""
    values = {
        "operation": "T",
        "sequence": sequence,
        "process_id": process_id,
        "row_number": 0,
        "ingested_at": ingested_at,
        "file_hash": f.content_hash,
        "file_name": f.path.name,
        "file_path": str(f.path),
    }
    by_name = {c.name: values.get(c.key) for c in lineage_on("staged", entity.mode)}
    from pyspark.sql import types as T

    row = tuple(by_name.get(field.name) for field in out.schema.fields)
    schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in out.schema.fields])
    return spark.createDataFrame([row], schema)


def _with_tie_break(rows: DataFrame, entity: Entity, ties: bool) -> Column:
    """A Debezium row's staged sequence: its sequence and ts_ms, then ``.0000``; where a File
    holds events of one key with the same sequence and ts_ms (``ties``), each one's rank among
    them in line order, so the later line is the later change (a window only then)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    rank = F.lit(0)
    if ties:
        group = Window.partitionBy(FILE_URI, *entity.keys, SEQUENCE_BASE).orderBy(
            lineage["row_number"]
        )
        rank = F.row_number().over(group) - 1
    return F.concat(F.col(SEQUENCE_BASE), F.lit("."), F.lpad(rank.cast("string"), 4, "0"))


def _by_line(entity: Entity) -> Column:
    """The staged sequence of an entity whose ties are broken by the line: the sequence as
    sortable text (or the File's place in DMS's order), then the line (12 digits)."""
    from pyspark.sql import functions as F

    lineage = lineage_columns()
    if entity.file_order is not None:
        base = F.col(FILE_ORDER)
    else:
        base = sortable_text(F.col(entity.sequence), entity.column(entity.sequence).data_type)
    return F.concat(base, F.lit("."), F.lpad(F.col(lineage["row_number"]).cast("string"), 12, "0"))


def sortable_text(value: Column, data_type: str) -> Column:
    """A sequence value as text that sorts like the value (non-negative numbers)."""
    from pyspark.sql import functions as F

    t = data_type.lower()
    if t in ("timestamp", "timestamp_ntz"):
        return F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if t == "date":
        return F.date_format(value, "yyyy-MM-dd")
    if t in INTEGER_TYPES or t.startswith("decimal"):
        return F.lpad(value.cast("string"), 40, "0")
    return value.cast("string")


def _unsortable_sequence(entity: Entity) -> Column:
    """Why a sequence value cannot be ordered as text (a negative number), or NULL."""
    from pyspark.sql import functions as F

    t = entity.column(entity.sequence).data_type.lower()
    if not (t in INTEGER_TYPES or t.startswith("decimal")):  # float, double: refused (entities)
        return F.lit(None).cast("string")
    return F.when(
        F.col(entity.sequence) < 0,
        F.lit(f"column {entity.sequence!r}: a negative sequence (ties: line orders it as text)"),
    )


_GLOB_CHARACTERS = re.compile(r"([\\*?\[\]{}])")


def literal_path(path: str) -> str:
    """``path`` as Spark's readers take it literally: they expand glob patterns (Hadoop's, where
    a backslash escapes the next character), so a File named ``a \\ b.csv`` or ``x[1].csv``
    would otherwise be "not found" or stand for other Files."""
    return _GLOB_CHARACTERS.sub(r"\\\1", path)


def _uri_spellings(uri: str) -> set[str]:
    """The paths a file URI may stand for: percent-encoded or not, local paths for file:,
    and each scheme spelling of one store (s3a:// and s3://)."""

    if uri.startswith("file:"):
        plain = "/" + uri[len("file:") :].lstrip("/")
        return {plain, unquote(urlsplit("file://" + plain).path)}
    return {s for u in (uri, unquote(uri)) for s in same_store_spellings(u)}


def _json_fields(
    spark: SparkSession, entity: Entity, files: list[FileToStage], file_identity: str
) -> dict[int, list[str]]:
    """Per JSON-lines File, the fields its lines hold that the entity does not declare, in the
    order they first appear."""
    from pyspark.sql import functions as F

    if not files:
        return {}
    declared = [c.name for c in entity.columns]
    text = _identify(spark.read.text([literal_path(str(f.source)) for f in files]), file_identity)
    found = (
        text.select(FILE_URI, ID, F.explode(F.expr("json_object_keys(value)")).alias("field"))
        .where(~F.col("field").isin(declared))
        .groupBy(FILE_URI, "field")
        .agg(F.min(ID).alias("first"))
        .collect()
    )
    if not found:
        return {}
    by_uri = _match_files(sorted({r[FILE_URI] for r in found}), files)
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


def _match_files(uris: list[str], files: list[FileToStage]) -> dict[str, FileToStage]:
    """Each URI Spark reported, mapped to the File it read. A URI that matches no File, or
    two, is an error: its rows would otherwise be dropped without a word."""
    by_path: dict[str, FileToStage] = {}
    for f in files:
        for spelling in {str(f.source), str(f.source.resolve()), *_uri_spellings(str(f.source))}:
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

    skip = 1 if entity.format == "csv" and entity.csv_header else 0
    with open_binary(path) as handle:
        for line in handle:
            if skip:
                skip -= 1
                continue
            if line.strip():
                return True
    return False


def _changed_by_cast(named: str, raw: Column, data_type: str) -> Column:
    """NULL, or why casting ``raw`` to ``data_type`` would store a different value than the File
    holds (Spark rounds 10.005 into decimal(12,2) and truncates 1.5 into int without a word)."""

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
            F.lit(f"{named}: "),
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
