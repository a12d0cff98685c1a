"""Entity declarations: read once from the dbt project's YAML, used by the runner and by dbt.

An Entity is a dbt source table whose ``meta.cdc`` holds the CDC settings; its ``columns`` with
``data_type`` are the declared schema, so the declaration also shows in ``dbt docs``. Every
problem in every declaration is reported at once, naming the file and the entity.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from runner.contract import PREFIX
from runner.errors import ConfigError
from runner.project import IDENTIFIER, Project, load_yaml

FORMATS = ("csv", "json", "parquet", "debezium")
MODES = ("cdc", "snapshot", "transactions")
# The keys a declaration's meta.cdc accepts, by where they may appear (docs/declarations.md and
# the pages it links document each one; tests/test_docs.py checks that none is missing).
COMMON_KEYS = frozenset({"mode", "landing", "format", "keys", "csv", "on_schema_change"})
# What a File whose columns differ from the declaration's does (meta.cdc.on_schema_change):
# quarantined (fail); staged with its new columns added to the staging table (append_new_columns),
# and also with missing declared columns as NULL (sync_all_columns); or staged without the new
# columns, said in a warning (ignore). runner/staging/schema.py applies it.
SCHEMA_POLICIES = ("fail", "append_new_columns", "sync_all_columns", "ignore")
CHANGE_KEYS = frozenset({"sequence", "operation", "reloads"})  # mode cdc
DEBEZIUM_KEYS = frozenset({"debezium", "transactions"})  # format debezium
CSV_KEYS = frozenset({"header", "delimiter"})
OPERATION_KEYS = frozenset({"column", "preset", "values", "missing_means", "files"})
SEQUENCE_KEYS = frozenset({"column", "ties", "file_order"})
DEBEZIUM_CONF_KEYS = frozenset({"fields", "envelope", "encodings", "preset"})
# A change's position in the source's log where a Debezium connector writes it as several
# `source` fields: (field, column, type), compared in this order. ``debezium.preset`` declares
# them (the columns, their fields and the sequence); `runner new-entity` proposes them.
DEBEZIUM_POSITIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # MySQL (and MariaDB): binlog file (by its number), position in it, row of the event
    "mysql": (("file", "binlog_file", "string"), ("pos", "binlog_pos", "bigint"),
              ("row", "binlog_row", "int")),
    # SQL Server: the transaction's commit LSN, the change's LSN, its serial number there
    "sqlserver": (("commit_lsn", "commit_lsn", "string"), ("change_lsn", "change_lsn", "string"),
                  ("event_serial_no", "event_serial_no", "bigint")),
}  # fmt: skip
SNAPSHOT_KINDS = ("full", "delta")
# Spark SQL types accepted in data_type; parameters such as decimal(12,2) are allowed.
TYPE_PATTERN = re.compile(
    r"^(string|varchar\(\d+\)|char\(\d+\)|boolean|tinyint|smallint|int|integer|bigint|float|"
    r"double|decimal\(\s*\d+\s*,\s*\d+\s*\)|decimal|date|timestamp|timestamp_ntz|binary)$",
    re.IGNORECASE,
)
DMS_OPERATIONS = {"I": "I", "U": "U", "D": "D"}
# Orders of Files when no column orders changes (meta.cdc.sequence: {file_order: ...}).
FILE_ORDERS = ("dms",)
# Kafka Connect logical types a Debezium value may be encoded as (meta.cdc.debezium.encodings,
# or the line's own schema): decoded to the declared type at staging.
ENCODINGS = (
    "org.apache.kafka.connect.data.Decimal",
    "io.debezium.data.VariableScaleDecimal",
    "io.debezium.time.Date",
    "org.apache.kafka.connect.data.Date",
    "io.debezium.time.Time",
    "io.debezium.time.MicroTime",
    "io.debezium.time.NanoTime",
    "org.apache.kafka.connect.data.Time",
    "io.debezium.time.Timestamp",
    "io.debezium.time.MicroTimestamp",
    "io.debezium.time.NanoTimestamp",
    "org.apache.kafka.connect.data.Timestamp",
    "io.debezium.time.ZonedTimestamp",
    "io.debezium.time.ZonedTime",
    "io.debezium.time.MicroDuration",
    "io.debezium.time.Interval",
    "io.debezium.data.Json",
    "io.debezium.data.Uuid",
)
DEBEZIUM_OPERATIONS = {"c": "I", "r": "I", "u": "U", "d": "D", "t": "T"}
# What an operation value maps to: insert, update, delete, or truncate (the whole table, at
# the row's sequence: its key columns may be empty).
OPERATION_KINDS = ("I", "U", "D", "T")
NULL_MEANS = ("value", "unchanged")
# Debezium JSON lines: each line an envelope, wrapped in {"schema": ..., "payload": ...} by a
# converter with schemas.enable (payload), bare (plain), or either, line by line (auto).
ENVELOPES = ("auto", "payload", "plain")
# Envelope fields a column may be taken from (meta.cdc.debezium.fields); any other column is
# the row image's field of its name (``after``, or ``before`` for a delete).
ENVELOPE_FIELD = re.compile(
    r"^(op|ts_ms|source\.[A-Za-z_][A-Za-z0-9_]*|"
    r"transaction\.(id|total_order|data_collection_order))$"
)
INTEGER_TYPES = ("tinyint", "smallint", "int", "integer", "bigint")


def is_number_type(data_type: str) -> bool:
    """An integer or a decimal: a sequence value staged as zero-padded text."""
    t = data_type.lower()
    return t in INTEGER_TYPES or t.startswith("decimal")


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str


@dataclass(frozen=True)
class EffectiveDate:
    """Where a snapshot File's business effective date comes from: one of a declared ``date``
    column (the same on every row), a regular expression on the file name (its group ``date``,
    or its first group, read with ``format``), or ``runner ingest --effective-date``."""

    column: str | None = None
    file_pattern: str | None = None
    format: str = "%Y-%m-%d"
    option: bool = False

    def describe(self) -> str:
        if self.column:
            return f"column {self.column!r}"
        if self.file_pattern:
            return f"file names matching {self.file_pattern!r}"
        return "runner ingest --effective-date"


@dataclass(frozen=True)
class Entity:
    """One source table being replicated. ``mode`` is ``cdc`` (Files of changes, ordered by
    ``sequence``, with an operation column) or ``snapshot`` (Files that are extracts of the
    table: ``snapshot_kind`` full or delta, compared by key and row hashes; ``sequence`` and
    ``operation_column`` are empty)."""

    name: str
    source: str
    declared_in: Path
    mode: str
    landing: tuple[str, ...]  # globs under a landing root, e.g. ("customers/*.csv",)
    format: str
    keys: tuple[str, ...]
    sequence: str
    operation_column: str
    operations: dict[str, str]  # value in the File -> I/U/D
    columns: tuple[Column, ...]
    staging_schema: str
    staging_table: str
    csv_header: bool = True
    csv_delimiter: str = ","
    # DMS full-load Files without the operation column (includeOpForFullLoad=false): Files
    # whose name matches one of ``op_missing_files`` have every declared column but the
    # operation, and each of their rows is the operation ``op_missing_means`` (a File's code).
    op_missing_files: tuple[str, ...] = ()
    op_missing_means: str | None = None
    # How changes are ordered besides the ``sequence`` column: ``sequence_ties`` (line): changes
    # of one key with the same sequence in one File apply in line order; ``file_order`` (dms):
    # no sequence column, changes are ordered by their File (DMS's file names) then the line.
    sequence_ties: bool = False
    file_order: str | None = None
    # DMS table reloads (meta.cdc.reloads): Files named by one of these patterns that land
    # after change Files of the entity are a reload, a new epoch of the table (the keys it
    # lacks are deleted); the first full load is not. runner/staging/reloads.py.
    reload_files: tuple[str, ...] = ()
    # format debezium, ``sequence: [a, b, c]``: every column that orders changes, compared in
    # that order (``sequence`` is the first); a single sequence column alone otherwise.
    sequence_parts: tuple[str, ...] = ()
    # format debezium: column -> the logical type its values are encoded as when a line
    # carries no schema (a Kafka Connect name, and the scale of a Decimal).
    debezium_encodings: dict[str, tuple[str, int | None]] = field(
        default_factory=dict, compare=False
    )
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    snapshot_kind: str | None = None
    compare: tuple[str, ...] = ()  # snapshot mode: the columns of the row hash, in order
    effective_date: EffectiveDate | None = None
    # Partial updates (mode cdc, null_means: unchanged): the columns in which an update's NULL
    # (or ``unchanged_placeholder``, staged as NULL) keeps the value the key had before it.
    unchanged_columns: tuple[str, ...] = ()
    unchanged_placeholder: str | None = None
    # format debezium: column -> envelope field (op, ts_ms, source.x, transaction.x); the other
    # columns come from the row image. The envelope: auto, payload or plain (ENVELOPES).
    debezium_fields: dict[str, str] = field(default_factory=dict, compare=False)
    debezium_envelope: str = "auto"
    # Transaction consistency. On a transaction metadata entity (meta.cdc.mode: transactions,
    # staged as a change entity of BEGIN/END rows): member entity -> its data_collection in
    # the END records. On a member: the transaction metadata entity's name.
    members: dict[str, str] = field(default_factory=dict, compare=False)
    transactions: str | None = None
    on_schema_change: str = "fail"

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def sequence_columns(self) -> tuple[str, ...]:
        """The declared columns that order changes, compared in this order."""
        return self.sequence_parts or ((self.sequence,) if self.sequence else ())

    @property
    def is_snapshot(self) -> bool:
        return self.mode == "snapshot"

    @property
    def sequence_type(self) -> str:
        """The type of the staged sequence: the declared sequence column's, or ``date`` (the
        effective date) for a snapshot entity."""
        if self.is_snapshot:
            return "date"
        if (
            self.format == "debezium"
            or self.sequence_ties
            or self.file_order
            or len(self.sequence_columns) > 1
        ):
            # debezium: the declared sequence, then ts_ms, then a tie-break; ties: the
            # sequence then the line; file order: the File's place then the line; several
            # columns: each as sortable text, in turn (staging)
            return "string"
        return self.column(self.sequence).data_type

    @property
    def ordered_by_line(self) -> bool:
        """Whether the line breaks ties of the sequence (so that rows never conflict)."""
        return self.sequence_ties or self.file_order is not None

    @property
    def evolves(self) -> bool:
        """Whether a File's new columns are added to the staging table (on_schema_change)."""
        return self.on_schema_change in ("append_new_columns", "sync_all_columns")

    @property
    def required_columns(self) -> frozenset[str]:
        """The declared columns every File must hold, whatever the policy: the keys, the
        sequence and operation columns and a snapshot's effective-date column."""
        out = set(self.keys) | {*self.sequence_columns, self.operation_column}
        if self.effective_date is not None and self.effective_date.column:
            out.add(self.effective_date.column)
        return frozenset(c for c in out if c)

    def op_missing(self, file_name: str) -> bool:
        """Whether a File of this name lacks the operation column (a DMS full-load File)."""
        return any(fnmatch.fnmatchcase(file_name, g) for g in self.op_missing_files)

    def reloads(self, file_name: str) -> bool:
        """Whether a File of this name is a full-load File that is a reload when it lands
        after change Files (meta.cdc.reloads)."""
        return any(fnmatch.fnmatchcase(file_name, g) for g in self.reload_files)

    @property
    def is_transactions(self) -> bool:
        """A transaction metadata entity (Debezium's BEGIN/END records of a group)."""
        return bool(self.members)

    @property
    def truncates(self) -> bool:
        """Whether an operation value of this entity means a truncate (T)."""
        return "T" in self.operations.values()


