"""Header checks done before Spark reads a File (cheap, and they name line 1 precisely)."""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from runner.entities import Entity
from runner.fs import FilePath, RemoteFile

CHUNK = 1 << 20


def open_binary(path: FilePath) -> BinaryIO:
    """The File's bytes, gunzipped when its name ends in .gz (local or through fsspec)."""
    if isinstance(path, RemoteFile):
        import fsspec

        compression = "gzip" if path.suffix == ".gz" else None
        return fsspec.open(path.uri, "rb", compression=compression).open()
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")  # noqa: SIM115


def open_text(path: FilePath) -> io.TextIOBase:
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", newline="")


@dataclass(frozen=True)
class TextScan:
    problem: str | None  # None, or why the File is bad input
    # A newline inside a quoted CSV field somewhere: the File must be read whole (multiLine),
    # it cannot be split at line boundaries.
    multiline_records: bool


def scan_text(path: FilePath, entity: Entity) -> str | None:
    """None, or the reason a text File is bad input (see ``scan_text_file``)."""
    return scan_text_file(path, entity).problem


def scan_text_file(path: FilePath, entity: Entity) -> TextScan:
    """Read a text File to its end, once: whether it is bad input, and whether a CSV record
    spans lines.

    Spark replaces invalid UTF-8 with U+FFFD without a word and reads a truncated gzip File
    up to where it breaks, so both are checked here on every byte (streamed: memory stays flat),
    with the line, column and field of the first bad byte. A CSV record spans lines when a
    newline falls inside quotes: where the count of quote characters so far is odd (escaped
    quotes come in pairs, so they never change that).
    """
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0  # bytes of the (decompressed) text before this chunk
    quotes = 0  # quote characters so far, modulo 2
    spans = False
    track = entity.format == "csv"
    try:
        with open_binary(path) as handle:
            while chunk := handle.read(CHUNK):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    pending = len(exc.object) - len(chunk)
                    bad = offset - pending + exc.start
                    return TextScan(_bad_utf8(path, entity, bad, exc.reason), spans)
                if track and not spans:
                    spans, quotes = _newline_in_quotes(chunk, quotes)
                offset += len(chunk)
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as exc:
                at = offset - len(exc.object) + exc.start
                return TextScan(_bad_utf8(path, entity, at, exc.reason), spans)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        return TextScan(f"{path.name}: not a complete gzip File ({exc})", spans)
    except OSError as exc:
        return TextScan(f"{path.name}: cannot be read: {exc}", spans)
    return TextScan(None, spans)


def _newline_in_quotes(chunk: bytes, parity: int) -> tuple[bool, int]:
    """(whether a newline of ``chunk`` is inside quotes, quote parity after it), given the
    parity before it. A newline is inside quotes when the quotes before it (in the chunk, plus
    the parity) are odd: found by where each newline falls among the quotes' positions, not
    by a running count over every byte (about a millisecond per MiB)."""
    import numpy as np

    data = np.frombuffer(chunk, dtype=np.uint8)
    quotes = np.flatnonzero(data == 0x22)
    after = (parity + len(quotes)) & 1
    if not len(quotes) and not parity:
        return False, after
    newlines = np.flatnonzero(data == 0x0A)
    inside = (np.searchsorted(quotes, newlines) + parity) & 1
    return bool(inside.any()), after


def _bad_utf8(path: FilePath, entity: Entity, position: int, reason: str) -> str:
    """Where byte ``position`` is: its line, its column (in characters) and its CSV field."""
    line, line_start, seen = 1, 0, 0
    with open_binary(path) as handle:
        while seen < position:
            chunk = handle.read(min(CHUNK, position - seen))
            if not chunk:
                break
            newlines = chunk.count(b"\n")
            if newlines:
                line += newlines
                line_start = seen + chunk.rindex(b"\n") + 1
            seen += len(chunk)
    with open_binary(path) as handle:  # again, to the start of that line (gzip cannot seek back)
        _skip(handle, line_start)
        prefix = handle.read(position - line_start).decode("utf-8", errors="replace")
    column = len(prefix) + 1
    where = f"{path.name}: line {line}, column {column}"
    if entity.format == "csv" and (line > 1 or not entity.csv_header):
        fields = next(csv.reader([prefix + "x"], delimiter=entity.csv_delimiter), [])
        header = _header_names(path, entity)
        if header and 0 < len(fields) <= len(header):
            where += f" (field {header[len(fields) - 1]!r})"
    return f"{where}: not valid UTF-8 ({reason} at byte {position})"


def _skip(handle: BinaryIO, count: int) -> None:
    while count > 0:
        got = len(handle.read(min(CHUNK, count)))
        if not got:
            return
        count -= got


def _header_names(path: FilePath, entity: Entity) -> list[str] | None:
    if not entity.csv_header:
        return expected_columns(path, entity)
    try:  # the first line's bytes only: a bad byte further on must not hide the header
        with open_binary(path) as handle:
            line = handle.readline(CHUNK).decode("utf-8")
        first = next(csv.reader([line], delimiter=entity.csv_delimiter), None)
    except (UnicodeDecodeError, OSError, csv.Error, EOFError):
        return None
    return [h.strip().lstrip("\ufeff") for h in first] if first else None


