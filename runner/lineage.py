"""The reserved lineage column names, read from the dbt package's macro.

``macros/common/lineage_columns.sql`` is the single place the names are written; the runner
renders that macro with plain Jinja so Python and SQL can never disagree.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

MACROS = Path(__file__).resolve().parents[1] / "macros" / "common"
MACRO_FILE = MACROS / "lineage_columns.sql"
STATE_FILE = MACROS / "state_tables.sql"
PREFIX = "_cdc_"


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def _dbt_return(value: Any) -> None:
    raise _Return(value)


def render_macro(macro_file: Path, name: str) -> Any:
    """What a dbt macro that only ``return()``s a literal returns, rendered with plain Jinja."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.globals["return"] = _dbt_return
    module = env.from_string(macro_file.read_text()).module
    try:
        getattr(module, name)()
    except _Return as ret:
        return ret.value
    raise RuntimeError(f"{macro_file}: {name}() returned nothing")  # pragma: no cover


@cache
def lineage_columns(macro_file: Path = MACRO_FILE) -> dict[str, str]:
    """Logical name -> column name, in their fixed order."""
    names = dict(render_macro(macro_file, "default__lineage_columns"))
    bad = [n for n in names.values() if not n.startswith(PREFIX)]
    if bad:
        raise RuntimeError(f"{macro_file}: lineage columns must start with {PREFIX!r}: {bad}")
    return names


def column(logical: str) -> str:
    """The column name of one lineage field, e.g. ``column('process_id')``."""
    return lineage_columns()[logical]


@cache
def state_tables(macro_file: Path = STATE_FILE) -> dict[str, dict[str, Any]]:
    """The framework's state tables: logical name -> {identifier, columns}."""
    return dict(render_macro(macro_file, "default__state_tables"))


STAGED = (
    "operation",
    "sequence",
    "process_id",
    "file_hash",
    "file_name",
    "row_number",
    "ingested_at",
)


def staged_columns() -> list[str]:
    """The lineage columns of a staged row (the apply adds the rest)."""
    names = lineage_columns()
    return [names[k] for k in STAGED]