def _yaml_files(project: Project) -> list[Path]:
    files: list[Path] = []
    for folder in project.dbt_conf.get("model-paths", ["models"]):
        base = project.dbt_project_dir / folder
        files.extend(sorted(base.rglob("*.yml")) + sorted(base.rglob("*.yaml")))
    return files


def _render(value: Any, project: Project) -> Any:
    """Render the little Jinja that source YAML may use ({{ target.schema }}, env_var)."""
    if not isinstance(value, str) or "{{" not in value:
        return value

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.globals["env_var"] = lambda name, default=None: os.environ.get(name, default)
    return env.from_string(value).render(target=project.target_context)


def load_entities(project: Project) -> dict[str, Entity]:
    """All declared entities by name; raises one ConfigError listing every problem."""
    problems: list[str] = []
    entities: dict[str, Entity] = {}
    for path in _yaml_files(project):
        try:
            doc = load_yaml(path.read_text()) or {}
        except yaml.YAMLError as exc:
            problems.append(f"{path}: not valid YAML: {exc}")
            continue
        for source in doc.get("sources") or []:
            for table in source.get("tables") or []:
                cdc = (table.get("meta") or {}).get("cdc") or (table.get("config") or {}).get(
                    "meta", {}
                ).get("cdc")
                if cdc is None:
                    continue
                entity, errors = _parse(path, source, table, cdc, project)
                where = f"{path}: entity {table.get('name')!r}"
                problems.extend(f"{where}: {e}" for e in errors)
                if entity is not None:
                    if entity.name in entities:
                        problems.append(
                            f"{where}: declared twice (also in {entities[entity.name].declared_in})"
                        )
                    entities[entity.name] = entity
    problems.extend(_check_groups(entities))
    if problems:
        raise ConfigError(
            f"{len(problems)} problem(s) in entity declarations:\n  " + "\n  ".join(problems)
        )
    return entities


