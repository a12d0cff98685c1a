"""Check: why a row is bad (the first reason), and what the written or read rows tell about
each File: its rows per block, its bad rows, its exact duplicates and conflicts. The messages
name the File's line (``line_of``, ``at_row``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from runner.contract import lineage_columns
from runner.destinations.base import Restage, StagingWriter
from runner.entities import Entity, is_number_type
from runner.staging.debezium import (
    ENVELOPE,
    TOMBSTONE,
    column_field,
    negative_sequence,
)
from runner.staging.read import BLOCK, CORRUPT, FILE_URI, ID, RAW, op_map, sequence_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


ERROR = "__error"
BAD = "__bad"  # whether a row is bad (``row_is_bad``)
H1, H2 = "__h1", "__h2"


# A check: the condition under which a row is bad, and the message that says why.
Check = tuple["Column", "Column"]


def row_error(entity: Entity, writer: StagingWriter) -> Column:
    """NULL for a good row, else why it is bad (the first reason). Built for the few rows a
    message names (``explain``): every message's expression is large."""
    from pyspark.sql import functions as F

    checks, guard = row_checks(entity, writer)
    error = F.coalesce(*[F.when(cond, message) for cond, message in checks])
    return error if guard is None else F.when(guard, error)


def row_is_bad(entity: Entity, writer: StagingWriter) -> Column:
    """Whether ``row_error`` is not NULL, without building any message: the form every row is
    tested with (a small expression, which the JVM compiles where the messages' would not be)."""
    from pyspark.sql import functions as F

    checks, guard = row_checks(entity, writer)
    bad = F.lit(False)
    for cond, _message in checks:
        bad = bad | F.coalesce(cond, F.lit(False))
    return bad if guard is None else F.coalesce(guard & bad, F.lit(False))


def row_checks(entity: Entity, writer: StagingWriter) -> tuple[list[Check], Column | None]:
    """Every check of a row in order (a row's reason is the first that holds), and the
    condition under which a row is checked at all (Debezium: not a Kafka tombstone)."""
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
    checks: list[Check] = [(F.col(CORRUPT).isNotNull(), F.lit(malformed))]
    debezium = entity.format == "debezium"
    if debezium:
        checks.append(said(F.col(ENVELOPE)))

    def named(column: str) -> str:
        return f"field {column_field(entity, column)!r}" if debezium else f"column {column!r}"

    eff = entity.effective_date
    op_value = op_map(entity)[F.col(RAW + entity.operation_column)]

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
            checks.append((raw_col.isNull() & ~truncate, null_key(col.name, "a key")))
        elif col.name in entity.keys or col.name in entity.sequence_columns:
            what = "a key" if entity.is_snapshot else "a key or sequence"
            missing = raw_col.isNull()
            if debezium and col.name not in entity.keys:
                # A snapshot's read event (op r) may lack a position field that only streaming
                # fills (SQL Server's change LSN and serial number): it sorts before every
                # streamed change at its position (debezium.sequence_base).
                read = F.coalesce(F.col(RAW + entity.operation_column) == "r", F.lit(False))
                missing = missing & ~read
            checks.append((missing, null_key(col.name, what)))
        elif eff is not None and col.name == eff.column:
            checks.append((raw_col.isNull(), F.lit(f"column {col.name!r}: NULL effective date")))
        if col.data_type not in ("string",):
            checks.append(
                (
                    raw_col.isNotNull() & F.col(col.name).isNull(),
                    F.concat(
                        F.lit(f"{named(col.name)}: cannot cast "),
                        quoted(raw_col.cast("string"), 60),
                        F.lit(f" to {col.data_type}"),
                    ),
                )
            )
            if (changed := changed_by_cast(named(col.name), raw_col, col.data_type)) is not None:
                checks.append(changed)
        for char, why in writer.forbidden_characters.items():
            if entity.format != "parquet" or col.data_type == "string":
                checks.append(
                    (F.instr(raw_col.cast("string"), char) > 0, F.lit(f"{named(col.name)}: {why}"))
                )
    if entity.is_snapshot:
        return checks, None
    if debezium and (negative := negative_sequence(entity)) is not None:
        checks.append(said(negative))
    if not debezium and (unsortable := unsortable_sequence(entity)) is not None:
        checks.append(unsortable)
    op_raw = F.col(RAW + entity.operation_column)
    checks.append(
        (
            op_raw.isNull() | op_map(entity)[op_raw].isNull(),
            F.concat(
                F.lit(f"{named(entity.operation_column)}: unknown operation code "),
                F.coalesce(quoted(op_raw.cast("string"), 20), F.lit("NULL")),
                F.lit(f" (accepted: {', '.join(entity.operations)})"),
            ),
        )
    )
    return checks, (~F.col(TOMBSTONE) if debezium else None)


def said(message: Column) -> Check:
    """A check given as its message or NULL."""
    return message.isNotNull(), message


@dataclass
class FileStats:
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


