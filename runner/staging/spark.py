"""Stage an entity's Files with PySpark: the order of the steps. Reading the Files is in
read.py, the checks in check.py; the destination's writer (runner/destinations) appends the
good rows and then publishes them (the staged-files manifest the apply reads).

All Files of an entity that share a header are read in one Spark job (not one per File); each
row keeps its File's identity through ``input_file_name()`` (or ``_metadata.file_path``).

One pass where a batch fits (``_one_pass_fits``: change Files of CSV, JSON or Parquet on a
writer that reads back what it appended, local, few and none too large): each File is read
whole by a task of its own and written with its bad rows counted on the way; each File's rows
and whether it holds one key and sequence twice are then read from the written rows' narrow
columns, before the publish. Anything found there removes the rows (``Restage``) and the Files
go the two-pass way, which names the problem.

Two passes otherwise, each a single Spark job, and nothing cached:

1. One aggregate (SQL ``GROUPING SETS``, so the Files are scanned once) gives, per File block
   (a split: one for a small File, one per ``maxPartitionBytes`` of a large one), its rows, its
   first row id and its bad rows (the first named); and per File its exact duplicates (same
   key, same sequence, same values: dropped) and conflicts (same key and sequence, different
   values: the File is quarantined). Values are compared by two hashes of the typed row (96
   bits).
2. The write: rows of the good Files, typed, numbered, with their lineage, in one append (one
   commit) and one manifest write; in the order they were read (the apply orders each key's
   changes itself).

A row's position in its File comes without a sort: Spark reads a split in order and
``monotonically_increasing_id()`` counts the rows of a task, so a row's number is the rows of
the File's earlier blocks plus its distance from its block's first id. CSV Files without a
newline inside quotes (found while scanning the bytes) are read split at lines, so a large File
is read by many tasks; a File with such records is read whole (``multiLine``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from runner.contract import lineage_columns, lineage_on
from runner.destinations.base import FileToStage, Restage, StagedBatch, StagingWriter
from runner.entities import Column as EntityColumn
from runner.entities import Entity
from runner.errors import ConfigError, IntegrityError
from runner.staging import reloads
from runner.staging.check import (
    BAD,
    ERROR,
    H1,
    H2,
    at_row,
    explain,
    row_is_bad,
    scan_stats,
    written_counts,
)
from runner.staging.debezium import (
    SEQUENCE_BASE,
    TOMBSTONE,
)
from runner.staging.read import (
    BLOCK,
    FILE_URI,
    FILE_VALUES,
    ID,
    RAW,
    dms_file_order,
    file_effective_date,
    file_spellings,
    has_data_rows,
    json_fields,
    literal_path,
    match_files,
    op_map,
    read_files,
    sequence_of,
    sortable_text,
    typed_columns,
    undeclared_json_field,
)
from runner.staging.row_hash import hash_of
from runner.staging.schema import Evolution, declared_vs_table, evolve, parquet_types
from runner.staging.validate import (
    read_header,
    scan_text_file,
    undeclared,
)

log = logging.getLogger("runner.staging")

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FIRST_ID = "__first_id"
OFFSET = "__offset"
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
    json_extra = json_fields(spark, entity, files, file_identity) if entity.format == "json" else {}
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

    if _one_pass_fits(entity, files, writer, reload, spark.sparkContext.defaultParallelism):
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
    raw = read_files(spark, entity, header, paths, file_identity, whole)
    typed = typed_columns(raw, entity, header)
    stats = scan_stats(spark, typed, entity, writer)
    by_uri = match_files(list(stats), files)
    seen = {by_uri[uri].file_id for uri in stats}
    for f in files:
        if f.file_id not in seen and has_data_rows(f.source, entity):
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
    rows_named = explain(typed, entity, writer, named) if named else {}
    bad: dict[int, str] = {}
    ties = False  # Debezium: events of one key with the same sequence and ts_ms in a File
    for uri, st in stats.items():
        f = by_uri[uri]
        if st.first_bad is not None:
            row = rows_named[(uri, st.first_bad)]
            more = f" ({st.bad - 1} more bad rows)" if st.bad > 1 else ""
            bad[f.file_id] = f"{at_row(entity, st.row_number(st.first_bad))}, {row[ERROR]}{more}"
        elif st.conflict is not None and entity.format == "debezium":
            ties = True  # ordered by line at the write (the sequence's tie-break)
        elif st.conflict is not None:
            row = rows_named[(uri, st.conflict[0])]
            names = ", ".join(f"{k}={row[k]}" for k in entity.keys)
            first, second = sorted(st.row_number(i) for i in st.conflict)
            if entity.is_snapshot:
                bad[f.file_id] = (
                    f"{at_row(entity, second)}: same key ({names}) as {at_row(entity, first)}; "
                    "a snapshot File has one row per key"
                )
            else:
                bad[f.file_id] = (
                    f"{at_row(entity, second)}, {_sequence_named(entity)}: conflicts with "
                    f"{at_row(entity, first)}: same key ({names}) and same sequence, "
                    "different values"
                )
        elif st.date_low and st.date_high and st.date_low[0] != st.date_high[0]:
            assert eff is not None and eff.column is not None
            (low, low_id), (high, high_id) = st.date_low, st.date_high
            a, b = sorted([(st.row_number(low_id), low), (st.row_number(high_id), high)])
            bad[f.file_id] = (
                f"{at_row(entity, b[0])}, column {eff.column!r}: effective date {b[1]} differs "
                f"from {a[1]} at {at_row(entity, a[0])}; a snapshot File has one effective date"
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
            lineage["operation"], op_map(entity)[F.col(RAW + entity.operation_column)]
        ).withColumn(lineage["sequence"], F.col(sequence_of(entity)))
    if any(stats[uri].duplicates for uri in stats if by_uri[uri].file_id not in bad):
        # The first of each group of exact duplicates stays (rare: a second pass over them).
        # With Debezium ties, a group is also one set of values (the others are ties).
        group = [FILE_URI, *entity.keys, sequence_of(entity)]
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
    # Unsorted: the apply orders each key's changes itself (a shuffle by key).
    out = rows.select(*business, *_staged_lineage(rows, entity))
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
#: Staged in one pass: batches of at most this many Files, and no File so large that its one
#: task outlasts the two passes (below). Files up to ONE_PASS_BYTES always fit.
ONE_PASS_FILES = 64
ONE_PASS_BYTES = 128 << 20


def _one_pass_fits(
    entity: Entity,
    files: list[FileToStage],
    writer: StagingWriter,
    reload: reloads.ReloadPlan | None,
    cores: int,
) -> bool:
    """Whether a group is staged in one pass: a change entity of CSV, JSON or Parquet Files,
    a writer that reads back what it appended, local Files, few enough and none too large.

    One pass reads each File in one task: the batch takes about as long as its largest File
    or its bytes shared among the ``cores``, whichever is longer. The two passes read the
    batch twice, split among the cores (about twice the bytes per core). So one pass is taken
    while the largest File is at most 1.5 times a core's share of the batch (a File of a
    third of the batch on 2 cores: a full load beside its change Files)."""
    if not writer.reads_back or entity.mode != "cdc" or entity.format == "debezium":
        return False
    if reload is not None and reload.starts and not reload.carried:
        return False  # a reload's truncate row is written by the two passes
    local = [f.source for f in files if isinstance(f.source, Path)]
    if len(files) > ONE_PASS_FILES or len(local) != len(files):
        return False
    sizes = [p.stat().st_size for p in local]
    return max(sizes, default=0) <= max(ONE_PASS_BYTES, sum(sizes) * 3 // (2 * max(cores, 1)))


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
    raw = read_files(spark, entity, header, [literal_path(str(f.source)) for f in files],
                file_identity, whole)  # fmt: skip
    typed = typed_columns(raw, entity, header).withColumn(BAD, row_is_bad(entity, writer))
    read = Observation(f"cdc_stage_{id(typed)}")
    typed = typed.observe(read, F.count(F.lit(1)).alias("rows"), F.count_if(BAD).alias("bad"))
    spellings = [
        (uri, f.content_hash, f.path.name, str(f.path), orders.get(f.file_id))
        for f in files
        for uri in file_spellings(f)
    ]
    by_file = spark.createDataFrame(
        spellings,
        f"{FILE_URI} string, {FILE_VALUES[0]} string, {FILE_VALUES[1]} string, "
        f"{FILE_VALUES[2]} string, {FILE_ORDER} string",
    )
    task_row = F.col(ID) - F.shiftleft(F.shiftright(F.col(ID), 33), 33)
    rows = (
        typed.where(~F.col(BAD))
        .join(F.broadcast(by_file), [FILE_URI], "inner")
        .withColumn(lineage["row_number"], task_row + F.lit(1))
        .withColumn(lineage["process_id"], F.lit(process_id))
        .withColumn(lineage["ingested_at"], F.lit(ingested_at).cast("timestamp"))
        .withColumn(lineage["operation"], op_map(entity)[F.col(RAW + entity.operation_column)])
        .withColumn(lineage["sequence"], F.col(sequence_of(entity)))
    )
    if entity.ordered_by_line:
        rows = rows.withColumn(lineage["sequence"], _by_line(entity))
    business = [c.name for c in entity.columns]
    out = rows.select(*business, *_staged_lineage(rows, entity))
    counts = {f.content_hash: 0 for f in files}

    def check(appended: DataFrame) -> None:
        seen = read.get
        if int(seen.get("bad") or 0):
            raise Restage()
        counts.update(written_counts(entity, appended))
        if sum(counts.values()) != int(seen.get("rows") or 0):
            raise Restage()  # a row not matched to its File, or a key and sequence twice
        for f in files:
            if not counts.get(f.content_hash) and has_data_rows(f.source, entity):
                raise Restage()  # Spark read no rows of it: said by the two passes

    writer.write(
        spark,
        StagedBatch(entity, out, files, counts, process_id, ingested_at, appended=check),
    )
    for f in files:
        result.staged[f.file_id] = counts.get(f.content_hash, 0)
    log.debug("staged %d Files of %s in one pass", len(files), entity.name)


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


def _sequence_named(entity: Entity) -> str:
    """How an error names the sequence: ``column 'x'``, or ``columns 'a', 'b'``."""
    columns = entity.sequence_columns
    if len(columns) == 1:
        return f"column {columns[0]!r}"
    return "columns " + ", ".join(repr(c) for c in columns)


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