#: The envelope fields a member of a transaction group must keep as columns.
MEMBER_FIELDS = ("transaction.id", "transaction.data_collection_order", "ts_ms")


def _check_groups(entities: dict[str, Entity]) -> list[str]:
    """Transaction groups: each member names a transaction metadata entity that lists it, is
    Debezium, and keeps the fields the group's ledger counts and ages by."""
    problems = []
    for e in entities.values():
        where = f"{e.declared_in}: entity {e.name!r}"
        for member in e.members:
            other = entities.get(member)
            if other is None:
                problems.append(f"{where}: members: {member!r} is not a declared entity")
            elif other.transactions != e.name:
                problems.append(
                    f"{where}: members: {member!r} must say meta.cdc.transactions: {e.name}"
                )
        if e.transactions is None:
            continue
        group = entities.get(e.transactions)
        if group is None or not group.is_transactions:
            problems.append(
                f"{where}: transactions: {e.transactions!r} is not a transaction metadata "
                "entity (meta.cdc.mode: transactions)"
            )
        elif e.name not in group.members:
            problems.append(
                f"{where}: transactions: {e.transactions!r} does not list it in members"
            )
        mapped = set(e.debezium_fields.values())
        missing = [f for f in MEMBER_FIELDS if f not in mapped]
        if e.format != "debezium" or missing:
            problems.append(
                f"{where}: a member of a transaction group is format debezium and keeps "
                f"{', '.join(MEMBER_FIELDS)} as columns (debezium.fields); missing: "
                f"{', '.join(missing) if e.format == 'debezium' else 'format debezium'}"
            )
    return problems


#: The columns of a transaction metadata entity's staged rows: one row per BEGIN record, and
#: per END record one per data collection it counts (``data_collection`` '' on BEGIN).
TRANSACTION_COLUMNS = (
    Column("status", "string"),
    Column("id", "string"),
    Column("ts_ms", "bigint"),
    Column("event_count", "bigint"),
    Column("data_collection", "string"),
    Column("collection_events", "bigint"),
)
TRANSACTION_KEYS = {
    "ledger",
    "mode",
    "landing",
    "format",
    "members",
    "report_after_seconds",
    "quarantine_after_seconds",
}