def expected_columns(path: FilePath, entity: Entity) -> list[str]:
    """The declared columns a File holds, in order: all of them, but the operation column in
    a File that lacks it (a DMS full-load File: meta.cdc.operation.files)."""
    missing = entity.op_missing(path.name)
    return [c.name for c in entity.columns if not (missing and c.name == entity.operation_column)]


def read_header(path: FilePath, entity: Entity) -> tuple[list[str] | None, str | None]:
    """(header columns, None) or (None, reason naming line 1 and the column). A File without
    a header row (csv.header: false) holds the declared columns in their declared order."""
    if entity.format in ("json", "debezium"):
        return [c.name for c in entity.columns], None  # JSON lines: each record names its fields
    if entity.format == "parquet":
        return _parquet_header(path, entity)
    first, problem = _first_row(path, entity)
    if problem:
        return None, problem
    if not entity.csv_header:
        return _headerless(path, entity, first)
    if first is None:
        return None, f"{path.name}: line 1: empty File, expected a header row"
    header = first
    declared = expected_columns(path, entity)
    missing = missing_columns(declared, header, entity)
    if missing:
        return (
            None,
            f"{path.name}: line 1, column {missing[0]!r}: declared column missing from the header"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else "")
            + MISSING_HINT,
        )
    extra = [h for h in header if h not in declared]
    if extra and entity.on_schema_change == "fail":
        return (
            None,
            f"{path.name}: line 1, column {extra[0]!r}: not declared for entity {entity.name!r}"
            + SCHEMA_HINT,
        )
    seen: set[str] = set()
    for position, name in enumerate(header, start=1):
        if name in seen:
            return None, (
                f"{path.name}: line 1, column {name!r}: appears twice in the header "
                f"(again as field {position})"
            )
        seen.add(name)
    return header, None


def _first_row(path: FilePath, entity: Entity) -> tuple[list[str] | None, str | None]:
    """(the first CSV row's fields, trimmed, or None for an empty File; a problem or None)."""
    try:
        with open_text(path) as handle:
            first = next(csv.reader(handle, delimiter=entity.csv_delimiter), None)
    except UnicodeDecodeError:
        return None, scan_text(path, entity) or f"{path.name}: line 1: not valid UTF-8"
    except (OSError, csv.Error, EOFError, zlib.error) as exc:
        return None, f"{path.name}: cannot be read as CSV: {exc}"
    return ([h.strip().lstrip("\ufeff") for h in first] if first is not None else None), None


def _headerless(
    path: FilePath, entity: Entity, first: list[str] | None
) -> tuple[list[str] | None, str | None]:
    """The declared columns (a File without a header row), unless its first line is the
    header row after all (csv.header: false would read it as data)."""
    expected = expected_columns(path, entity)
    if first == expected:
        return None, (
            f"{path.name}: line 1: a header row, but meta.cdc.csv.header is false (the File's "
            "fields are read as the declared columns, in order); set header: true"
        )
    return expected, None


def _parquet_header(path: FilePath, entity: Entity) -> tuple[list[str] | None, str | None]:
    """Column names from the Parquet footer (pyarrow reads only the footer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if isinstance(path, RemoteFile):
            with path.open("rb") as handle:
                names = list(pq.read_schema(handle).names)
        else:
            names = list(pq.read_schema(path).names)
    except (OSError, pa.ArrowInvalid) as exc:
        return None, f"{path.name}: not a readable Parquet File: {exc}"
    return _check_names(path, entity, names, "the Parquet schema")


def _check_names(
    path: FilePath, entity: Entity, header: list[str], where: str
) -> tuple[list[str] | None, str | None]:
    declared = expected_columns(path, entity)
    missing = missing_columns(declared, header, entity)
    if missing:
        return None, (
            f"{path.name}: column {missing[0]!r}: declared column missing from {where}"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else "")
            + MISSING_HINT
        )
    extra = [h for h in header if h not in declared]
    if extra and entity.on_schema_change == "fail":
        return None, (
            f"{path.name}: column {extra[0]!r}: not declared for entity {entity.name!r}"
            + SCHEMA_HINT
        )
    return header, None


# Said with a File quarantined for a column its entity does not declare.
SCHEMA_HINT = (
    " (declare it; or set meta.cdc.on_schema_change: append_new_columns to add it to the staging"
    " table, or ignore to stage the File without it)"
)
# Said with a File quarantined for a declared column it lacks.
MISSING_HINT = (
    " (meta.cdc.on_schema_change: sync_all_columns stages a missing column as NULL, but for the"
    " keys, sequence and operation columns, which every File must hold)"
)


def missing_columns(declared: list[str], header: list[str], entity: Entity) -> list[str]:
    """The declared columns a File lacks that it must hold: all of them, or under
    sync_all_columns only the required ones (the others are staged as NULL)."""
    missing = [c for c in declared if c not in header]
    if entity.on_schema_change == "sync_all_columns":
        return [c for c in missing if c in entity.required_columns]
    return missing


def undeclared(header: list[str], path: FilePath, entity: Entity) -> list[str]:
    """The columns of a File's header its entity does not declare (left out when
    meta.cdc.on_schema_change is ignore, added to the staging table when it evolves)."""
    declared = set(expected_columns(path, entity))
    return [h for h in header if h not in declared]
