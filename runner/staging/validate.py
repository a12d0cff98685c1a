"""Header checks done before Spark reads a File (cheap, and they name line 1 precisely)."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

from runner.entities import Entity


def open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")  # noqa: SIM115


def read_header(path: Path, entity: Entity) -> tuple[list[str] | None, str | None]:
    """(header columns, None) or (None, reason naming line 1 and the column)."""
    if entity.format == "json":
        return [c.name for c in entity.columns], None  # JSON lines: each record names its fields
    if entity.format == "parquet":
        return _parquet_header(path, entity)
    try:
        with open_text(path) as handle:
            first = next(csv.reader(handle, delimiter=entity.csv_delimiter), None)
    except UnicodeDecodeError as exc:
        return None, f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
    except (OSError, csv.Error) as exc:
        return None, f"{path.name}: cannot be read as CSV: {exc}"
    if first is None:
        return None, f"{path.name}: line 1: empty File, expected a header row"
    header = [h.strip().lstrip("\ufeff") for h in first]
    declared = [c.name for c in entity.columns]
    missing = [c for c in declared if c not in header]
    if missing:
        return (
            None,
            f"{path.name}: line 1, column {missing[0]!r}: declared column missing from the header"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""),
        )
    extra = [h for h in header if h not in declared]
    if extra:
        return (
            None,
            f"{path.name}: line 1, column {extra[0]!r}: not declared for entity {entity.name!r}",
        )
    if len(set(header)) != len(header):
        return None, f"{path.name}: line 1: a column appears twice in the header"
    return header, None


def _parquet_header(path: Path, entity: Entity) -> tuple[list[str] | None, str | None]:
    """Column names from the Parquet footer (pyarrow reads only the footer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = list(pq.read_schema(path).names)
    except (OSError, pa.ArrowInvalid) as exc:
        return None, f"{path.name}: not a readable Parquet File: {exc}"
    return _check_names(path, entity, names, "the Parquet schema")


def _check_names(
    path: Path, entity: Entity, header: list[str], where: str
) -> tuple[list[str] | None, str | None]:
    declared = [c.name for c in entity.columns]
    missing = [c for c in declared if c not in header]
    if missing:
        return None, (
            f"{path.name}: column {missing[0]!r}: declared column missing from {where}"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else "")
        )
    extra = [h for h in header if h not in declared]
    if extra:
        return None, f"{path.name}: column {extra[0]!r}: not declared for entity {entity.name!r}"
    return header, None