def _parse_transactions(
    path: Path,
    source: dict[str, Any],
    table: dict[str, Any],
    cdc: dict[str, Any],
    project: Project,
) -> tuple[Entity | None, list[str]]:
    """mode transactions: Debezium's transaction metadata (BEGIN/END records, with or without
    the schema/payload wrapper), staged as change rows keyed by id, status, data collection."""
    errors: list[str] = []
    name = str(table.get("name", ""))
    for key in sorted(set(cdc) - TRANSACTION_KEYS):
        errors.append(
            f"unknown key meta.cdc.{key} for mode transactions; accepted: "
            f"{sorted(TRANSACTION_KEYS)}"
        )
    if str(cdc.get("format", "debezium")) != "debezium":
        errors.append("mode transactions reads Debezium transaction metadata: format debezium")
    members = cdc.get("members")
    if (
        not isinstance(members, dict)
        or not members
        or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in members.items())
    ):
        errors.append(
            "members (entity -> its data_collection in the END records, e.g. "
            "{orders: shop.public.orders}) is required"
        )
        members = {}
    for key in ("report_after_seconds", "quarantine_after_seconds"):
        value = cdc.get(key)
        if value is not None and (not isinstance(value, int) or value <= 0):
            errors.append(f"{key} must be a positive number of seconds, got {value!r}")
    ledger = cdc.get("ledger")  # the ledger model's name, for runner status; default: name
    if ledger is not None and not (isinstance(ledger, str) and IDENTIFIER.match(ledger)):
        errors.append(f"ledger must be the ledger model's name, a plain identifier; got {ledger!r}")
    landing = _parse_landing(cdc, errors)
    if not IDENTIFIER.match(name):
        errors.append(f"name must be a plain identifier, got {name!r}")
    staging_schema, staging_table = _staging_names(source, table, name, project, errors)
    if errors:
        return None, errors
    fields = {c.name: c.name for c in TRANSACTION_COLUMNS}
    return Entity(
        name=name,
        source=str(source.get("name")),
        declared_in=path,
        mode="cdc",  # staged like a change entity (lineage columns, markers-free)
        landing=landing,
        format="debezium",
        keys=("id", "status", "data_collection"),
        sequence="ts_ms",
        operation_column="status",
        operations={"BEGIN": "I", "END": "I"},
        columns=TRANSACTION_COLUMNS,
        staging_schema=staging_schema,
        staging_table=staging_table,
        meta=dict(cdc),
        debezium_fields=fields,
        members=dict(members),
    ), []


def _parse(
    path: Path, source: dict[str, Any], table: dict[str, Any], cdc: dict[str, Any], project: Project
) -> tuple[Entity | None, list[str]]:
    errors: list[str] = []
    name = str(table.get("name", ""))
    if not IDENTIFIER.match(name):
        errors.append(f"name must be a plain identifier, got {name!r}")
    mode = str(cdc.get("mode", "cdc"))
    if mode == "transactions":
        return _parse_transactions(path, source, table, cdc, project)
    if mode not in MODES:
        errors.append(f"mode {mode!r} is not supported; accepted: {list(MODES)}")
    known = set(COMMON_KEYS)
    known |= SNAPSHOT_KEYS if mode == "snapshot" else CHANGE_KEYS | PARTIAL_KEYS
    if str(cdc.get("format", "")).lower() == "debezium":
        known |= DEBEZIUM_KEYS
    for key in sorted(set(cdc) - known):
        errors.append(f"unknown key meta.cdc.{key} for mode {mode}; accepted: {sorted(known)}")
    landing = _parse_landing(cdc, errors)
    fmt = str(cdc.get("format", "csv")).lower()
    if fmt not in FORMATS:
        errors.append(f"format {fmt!r} is not supported; accepted: {list(FORMATS)}")
    columns: list[Column] = []
    for col in table.get("columns") or []:
        cname, ctype = str(col.get("name", "")), col.get("data_type")
        if not IDENTIFIER.match(cname):
            errors.append(f"column name {cname!r} is not a plain identifier")
        elif cname.lower().startswith(PREFIX):
            errors.append(f"column {cname!r} uses the reserved prefix {PREFIX!r}")
        if not isinstance(ctype, str) or not TYPE_PATTERN.match(ctype.strip()):
            errors.append(
                f"column {cname!r}: data_type {ctype!r} is not a supported Spark SQL type "
                "(string, int, bigint, double, decimal(p,s), date, timestamp, boolean, ...)"
            )
        columns.append(Column(cname, str(ctype).strip().lower() if ctype else ""))
    if fmt == "debezium":
        with_preset = _debezium_preset(cdc, columns, errors)
        if with_preset is None:  # an unknown preset: the columns, op and sequence it would
            return None, errors  # declare are unknown, so is every check of them
        cdc = with_preset
    if not columns:
        errors.append("columns with data_type are required (the declared schema)")
    names = [c.name for c in columns]
    lowered = [n.lower() for n in names]
    for dup in sorted({n for n in lowered if lowered.count(n) > 1}):
        errors.append(f"column {dup!r} declared more than once")
    keys = cdc.get("keys")
    if isinstance(keys, str):
        keys = [keys]
    if not keys or not isinstance(keys, list):
        errors.append("meta.cdc.keys (one or more key columns) is required")
        keys = []
    for key in keys:
        if key not in names:
            errors.append(f"key column {key!r} is not among the declared columns")
    operations: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if fmt == "debezium":
        if mode != "cdc":
            errors.append("format debezium is for mode cdc (envelopes of changes)")
        extra.update(_parse_debezium(cdc, columns, keys, errors))
        if "operation" not in cdc and extra.get("debezium_fields"):
            op_columns = [c for c, f in extra["debezium_fields"].items() if f == "op"]
            cdc = {
                **cdc,
                "operation": {
                    "column": op_columns[0] if op_columns else "op",
                    "preset": "debezium",
                },
            }
    if mode == "snapshot":
        extra, snapshot_errors = _parse_snapshot(cdc, columns, keys)
        errors.extend(snapshot_errors)
        sequence, op_column = "", ""
    else:
        sequence, op_column, operations, ordering = _parse_changes(cdc, names, errors, fmt)
        extra.update(ordering)
        if "reloads" in cdc:
            extra["reload_files"] = _parse_reloads(cdc["reloads"], fmt, ordering, errors)
        if ordering.get("sequence_ties"):
            kind = next((c.data_type for c in columns if c.name == sequence), "string")
            if fmt == "debezium":
                errors.append("format debezium breaks ties by the line already: sequence: <column>")
            elif kind in ("float", "double", "boolean", "binary"):
                errors.append(
                    f"sequence {sequence!r}: ties: line needs an integer, decimal, "
                    f"date, timestamp or string column, not {kind}"
                )
        parts = list(ordering.get("sequence_parts") or [sequence])
        if fmt != "debezium" and len(parts) > 1:
            types = {c.name: c.data_type.lower() for c in columns}
            for part in parts:
                kind = types.get(part, "string")
                if kind in ("float", "double", "boolean", "binary"):
                    errors.append(
                        f"sequence column {part!r}: in a sequence of several columns each is "
                        f"an integer, a decimal, a date, a timestamp or a string, not {kind}"
                    )
        extra.update(_parse_partial(cdc, names, [*keys, *parts, op_column], errors))
        if fmt == "debezium" and op_column and extra.get("debezium_fields") is not None:
            _check_debezium_order(extra["debezium_fields"], columns, parts, op_column, errors)
    csv_opts = cdc.get("csv") or {}
    if not isinstance(csv_opts, dict):
        errors.append("meta.cdc.csv must be a mapping (header, delimiter)")
        csv_opts = {}
    for key in sorted(set(csv_opts) - CSV_KEYS):
        errors.append(f"unknown key meta.cdc.csv.{key}; accepted: {sorted(CSV_KEYS)}")
    if not isinstance(csv_opts.get("header", True), bool):
        errors.append(
            f"csv.header must be true or false, got {csv_opts['header']!r} (false: the File has "
            "no header row and its fields are the declared columns, in order)"
        )
    if csv_opts and fmt != "csv":
        errors.append(f"meta.cdc.csv is for format csv, not {fmt}")
    staging_schema, staging_table = _staging_names(source, table, name, project, errors)
    policy = str(cdc.get("on_schema_change", "fail"))
    if policy not in SCHEMA_POLICIES:
        errors.append(
            f"on_schema_change {policy!r} is not supported; accepted: {list(SCHEMA_POLICIES)}"
        )
    if errors:
        return None, errors
    return (
        Entity(
            name=name,
            source=str(source.get("name")),
            declared_in=path,
            mode=mode,
            landing=landing,
            format=fmt,
            keys=tuple(keys),
            sequence=str(sequence),
            operation_column=op_column,
            operations=operations,
            columns=tuple(columns),
            staging_schema=staging_schema,
            staging_table=staging_table,
            csv_header=csv_opts.get("header", True) is not False,
            csv_delimiter=str(csv_opts.get("delimiter", ",")),
            meta=dict(cdc),
            transactions=str(cdc["transactions"]) if cdc.get("transactions") else None,
            on_schema_change=policy,
            **extra,
        ),
        [],
    )