def scan_stats(
    spark: SparkSession, typed: DataFrame, entity: Entity, writer: StagingWriter
) -> dict[str, FileStats]:
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
    bad = row_is_bad(entity, writer)
    # Ties broken by the line: every row its own group (no duplicates, no conflicts).
    by_line = entity.ordered_by_line
    sequence = F.lit(None) if snapshot or by_line else F.col(sequence_of(entity))
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
        groups = same_key_and_sequence(spark, view, keys, snapshot, twice) if twice else []
    finally:
        spark.catalog.dropTempView(view)
    stats: dict[str, FileStats] = {}
    for r in found:
        if r["by_key"] != 0:
            continue
        st = stats.setdefault(r["f"], FileStats())
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


def same_key_and_sequence(
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


def explain(
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
        typed.select(FILE_URI, ID, row_error(entity, writer).alias(ERROR), *entity.keys)
        .where(cond)
        .collect()
    )
    return {(r[FILE_URI], int(r[ID])): r for r in found}


def written_counts(entity: Entity, appended: DataFrame) -> dict[str, int]:
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
        if twice.count():  # one job over every partition (a limit scans them one by one)
            raise Restage()
    return {r["f"]: int(r["count"]) for r in found}


def unsortable_sequence(entity: Entity) -> Check | None:
    """A sequence value that cannot be ordered as text (a negative number), when the entity
    breaks ties by the line or orders by several columns."""
    from pyspark.sql import functions as F

    if len(entity.sequence_columns) > 1:
        numbers = [n for n in entity.sequence_columns if is_number_type(entity.column(n).data_type)]
        if not numbers:
            return None
        why = "a negative sequence (a sequence of several columns orders it as text)"
        negative = F.lit(False)
        for n in numbers:
            negative = negative | F.coalesce(F.col(n) < 0, F.lit(False))
        message = F.coalesce(
            *[F.when(F.col(n) < 0, F.lit(f"column {n!r}: {why}")) for n in numbers]
        )
        return negative, message
    if not entity.sequence_ties:
        return None
    t = entity.column(entity.sequence).data_type.lower()
    if not is_number_type(t):  # float, double: refused (entities)
        return None
    return (
        F.col(entity.sequence) < 0,
        F.lit(f"column {entity.sequence!r}: a negative sequence (ties: line orders it as text)"),
    )


def changed_by_cast(named: str, raw: Column, data_type: str) -> Check | None:
    """A value that casting ``raw`` to ``data_type`` would store differently than the File holds
    (Spark rounds 10.005 into decimal(12,2) and truncates 1.5 into int without a word); None for
    a type that stores every value it casts unchanged."""

    from pyspark.sql import functions as F

    text = F.trim(raw.cast("string"))
    cast = raw.cast(data_type)
    # A value written as Spark writes what it stores is stored unchanged: most values are, and
    # that comparison is far cheaper than the tests below, which only the others reach.
    written_as_stored = text == cast.cast("string")
    changed: Column | None = None
    t = data_type.lower()
    if t in ("tinyint", "smallint", "int", "integer", "bigint"):
        changed = ~written_as_stored & ~text.rlike(r"^[+-]?[0-9]+(\.0*)?$")
    elif t.startswith("decimal"):
        m = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", t)
        scale = int(m.group(2)) if m else 0
        fraction = F.regexp_extract(text, r"^[+-]?[0-9]*\.([0-9]*)$", 1)
        changed = ~written_as_stored & F.when(
            text.rlike(r"^[+-]?[0-9]*\.?[0-9]*$"),
            F.substring(fraction, scale + 1, 1 << 20).rlike("[1-9]"),
        ).otherwise(raw.cast("decimal(38,18)") != cast)
    elif t == "date":
        changed = ~written_as_stored & (raw.cast("timestamp") != cast.cast("timestamp"))
    elif t in ("timestamp", "timestamp_ntz"):
        changed = text.rlike(r"[.,][0-9]{6}[0-9]*[1-9]")  # beyond microseconds
    elif t in ("float", "double"):
        changed = (F.abs(cast) == float("inf")) & ~text.rlike("(?i)inf")
    elif re.fullmatch(r"(varchar|char)\(\d+\)", t):
        width = int(t[t.index("(") + 1 : -1])
        changed = F.length(raw.cast("string")) > width
    if changed is None:
        return None
    return (
        raw.isNotNull() & cast.isNotNull() & changed,
        F.concat(
            F.lit(f"{named}: "),
            quoted(raw.cast("string"), 60),
            F.lit(f" does not fit {data_type} unchanged (it would be stored as "),
            F.coalesce(cast.cast("string"), F.lit("NULL")),
            F.lit(")"),
        ),
    )


def quoted(column: Column, width: int) -> Column:
    """A raw value for an error message: double-quoted, cut to ``width`` characters."""
    from pyspark.sql import functions as F

    return F.concat(F.lit('"'), F.substring(column, 1, width), F.lit('"'))


def line_of(entity: Entity, row_number: int) -> int:
    """Line of a data row in its File (the header is line 1)."""
    header = entity.format == "csv" and entity.csv_header
    return int(row_number) + (1 if header else 0)


def at_row(entity: Entity, row_number: int) -> str:
    """Where a row is, for a message: its line in a text File, its row in a Parquet File."""
    if entity.format == "parquet":
        return f"row {int(row_number)}"
    return f"line {line_of(entity, row_number)}"
