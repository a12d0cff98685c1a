"""Where a File's columns and the declared types meet the staging table (meta.cdc.on_schema_change).

The staging table is made from the declaration. Later it can differ from it in two ways:
- a File holds a column the declaration lacks: under ``append_new_columns`` or
  ``sync_all_columns`` it is added to the staging table (nullable: the rows staged before it
  hold NULL) and staged; the runner says which, with the YAML to declare it, and never edits
  the declaration itself;
- the declaration's type of a column changed: a widening (a larger integer, ``float`` to
  ``double``, more decimal digits at the same scale, a longer ``varchar`` or ``string``) is
  applied to the staging table in place, under any policy; any other change quarantines the
  entity's Files, with the column named, until the declaration and the table agree again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

from runner.contract import lineage_on
from runner.entities import Column, Entity
from runner.fs import FilePath, RemoteFile

INTEGERS = ("tinyint", "smallint", "int", "bigint")
WIDENINGS = (
    "tinyint < smallint < int < bigint, float < double, decimal(p,s) < decimal(p+n,s), "
    "varchar(n) < varchar(n+m) < string"
)
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_TEXT = re.compile(r"^(varchar|char)\((\d+)\)$")


def normal(data_type: str) -> str:
    """A Spark SQL type as one spelling: lower case, no spaces, ``integer`` as ``int``,
    ``decimal`` as ``decimal(10,0)`` (Spark's default)."""
    t = re.sub(r"\s+", "", data_type.lower())
    return {"integer": "int", "decimal": "decimal(10,0)", "long": "bigint", "short": "smallint",
            "byte": "tinyint", "real": "float"}.get(t, t)  # fmt: skip


def change(old: str, new: str) -> str:
    """``same``, ``widen`` (a column of type ``old`` becomes ``new`` in place, every value
    kept) or ``other``."""
    a, b = normal(old), normal(new)
    if a == b:
        return "same"
    if a in INTEGERS and b in INTEGERS:
        return "widen" if INTEGERS.index(b) > INTEGERS.index(a) else "other"
    if (a, b) == ("float", "double"):
        return "widen"
    da, db = _DECIMAL.match(a), _DECIMAL.match(b)
    # An unbounded numeric (PostgreSQL's numeric; BigQuery's NUMERIC when the table does not
    # say its precision) holds every declared decimal.
    if a in ("numeric", "bignumeric") and db:
        return "same"
    if da and b == "numeric":
        return "widen"
    if da and db:
        same_scale = da.group(2) == db.group(2)
        return "widen" if same_scale and int(db.group(1)) > int(da.group(1)) else "other"
    ta, tb = _TEXT.match(a), _TEXT.match(b)
    if ta and (
        b == "string" or (tb and tb.group(1) == "varchar" and int(tb.group(2)) >= int(ta.group(2)))
    ):
        return "widen"
    return "other"


@dataclass
class Evolution:
    """What staging a group of Files does to the staging table, decided before any is read."""

    entity: Entity  # the entity as staged: the declared columns, then the added ones
    added: list[Column] = field(default_factory=list)  # new to the staging table


def declared_vs_table(
    entity: Entity, table: dict[str, str] | None, stored: Callable[[str], str] = normal
) -> tuple[list[tuple[str, str]], str | None]:
    """(the declared columns whose type widens the staging table's: (name, declared type); a
    problem naming the first column whose type changed otherwise, or None). ``table`` holds the
    staging table's columns and ``stored`` spells a declared type as the destination stores
    it (a writer's ``table_columns`` and ``stored_type``)."""
    if not table:
        return [], None
    have = {k.lower(): v for k, v in table.items()}
    widened = []
    for c in entity.columns:
        old = have.get(c.name.lower())
        if old is None:
            continue
        how = change(old, stored(c.data_type))
        if how == "widen":
            widened.append((c.name, c.data_type))
        elif how == "other":
            return widened, (
                f"column {c.name!r}: declared {c.data_type}, but the staging table "
                f"{entity.staging_table} holds {old}; only a widening is applied in place "
                f"({WIDENINGS}): declare {old} again, or a type that widens it"
            )
    return widened, None


def added_columns(table: dict[str, str], staged: dict[str, str]) -> list[tuple[str, str]]:
    """The staged columns (name, Spark SQL type) the staging table lacks."""
    have = {k.lower() for k in table}
    return [(c, t) for c, t in staged.items() if c.lower() not in have]


def evolve(
    entity: Entity,
    header: list[str],
    table: dict[str, str] | None,
    file_types: dict[str, str] | None = None,
) -> Evolution:
    """The entity a File of these columns is staged as: the declared columns, then the staging
    table's undeclared ones (added by earlier Files; NULL where a File lacks them), then, under
    append_new_columns and sync_all_columns, the File's new ones, typed by the File (Parquet)
    or as ``string``."""
    declared = {c.name.lower() for c in entity.columns}
    extra: list[Column] = []
    seen = set(declared)
    for name, data_type in (table or {}).items():
        if name.lower() not in seen and name.lower() not in lineage_names():
            extra.append(Column(name, data_type))
            seen.add(name.lower())
    added = []
    for name in header if entity.evolves else []:
        if name.lower() not in seen:
            col = Column(name, (file_types or {}).get(name, "string"))
            extra.append(col)
            added.append(col)
            seen.add(name.lower())
    if not extra:
        return Evolution(entity)
    return Evolution(replace(entity, columns=entity.columns + tuple(extra)), added)


@cache
def lineage_names() -> frozenset[str]:
    """The staged lineage columns' names, lower case: never an entity's column."""
    return frozenset(
        c.name.lower() for mode in ("cdc", "snapshot") for c in lineage_on("staged", mode)
    )


def declaration_yaml(columns: list[Column]) -> str:
    """The lines to add under the entity's ``columns:`` to declare these columns."""
    return "\n".join(f"  - name: {c.name}\n    data_type: {c.data_type}" for c in columns)


def parquet_types(path: FilePath) -> dict[str, str]:
    """A Parquet File's columns with their types as Spark SQL types (for a new column: the
    File's own type; ``string`` where none fits)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(path, RemoteFile):
        with path.open("rb") as handle:
            schema = pq.read_schema(handle)
    else:
        schema = pq.read_schema(path)
    simple = (
        (pa.types.is_int8, "tinyint"),
        (pa.types.is_int16, "smallint"),
        (pa.types.is_int32, "int"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_date, "date"),
        (pa.types.is_timestamp, "timestamp"),
    )
    out = {}
    for f in schema:
        if pa.types.is_decimal(f.type):
            out[f.name] = f"decimal({f.type.precision},{f.type.scale})"
        else:
            out[f.name] = next((name for test, name in simple if test(f.type)), "string")
    return out