def _parse_landing(cdc: dict[str, Any], errors: list[str]) -> tuple[str, ...]:
    """meta.cdc.landing: one glob or a list, each relative to a landing root, without '..'."""
    landing_raw = cdc.get("landing")
    globs = [landing_raw] if isinstance(landing_raw, str) else landing_raw
    if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g for g in globs):
        errors.append(
            "meta.cdc.landing (a path or glob under a landing root, or a list of them) is required"
        )
        return ()
    for glob in globs:
        if glob.startswith("/") or ".." in Path(glob).parts:
            errors.append(f"landing {glob!r} must be relative to a landing root, without '..'")
    return tuple(globs)


def _staging_names(
    source: dict[str, Any], table: dict[str, Any], name: str, project: Project, errors: list[str]
) -> tuple[str, str]:
    """The staged table's schema (the source's, rendered) and identifier, both identifiers."""
    staging_schema = str(_render(source.get("schema", source.get("name", "")), project))
    staging_table = str(table.get("identifier", name))
    for what, ident in (("staging schema", staging_schema), ("staging table", staging_table)):
        if not IDENTIFIER.match(ident):
            errors.append(f"{what} {ident!r} is not a plain identifier")
    return staging_schema, staging_table


def _parse_changes(
    cdc: dict[str, Any], names: list[str], errors: list[str], fmt: str = "csv"
) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """Mode cdc: the sequence column, the operation column and its values, and the settings
    beside them (ties, file order, Files without the operation column)."""
    sequence, extra = _parse_sequence(cdc.get("sequence"), names, errors, fmt)
    op = cdc.get("operation") or {}
    if not isinstance(op, dict):
        errors.append("meta.cdc.operation must be a mapping (column, preset or values, ...)")
        op = {}
    unknown = sorted(set(op) - OPERATION_KEYS)
    if unknown:
        errors.append(
            f"unknown key(s) meta.cdc.operation.{', '.join(unknown)}; accepted: column, "
            "preset, values, missing_means, files"
        )
    op_column = str(op.get("column", "Op"))
    preset = str(op.get("preset", "dms")).lower()
    presets = {"dms": DMS_OPERATIONS, "debezium": DEBEZIUM_OPERATIONS}
    if "values" in op:
        operations = {str(k): str(v).upper() for k, v in (op.get("values") or {}).items()}
    elif preset in presets:
        operations = dict(presets[preset])
    else:
        errors.append(f"operation.preset {preset!r} unknown; accepted: {sorted(presets)}")
        operations = {}
    bad_ops = sorted({v for v in operations.values() if v not in OPERATION_KINDS})
    if bad_ops:
        errors.append(f"operation.values must map to I, U, D or T (truncate); got {bad_ops}")
    if op_column not in names:
        errors.append(f"operation column {op_column!r} is not among the declared columns")
    means = op.get("missing_means")
    files = op.get("files", "LOAD*" if means is not None else None)
    if means is None and files is not None:
        errors.append(
            "operation.files needs operation.missing_means (the operation of the rows of "
            "Files without the operation column, e.g. I)"
        )
    elif means is not None:
        if str(means) not in operations:
            errors.append(
                f"operation.missing_means {means!r} is not one of the operation codes "
                f"({', '.join(operations)})"
            )
        globs = [files] if isinstance(files, str) else files
        if (
            not isinstance(globs, list)
            or not globs
            or not all(isinstance(g, str) and g and "/" not in g for g in globs)
        ):
            errors.append(
                "operation.files must be a file name pattern or a list of them (default "
                "LOAD*, DMS's full-load Files)"
            )
            globs = []
        extra.update(op_missing_means=str(means), op_missing_files=tuple(globs))
    return sequence, op_column, operations, extra


