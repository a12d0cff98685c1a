"""The reserved lineage column names, read from the dbt package's macro.

``macros/common/lineage_columns.sql`` is the single place the names are written; the runner
renders that macro with plain Jinja so Python and SQL can never disagree.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

MACRO_FILE = Path(__file__).resolve().parents[1] / "macros" / "common" / "lineage_columns.sql"
PREFIX = "_cdc_"


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def _dbt_return(value: Any) -> None:
    raise _Return(value)


@cache
def lineage_columns(macro_file: Path = MACRO_FILE) -> dict[str, str]:
    """Logical name -> column name, in their fixed order."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.globals["return"] = _dbt_return
    module = env.from_string(macro_file.read_text()).module
    try:
        module.default__lineage_columns()  # type: ignore[attr-defined]
    except _Return as ret:
        names = dict(ret.value)
    else:  # pragma: no cover - the macro always returns
        raise RuntimeError(f"{macro_file}: default__lineage_columns() returned nothing")
    bad = [n for n in names.values() if not n.startswith(PREFIX)]
    if bad:
        raise RuntimeError(f"{macro_file}: lineage columns must start with {PREFIX!r}: {bad}")
    return names


def column(logical: str) -> str:
    """The column name of one lineage field, e.g. ``column('process_id')``."""
    return lineage_columns()[logical]
