"""`runner new-entity`: a new entity's four files, proposed from one sample File.

The sample's columns come from its CSV header, its JSON lines' keys, its Parquet schema, or its
Debezium envelope (the row image, `after`/`before`, and the connector's schema block when the
lines carry one). Types are inferred conservatively: a column becomes bigint, decimal, date,
timestamp or boolean only when every non-empty sample value is one; anything else is string,
which always loads. The user reads the proposal before it is written; nothing existing is ever
overwritten.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from runner.entities import DEBEZIUM_POSITIONS
from runner.errors import UsageError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SAMPLE_ROWS = 1000
DMS_SEQUENCES = ("AR_H_CHANGE_SEQ", "transact_seq", "TRANSACT_SEQ")
_INT = re.compile(r"^[+-]?\d{1,18}$")
_DEC = re.compile(r"^[+-]?\d+\.(\d+)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TS = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})?$")
# Debezium's logical types (the schema block's `name`) and Kafka Connect's primitive types.
_DEBEZIUM_NAMED = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.NanoTimestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
}
_CONNECT = {"int8": "int", "int16": "int", "int32": "int", "int64": "bigint",
            "boolean": "boolean", "float32": "double", "float64": "double"}  # fmt: skip


@dataclass
class Proposal:
    """What `runner new-entity` would write: the declaration and the four files."""

    name: str
    fmt: str
    landing: str
    keys: list[str]
    columns: list[tuple[str, str]]
    cdc: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def source_yaml(self) -> str:
        table = {
            "name": self.name,
            "identifier": f"{self.name}__staged",
            "meta": {"cdc": self.cdc},
            "columns": [{"name": c, "data_type": t} for c, t in self.columns],
        }
        # `dbt source freshness`: when the entity's last File was staged (docs/operations.md)
        config = {
            "loaded_at_query": "{{ cdc.last_staged_at() }}",
            "freshness": {
                "warn_after": {"count": 1, "period": "day"},
                "error_after": {"count": 3, "period": "day"},
            },
        }
        doc = {"version": 2, "sources": [{"name": f"cdc_{self.name}",
               "schema": "{{ target.schema }}", "config": config, "tables": [table]}]}  # fmt: skip
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

    def files(self, project_dir: Path) -> dict[Path, str]:
        models = project_dir / "models"
        sequence = self.cdc.get("sequence")
        fixed = set(sequence) if isinstance(sequence, list) else {sequence}
        fixed.add((self.cdc.get("operation") or {}).get("column"))
        fixed |= set((self.cdc.get("debezium") or {}).get("fields") or {})  # op, lsn: not data
        kept = [c for c, _ in self.columns if c not in fixed]
        select = ",\n    ".join([*(_q(c) for c in kept), "{{ cdc.lineage_select() }}"])
        config = {"models": [{"name": self.name, "config": {
            "materialized": "incremental", "incremental_strategy": "merge",
            "unique_key": self.keys[0] if len(self.keys) == 1 else self.keys,
            "meta": {"cdc": {"apply": True}}}}]}  # fmt: skip
        return {
            models / "staging" / f"{self.name}.yml": "# Written by `runner new-entity`: check"
            " the types and keys.\n" + self.source_yaml(),
            models / "staging" / f"stg_{self.name}.sql": (
                f"-- The staged rows of the {self.name} Files, as `runner ingest` wrote them.\n"
                f"select * from {{{{ source('cdc_{self.name}', '{self.name}') }}}}\n"
            ),
            models / f"{self.name}.sql": (
                f"-- Current state of {self.name} (SCD Type 1), applied from the staged Files.\n"
                f"select\n    {select}\nfrom {{{{ cdc.unapplied(ref('stg_{self.name}')) }}}}\n"
            ),
            models / f"{self.name}.yml": yaml.safe_dump(config, sort_keys=False),
        }


def _q(column: str) -> str:
    return column if IDENTIFIER.match(column) else f'"{column}"'


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed by the caller


def infer(values: list[Any]) -> str:
    """The narrowest Spark SQL type every non-empty value fits, else string."""
    seen = [v for v in values if v is not None and v != ""]
    if not seen:
        return "string"
    if all(isinstance(v, bool) for v in seen):
        return "boolean"
    text = [v if isinstance(v, str) else json.dumps(v) for v in seen]
    if all(t.lower() in ("true", "false") for t in text):
        return "boolean"
    if all(_INT.match(t) for t in text):
        return "bigint"
    scales = [m.group(1) for m in (_DEC.match(t) for t in text) if m]
    if len(scales) + sum(bool(_INT.match(t)) for t in text) == len(text) and scales:
        try:
            digits = max(len(Decimal(t).as_tuple().digits) for t in text)
        except InvalidOperation:
            return "string"
        scale = max(len(s) for s in scales)
        return f"decimal({min(max(digits + 4, 18), 38)},{scale})"
    if all(_DATE.match(t) for t in text):
        return "date"
    if all(_TS.match(t) for t in text):
        return "timestamp"
    return "string"


def _csv(path: Path) -> tuple[list[str], dict[str, list[Any]]]:
    with _open_text(path) as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise UsageError(f"{path}: empty, no header row to read columns from")
        if all(_INT.match(h) or _DEC.match(h) or _TS.match(h) for h in header if h) or any(
            not IDENTIFIER.match(h) and not h.strip() for h in header
        ):
            raise UsageError(
                f"{path}: the first line is data, not a header row; new-entity needs a sample "
                "with a header (the entity itself can read Files without one: csv.header false)"
            )
        values: dict[str, list[Any]] = {h: [] for h in header}
        for n, row in enumerate(reader):
            if n >= SAMPLE_ROWS:
                break
            for h, v in zip(header, row, strict=False):
                values[h].append(v)
    return header, values


def _json_lines(path: Path) -> list[Any]:
    out = []
    with _open_text(path) as handle:
        for line in handle:
            line = line.strip()
            if not line or line == "null":  # blank lines and Kafka tombstones
                continue
            out.append(json.loads(line))
            if len(out) >= SAMPLE_ROWS:
                break
    return out


def _json(path: Path) -> tuple[list[str], dict[str, list[Any]]]:
    values: dict[str, list[Any]] = {}
    for n, obj in enumerate(_json_lines(path), start=1):
        if not isinstance(obj, dict):
            raise UsageError(f"{path}: line {n} is not a JSON object")
        for k, v in obj.items():
            values.setdefault(k, []).append(v)
    if not values:
        raise UsageError(f"{path}: no JSON object to read columns from")
    return list(values), values


def _parquet(path: Path) -> tuple[list[tuple[str, str]], dict[str, list[Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    out = []
    for f in schema:
        t = f.type
        if pa.types.is_boolean(t):
            spark = "boolean"
        elif pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
            spark = "int"
        elif pa.types.is_integer(t):
            spark = "bigint"
        elif pa.types.is_floating(t):
            spark = "double"
        elif pa.types.is_decimal(t):
            spark = f"decimal({t.precision},{t.scale})"
        elif pa.types.is_date(t):
            spark = "date"
        elif pa.types.is_timestamp(t):
            spark = "timestamp"
        else:
            spark = "string"
        out.append((f.name, spark))
    return out, {}


def _debezium(path: Path) -> tuple[list[tuple[str, str]], dict[str, Any], list[str]]:
    """Columns of the row image (typed from the schema block when there is one), the
    sequence field, and notes."""
    lines = _json_lines(path)
    if not lines:
        raise UsageError(f"{path}: no Debezium change event to read columns from")
    first = lines[0]
    payload = first.get("payload", first) if isinstance(first, dict) else {}
    if not isinstance(payload, dict) or "op" not in payload:
        raise UsageError(f"{path}: line 1 is not a Debezium change event (no `op`)")
    image = next(
        (p.get("after") or p.get("before") for p in (ln.get("payload", ln) for ln in lines)
         if isinstance(p, dict) and (p.get("after") or p.get("before"))),
        None,
    )  # fmt: skip
    if not isinstance(image, dict):
        raise UsageError(f"{path}: no event with a row image (`after` or `before`)")
    types: dict[str, str] = {}
    notes = []
    schema = first.get("schema") if "payload" in first else None
    if isinstance(schema, dict):
        for part in schema.get("fields", []):
            if part.get("field") not in ("after", "before"):
                continue
            for f in part.get("fields", []):
                name, kind = f.get("name"), f.get("type")
                if name == "org.apache.kafka.connect.data.Decimal":
                    params = f.get("parameters") or {}
                    precision = params.get("connect.decimal.precision", "38")
                    types[f["field"]] = f"decimal({precision},{params.get('scale', '0')})"
                elif name in _DEBEZIUM_NAMED:
                    types[f["field"]] = _DEBEZIUM_NAMED[name]
                elif name == "io.debezium.data.VariableScaleDecimal":
                    types[f["field"]] = "decimal(38,10)"
                    notes.append(f"{f['field']}: a numeric without scale, declared decimal(38,10)")
                elif name:
                    types[f["field"]] = "string"  # times, UUIDs, JSON: as Debezium writes them
                else:
                    types[f["field"]] = _CONNECT.get(str(kind), "string")
            break
    else:
        notes.append("the lines carry no schema: decimals and times need debezium.encodings")
    values: dict[str, list[Any]] = {}
    for ln in lines:
        p = ln.get("payload", ln) if isinstance(ln, dict) else None
        row = (p or {}).get("after") or (p or {}).get("before") or {}
        for k, v in row.items():
            values.setdefault(k, []).append(v)
    columns = [(c, types.get(c) or infer(values.get(c, []))) for c in image]
    source = payload.get("source") or {}
    fields: dict[str, Any] = {"op": "op"}
    seq: str | list[str]
    position = next(
        (p for p in DEBEZIUM_POSITIONS.values() if all(f in source for f, _, _ in p)), None
    )
    if "lsn" in source:
        seq = "lsn"
        fields["lsn"] = "source.lsn"
        columns = [("op", "string"), ("lsn", "bigint"), *columns]
    elif position is not None:  # MySQL's binlog position, SQL Server's LSNs: several fields
        seq = [column for _, column, _ in position]
        fields.update({column: f"source.{f}" for f, column, _ in position})
        columns = [("op", "string"), *((c, t) for _, c, t in position), *columns]
    else:
        seq = "ts_ms"
        fields["ts_ms"] = "ts_ms"
        columns = [("op", "string"), ("ts_ms", "bigint"), *columns]
        notes.append("no source.lsn: ordered by ts_ms (milliseconds: ties break by line)")
    return columns, {"sequence": seq, "debezium": {"fields": fields}}, notes


def propose(
    name: str,
    sample: Path,
    *,
    keys: list[str] | None = None,
    fmt: str | None = None,
    sequence: str | None = None,
) -> Proposal:
    """The declaration `runner new-entity` proposes for ``name`` from ``sample``."""
    if not IDENTIFIER.match(name):
        raise UsageError(f"entity name {name!r}: letters, digits and underscores only")
    if not sample.is_file():
        raise UsageError(f"{sample}: no such file")
    suffixes = [s.lower() for s in sample.suffixes if s.lower() != ".gz"]
    ext = suffixes[-1].lstrip(".") if suffixes else ""
    by_ext = {"csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet"}
    fmt = (fmt or by_ext.get(ext, "")).lower()
    if fmt == "json" and _looks_debezium(sample):
        fmt = "debezium"
    if fmt not in ("csv", "json", "parquet", "debezium"):
        raise UsageError(f"{sample}: say --format (csv, json, parquet or debezium)")
    notes: list[str] = []
    cdc: dict[str, Any] = {"mode": "cdc"}
    if fmt == "debezium":
        columns, extra, notes = _debezium(sample)
        cdc.update(format="debezium", sequence=extra["sequence"], debezium=extra["debezium"])
    else:
        if fmt == "csv":
            names, values = _csv(sample)
            columns = [(c, infer(values[c])) for c in names]
        elif fmt == "json":
            names, values = _json(sample)
            columns = [(c, infer(values[c])) for c in names]
        else:
            columns, _ = _parquet(sample)
        names = [c for c, _ in columns]
        cdc["format"] = fmt
        op = "Op" if "Op" in names else None
        seq = sequence or next((s for s in DMS_SEQUENCES if s in names), None)
        if seq is None:
            raise UsageError(
                f"{sample}: which column orders the changes? say --sequence COLUMN "
                f"(columns: {', '.join(names)})"
            )
        cdc["sequence"] = seq
        columns = [(c, "string") if c in (op, seq) else (c, t) for c, t in columns]
        cdc["operation"] = {"column": "Op", "preset": "dms"}
        if op is None:  # a full load's File: DMS writes Op in the change Files only
            columns = [("Op", "string"), *columns]
            cdc["operation"].update(missing_means="I", files="LOAD*")
            notes.append("no Op column in the sample: Files named LOAD* are inserts")
    names = [c for c, _ in columns]
    if sequence and sequence not in names:
        raise UsageError(f"--sequence {sequence}: not a column of {sample}")
    if not keys:
        guess = [c for c in (f"{name}_id", "id", f"{name.rstrip('s')}_id") if c in names][:1]
        if not guess:
            raise UsageError(
                f"which column(s) identify a row? say --keys (columns: {', '.join(names)})"
            )
        keys = guess
        notes.append(f"keys guessed: {keys[0]} (say --keys to choose)")
    for k in keys:
        if k not in names:
            raise UsageError(f"--keys {k}: not a column of {sample}")
    cdc["keys"] = keys
    ext_glob = {"csv": "csv", "json": "json", "parquet": "parquet", "debezium": "json"}[fmt]
    landing = f"{name}/*.{ext_glob}"
    cdc["landing"] = [landing, f"{landing}.gz"] if fmt != "parquet" else landing
    ordered = {k: cdc[k] for k in ("mode", "landing", "format", "keys", "sequence", "operation",
                                    "debezium") if k in cdc}  # fmt: skip
    return Proposal(name, fmt, landing, keys, columns, ordered, notes)


def _looks_debezium(path: Path) -> bool:
    try:
        lines = _json_lines(path)[:1]
    except (ValueError, UnicodeDecodeError):
        return False
    if not lines or not isinstance(lines[0], dict):
        return False
    payload = lines[0].get("payload", lines[0])
    image = "after" in payload or "before" in payload if isinstance(payload, dict) else False
    return isinstance(payload, dict) and "op" in payload and image


def write(proposal: Proposal, project_dir: Path) -> list[Path]:
    """Write the four files; refuse, writing nothing, if any of them exists."""
    files = proposal.files(project_dir)
    there = [p for p in files if p.exists()]
    if there:
        raise UsageError(
            "would overwrite " + ", ".join(str(p) for p in there) + "; nothing was written"
        )
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