def _parse_reloads(
    raw: Any, fmt: str, ordering: dict[str, Any], errors: list[str]
) -> tuple[str, ...]:
    """meta.cdc.reloads: ``true`` (DMS's full-load Files, ``LOAD*``), ``{files: <pattern or
    list>}`` or ``false``. A reload is ordered where it landed: by file order, after the change
    Files staged before it; by a commit-time column, by its rows' transfer times (``ties:
    line``)."""
    shape = (
        "meta.cdc.reloads must be true (DMS's full-load Files, LOAD*) or {files: <file name "
        "pattern or list>}"
    )
    globs: Any = None
    if raw is False:
        return ()
    if raw is True:
        globs = ["LOAD*"]
    elif isinstance(raw, dict) and set(raw) <= {"files"}:
        files = raw.get("files", "LOAD*")
        globs = [files] if isinstance(files, str) else files
    if (
        not isinstance(globs, list)
        or not globs
        or not all(isinstance(g, str) and g and "/" not in g for g in globs)
    ):
        errors.append(shape)
        globs = []
    if fmt == "debezium":
        errors.append("meta.cdc.reloads is for AWS DMS Files; a Debezium snapshot is op r events")
    elif not (ordering.get("file_order") or ordering.get("sequence_ties")):
        errors.append(
            "meta.cdc.reloads needs sequence {file_order: dms} or {column: <commit time>, "
            "ties: line}: a reload is placed among the changes by its File or its rows' times"
        )
    return tuple(globs)


def _parse_sequence(
    raw: Any, names: list[str], errors: list[str], fmt: str
) -> tuple[str, dict[str, Any]]:
    """meta.cdc.sequence: a column; ``{column: c, ties: line}`` (changes of one key with the
    same value in one File apply in line order: a commit time, such as DMS's
    timestampColumnName); or ``{file_order: dms}`` (no column: each File's place in DMS's file
    naming, then the line)."""
    shapes = (
        "meta.cdc.sequence (what orders changes) is required: a column, {column: <column>, "
        "ties: line}, or {file_order: dms} (DMS's file names, then the line)"
    )
    column: Any
    ties: Any
    order: Any
    if isinstance(raw, list):
        return _parse_sequence_list(raw, names, errors, fmt)
    if isinstance(raw, str) and raw:
        column, ties, order = raw, None, None
    elif isinstance(raw, dict) and raw:
        unknown = sorted(set(raw) - SEQUENCE_KEYS)
        if unknown:
            errors.append(f"unknown key(s) meta.cdc.sequence.{', '.join(unknown)}; {shapes}")
        column, ties, order = raw.get("column"), raw.get("ties"), raw.get("file_order")
        if order is not None and (column is not None or ties is not None):
            errors.append("meta.cdc.sequence: file_order orders by the File and line alone")
        if ties is not None and ties != "line":
            errors.append(f"meta.cdc.sequence.ties {ties!r} unknown; accepted: line")
        if order is not None and order not in FILE_ORDERS:
            errors.append(
                f"meta.cdc.sequence.file_order {order!r} unknown; accepted: {list(FILE_ORDERS)}"
            )
        if order is not None and fmt == "debezium":
            errors.append("format debezium orders by a declared source field, not file_order")
        if order is None and not column:
            errors.append(shapes)
    else:
        errors.append(shapes)
        return "", {}
    if column is not None and column not in names:
        errors.append(f"sequence column {column!r} is not among the declared columns")
    extra: dict[str, Any] = {"sequence_ties": ties == "line"}
    if order is not None:
        extra["file_order"] = str(order)
    return str(column or ""), extra


def _debezium_preset(
    cdc: dict[str, Any], columns: list[Column], errors: list[str]
) -> dict[str, Any] | None:
    """``debezium: {preset: mysql}`` (or sqlserver): the connector's position declared for the
    user: its columns appended to ``columns`` where not declared, their ``fields`` and the
    envelope's op where not mapped, and the sequence where none is given. None (and the error
    said) for a preset that is not one of these."""
    conf = cdc.get("debezium")
    if not isinstance(conf, dict) or "preset" not in conf:
        return cdc
    preset = conf["preset"]
    if preset not in DEBEZIUM_POSITIONS:
        errors.append(f"debezium.preset {preset!r} unknown; accepted: {sorted(DEBEZIUM_POSITIONS)}")
        return None
    if not isinstance(conf.get("fields") or {}, dict):
        return cdc  # said by _parse_debezium
    position = DEBEZIUM_POSITIONS[preset]
    fields = dict(conf.get("fields") or {})
    declared = {c.name for c in columns}
    wanted = [] if "op" in fields.values() else [("op", "op", "string")]
    wanted += [(column, f"source.{f}", kind) for f, column, kind in position]
    for column, path, kind in wanted:
        fields.setdefault(column, path)
        if column not in declared:
            columns.append(Column(column, kind))
    return {
        **cdc,
        "sequence": cdc.get("sequence") or [column for _, column, _ in position],
        "debezium": {**conf, "fields": fields},
    }


