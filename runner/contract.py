"""The contract between the runner and the dbt package: the framework's reserved columns and
its own tables, read from the package's ``common/contract.sql``.

That macro is the one place they are written. The dbt package is shipped inside this Python
package (``runner/dbt_package``, the repository's ``macros/``), and the macro only returns a
literal, so rendering it with plain Jinja gives exactly what dbt gets: the runner never reads a
file outside its own installed package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

#: The dbt package `cdc`, as installed with the runner (``packages.yml``: ``local:`` this path).
DBT_PACKAGE = Path(__file__).resolve().parent / "dbt_package"
CONTRACT_FILE = DBT_PACKAGE / "common" / "contract.sql"
PREFIX = "_cdc_"
TYPES = ("string", "bigint", "timestamp", "date", "sequence")
MODES = ("cdc", "snapshot")
STEPS = ("staged", "applied", "snapshot", "history")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class LineageColumn:
    key: str  # the value's name (what fills it): operation, file_hash, ...
    name: str  # the column name: _cdc_...
    type: str  # a contract type (TYPES)
    on: str  # the step that fills it (STEPS)
    modes: tuple[str, ...] = MODES  # the entity modes whose rows carry it


@dataclass(frozen=True)
class StateTable:
    name: str
    identifier: str
    columns: dict[str, str]  # column -> contract type, in order
    key: tuple[str, ...]


@dataclass(frozen=True)
class Contract:
    lineage: tuple[LineageColumn, ...]
    state_tables: dict[str, StateTable]


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def _dbt_return(value: Any) -> None:
    raise _Return(value)


def render_macro(macro_file: Path, name: str) -> Any:
    """What a dbt macro that only ``return()``s a literal returns, rendered with plain Jinja."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.do"])
    env.globals["return"] = _dbt_return
    module = env.from_string(macro_file.read_text(encoding="utf-8")).module
    try:
        getattr(module, name)()
    except _Return as ret:
        return ret.value
    raise RuntimeError(f"{macro_file}: {name}() returned nothing")  # pragma: no cover


def _check(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise RuntimeError(f"{CONTRACT_FILE.name}: {where}: {message}")


@cache
def contract(macro_file: Path = CONTRACT_FILE) -> Contract:
    raw = render_macro(macro_file, "contract")
    lineage = []
    for key, col in raw["lineage"].items():
        where = f"lineage column {key!r}"
        _check(bool(_NAME.match(key)), where, "the key must be a plain lower-case name")
        name = str(col["name"])
        _check(
            name.startswith(PREFIX) and bool(_NAME.match(name)),
            where,
            f"the name must be lower-case and start with {PREFIX!r}: {name!r}",
        )
        _check(col["type"] in TYPES, where, f"type must be one of {TYPES}: {col['type']!r}")
        _check(col["on"] in STEPS, where, f"'on' must be one of {STEPS}: {col['on']!r}")
        modes = tuple(col.get("modes", MODES))
        _check(set(modes) <= set(MODES), where, f"'modes' must be among {MODES}: {modes}")
        lineage.append(LineageColumn(key, name, col["type"], col["on"], modes))
    names = [c.name for c in lineage]
    _check(len(set(names)) == len(names), "lineage", "a column name is used twice")
    tables = {}
    for name, spec in raw["state_tables"].items():
        where = f"state table {name!r}"
        columns = {str(c): str(t) for c, t in spec["columns"].items()}
        for c, t in columns.items():
            _check(bool(_NAME.match(c)), where, f"column {c!r} is not a plain lower-case name")
            _check(t in TYPES and t != "sequence", where, f"column {c!r}: unknown type {t!r}")
        key = tuple(spec.get("key") or ())
        _check(all(k in columns for k in key), where, f"key {key} names a column it lacks")
        tables[name] = StateTable(name, str(spec["identifier"]), columns, key)
    return Contract(tuple(lineage), tables)


def lineage_columns() -> dict[str, str]:
    """Logical name -> column name, for every lineage column, in order."""
    return {c.key: c.name for c in contract().lineage}


def lineage_on(step: str, mode: str = "cdc") -> list[LineageColumn]:
    """The lineage columns one step fills (``staged``, ``applied``, ``snapshot``, ``history``)
    on rows of an entity of ``mode`` (``cdc``, ``snapshot``), in order."""
    return [c for c in contract().lineage if c.on == step and mode in c.modes]


def column(logical: str) -> str:
    """The column name of one lineage field, e.g. ``column('process_id')``."""
    return lineage_columns()[logical]


def staged_columns(mode: str = "cdc") -> list[str]:
    """The lineage columns of a staged row, in order (the apply adds the rest)."""
    return [c.name for c in lineage_on("staged", mode)]


def state_table(name: str) -> StateTable:
    return contract().state_tables[name]


def state_tables() -> dict[str, dict[str, Any]]:
    """The state tables as plain data: name -> {identifier, columns, types, key}."""
    return {
        n: {
            "identifier": t.identifier,
            "columns": list(t.columns),
            "types": dict(t.columns),
            "key": list(t.key),
        }
        for n, t in contract().state_tables.items()
    }