def _parse_sequence_list(
    raw: list[Any], names: list[str], errors: list[str], fmt: str
) -> tuple[str, dict[str, Any]]:
    """meta.cdc.sequence as a list: columns compared in order, the first difference deciding
    (Debezium's MySQL connector: binlog file, position, row; a commit time, then the change's
    number in its transaction)."""
    parts = [p for p in raw if isinstance(p, str) and p]
    if not parts or len(parts) != len(raw):
        errors.append("meta.cdc.sequence: a list of declared column names, e.g. [file, pos, row]")
        return "", {}
    if len(set(parts)) != len(parts):
        errors.append(f"meta.cdc.sequence {parts}: a column twice")
    for part in parts:
        if part not in names:
            errors.append(f"sequence column {part!r} is not among the declared columns")
    return parts[0], {"sequence_parts": tuple(parts)}


def _parse_debezium(
    cdc: dict[str, Any], columns: list[Column], keys: list[str], errors: list[str]
) -> dict[str, Any]:
    """format debezium: ``debezium.fields`` (column -> envelope field) and ``envelope``."""
    conf = cdc.get("debezium") or {}
    if not isinstance(conf, dict):
        errors.append("meta.cdc.debezium must be a mapping (fields, envelope)")
        return {}
    for key in sorted(set(conf) - DEBEZIUM_CONF_KEYS):
        errors.append(
            f"unknown key meta.cdc.debezium.{key}; accepted: {sorted(DEBEZIUM_CONF_KEYS)}"
        )
    envelope = str(conf.get("envelope", "auto"))
    if envelope not in ENVELOPES:
        errors.append(f"debezium.envelope {envelope!r} unknown; accepted: {list(ENVELOPES)}")
    fields = conf.get("fields") or {}
    if not isinstance(fields, dict):
        errors.append("debezium.fields must map columns to envelope fields, e.g. {lsn: source.lsn}")
        fields = {}
    names = [c.name for c in columns]
    out: dict[str, str] = {}
    for column, path in fields.items():
        if column not in names:
            errors.append(f"debezium.fields: {column!r} is not among the declared columns")
        elif not isinstance(path, str) or not ENVELOPE_FIELD.match(path):
            errors.append(
                f"debezium.fields: {column}: {path!r} is not an envelope field (op, ts_ms, "
                "source.<field>, transaction.id, transaction.total_order, "
                "transaction.data_collection_order)"
            )
        elif column in keys:
            errors.append(f"debezium.fields: {column!r} is a key (keys come from the row image)")
        else:
            out[str(column)] = path
    return {
        "debezium_fields": out,
        "debezium_envelope": envelope,
        "debezium_encodings": _parse_encodings(conf.get("encodings"), names, out, errors),
    }


def _parse_encodings(
    raw: Any, names: list[str], fields: dict[str, str], errors: list[str]
) -> dict[str, tuple[str, int | None]]:
    """debezium.encodings: column -> a logical type name, or {name: ..., scale: n} for a
    Decimal: how the column's values are encoded when a line carries no schema."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append("debezium.encodings must map columns to logical types")
        return {}
    out: dict[str, tuple[str, int | None]] = {}
    for column, spec in raw.items():
        name, scale = (spec, None) if isinstance(spec, str) else (None, None)
        if isinstance(spec, dict):
            name, scale = spec.get("name"), spec.get("scale")
            for key in sorted(set(spec) - {"name", "scale"}):
                errors.append(f"debezium.encodings.{column}: unknown key {key!r} (name, scale)")
        where = f"debezium.encodings.{column}"
        if column not in names or column in fields:
            errors.append(f"{where}: not a declared column of the row image")
        elif name not in ENCODINGS:
            errors.append(
                f"{where}: {name!r} is not a logical type read here; accepted: "
                + ", ".join(ENCODINGS)
            )
        elif name == "org.apache.kafka.connect.data.Decimal" and not (
            isinstance(scale, int) and scale >= 0
        ):
            errors.append(f"{where}: a Decimal needs its scale: {{name: {name}, scale: 2}}")
        else:
            out[str(column)] = (str(name), scale if isinstance(scale, int) else None)
    return out


def _check_debezium_order(
    fields: dict[str, str],
    columns: list[Column],
    sequence: list[str],
    op_column: str,
    errors: list[str],
) -> None:
    """The operation column is the envelope's op; each sequence column is a declared integer
    or string (staging orders by them in turn, then ts_ms, then the line)."""
    if fields.get(op_column) != "op":
        errors.append(
            f"format debezium: the operation column {op_column!r} must be the envelope's op "
            f"(debezium.fields: {{{op_column}: op}})"
        )
    types = {c.name: c.data_type for c in columns}
    for part in sequence:
        if part in types and types[part] not in (*INTEGER_TYPES, "string"):
            errors.append(
                f"format debezium: sequence column {part!r} must be an integer or a string "
                f"(source.lsn, a binlog position), not {types[part]}"
            )


def binlog_file(fields: dict[str, str], column: str) -> bool:
    """Whether ``column`` holds MySQL's binlog file name (``source.file``: compared by the
    number after its base name, as MySQL numbers them)."""
    return fields.get(column) == "source.file"


PARTIAL_KEYS = {"null_means", "unchanged_columns", "unchanged_placeholder"}


def _parse_partial(
    cdc: dict[str, Any], names: list[str], fixed: list[str], errors: list[str]
) -> dict[str, Any]:
    """Mode cdc, partial updates: ``null_means: unchanged`` makes an update's NULL keep the
    key's previous value, in ``unchanged_columns`` (default: every column but the keys, the
    sequence and the operation); ``unchanged_placeholder`` (Debezium's
    ``__debezium_unavailable_value``, a DMS LOB placeholder) is read as such a NULL there."""
    null_means = str(cdc.get("null_means", "value"))
    if null_means not in NULL_MEANS:
        errors.append(f"null_means {null_means!r} unknown; accepted: {list(NULL_MEANS)}")
    listed = cdc.get("unchanged_columns")
    placeholder = cdc.get("unchanged_placeholder")
    if null_means != "unchanged":
        for key in ("unchanged_columns", "unchanged_placeholder"):
            if cdc.get(key) is not None:
                errors.append(
                    f"{key} needs null_means: unchanged (an update's NULL then keeps the value "
                    "the key had; the placeholder is staged as that NULL)"
                )
        return {}
    if listed is None:
        columns = [n for n in names if n not in fixed]
    elif isinstance(listed, list) and listed and all(isinstance(c, str) for c in listed):
        columns = list(listed)
    else:
        errors.append("unchanged_columns must be a non-empty list of declared columns")
        columns = []
    for col in columns:
        if col not in names:
            errors.append(f"unchanged_columns: {col!r} is not among the declared columns")
        elif col in fixed:
            errors.append(
                f"unchanged_columns: {col!r} is a key, the sequence or the operation column"
            )
    if placeholder is not None and (not isinstance(placeholder, str) or not placeholder):
        errors.append("unchanged_placeholder must be a non-empty string")
        placeholder = None
    return {"unchanged_columns": tuple(columns), "unchanged_placeholder": placeholder}


SNAPSHOT_KEYS = {"snapshot_kind", "compare", "effective_date"}


def _parse_snapshot(
    cdc: dict[str, Any], columns: list[Column], keys: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """Mode snapshot: the kind of extract, the compared columns and the effective date."""
    errors: list[str] = []
    names = [c.name for c in columns]
    kind = str(cdc.get("snapshot_kind", ""))
    if kind not in SNAPSHOT_KINDS:
        errors.append(
            f"snapshot_kind {kind or None!r}: required for mode snapshot, one of "
            f"{list(SNAPSHOT_KINDS)} (full: a key missing from a File was deleted; delta: "
            "a missing key is unchanged)"
        )
    effective = cdc.get("effective_date")
    eff: EffectiveDate | None = None
    if effective == "option":
        eff = EffectiveDate(option=True)
    elif isinstance(effective, dict) and len(set(effective) & {"column", "file_pattern"}) == 1:
        unknown = set(effective) - {"column", "file_pattern", "format"}
        if unknown:
            errors.append(f"effective_date: unknown keys {sorted(unknown)}")
        column = effective.get("column")
        pattern = effective.get("file_pattern")
        fmt = str(effective.get("format", "%Y-%m-%d"))
        if column is not None:
            if column not in names:
                errors.append(f"effective_date column {column!r} is not among the declared columns")
            elif next(c for c in columns if c.name == column).data_type != "date":
                errors.append(f"effective_date column {column!r} must be declared data_type: date")
            elif column in keys:
                errors.append(f"effective_date column {column!r} cannot be a key column")
        if pattern is not None:
            try:
                compiled = re.compile(str(pattern))
            except re.error as exc:
                errors.append(f"effective_date file_pattern {pattern!r}: {exc}")
            else:
                if compiled.groups < 1:
                    errors.append(
                        f"effective_date file_pattern {pattern!r} needs a group around the date"
                    )
        if "%" not in fmt:
            errors.append(f"effective_date format {fmt!r} is not a strptime format")
        eff = EffectiveDate(
            column=str(column) if column is not None else None,
            file_pattern=str(pattern) if pattern is not None else None,
            format=fmt,
        )
    else:
        errors.append(
            "effective_date is required for mode snapshot: {column: <a date column>}, "
            "{file_pattern: <regex with a group around the date>, format: '%Y-%m-%d'}, or "
            "'option' (runner ingest --effective-date)"
        )
    non_keys = [n for n in names if n not in keys and (eff is None or n != eff.column)]
    compare_raw = cdc.get("compare")
    if compare_raw is None:
        compare = non_keys
    elif isinstance(compare_raw, list) and all(isinstance(c, str) for c in compare_raw):
        compare = list(compare_raw)
    elif isinstance(compare_raw, dict) and set(compare_raw) == {"exclude"}:
        exclude = compare_raw["exclude"]
        exclude = [exclude] if isinstance(exclude, str) else exclude
        for col in exclude or []:
            if col not in names:
                errors.append(f"compare.exclude: {col!r} is not among the declared columns")
        compare = [n for n in non_keys if n not in (exclude or [])]
    else:
        errors.append("compare must be a list of columns, or {exclude: [columns]}")
        compare = non_keys
    for col in compare:
        if col not in names:
            errors.append(f"compare: {col!r} is not among the declared columns")
        elif col in keys:
            errors.append(f"compare: {col!r} is a key column (keys are compared by the key hash)")
    if not compare and not errors:
        errors.append("compare: no column left to compare")
    return {
        "snapshot_kind": kind,
        "compare": tuple(compare),
        "effective_date": eff,
    }, errors
