"""The package's copies of dbt's snapshot merge macros (macros/history/snapshot_merge.sql) are
dbt's own, line for line, apart from the lines marked ``-- cdc`` and the guard that hands other
snapshots to dbt: each is compared with the macro of the installed dbt package its comment names,
so an upgrade that changes upstream fails here instead of silently diverging."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

from helpers.project import REPO

FORKS = REPO / "macros" / "history" / "snapshot_merge.sql"

# `{#- dbt-spark 1.11 dbt/include/spark/macros/....sql ... -#}` then `{% macro name(`
_FORK = re.compile(
    r"\{#- (?P<package>dbt-[a-z]+) (?P<version>\d+\.\d+) dbt/include/(?P<adapter>[a-z_]+)/"
    r"(?P<path>\S+\.sql)[^#]*?-#\}\s*\{% macro (?P<name>\w+)\(",
    re.S,
)


def _macro_body(text: str, name: str) -> str:
    start = re.search(r"\{%-?\s*macro " + re.escape(name) + r"\(.*?%\}", text, re.S)
    assert start, f"macro {name} not found"
    end = re.search(r"\{%-?\s*endmacro\s*-?%\}", text[start.end() :])
    assert end, f"macro {name} has no end"
    return text[start.end() : start.end() + end.start()]


def _without_our_lines(body: str) -> str:
    """The fork with the package's additions taken out: the guard at the top that returns
    dbt's own macro for snapshots without process ids, and every ``-- cdc`` line (the line
    before one loses the comma that joined it)."""
    guard = r"\{%- if not cdc\.snapshot_has_process_ids\(\) -%\}.*?\{%- endif -%\}"
    body = re.sub(guard, "", body, count=1, flags=re.S)
    kept: list[str] = []
    for line in body.splitlines():
        if "-- cdc" in line:
            if kept:
                kept[-1] = kept[-1].rstrip().removesuffix(",")
            continue
        kept.append(line)
    return "\n".join(kept)


def _normal(sql: str) -> str:
    return " ".join(sql.split())


def _upstream(adapter: str, path: str) -> Path:
    spec = importlib.util.find_spec(f"dbt.include.{adapter}")
    assert spec and spec.submodule_search_locations, f"dbt.include.{adapter} is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / path


def test_every_fork_of_dbts_snapshot_merge_is_dbts_own_plus_the_marked_lines() -> None:
    text = FORKS.read_text(encoding="utf-8")
    forks = list(_FORK.finditer(text))
    assert {f["name"] for f in forks} == {
        "spark__snapshot_merge_sql",
        "postgres__snapshot_merge_sql",
        "default__snapshot_merge_sql",
    }
    for fork in forks:
        installed = importlib.metadata.version(fork["package"])
        assert installed.startswith(fork["version"] + "."), (
            f"{fork['name']} was copied from {fork['package']} {fork['version']}, "
            f"{installed} is installed: compare the macro and update the comment"
        )
        upstream = _upstream(fork["adapter"], fork["path"]).read_text(encoding="utf-8")
        ours = _without_our_lines(_macro_body(text, fork["name"]))
        assert _normal(ours) == _normal(_macro_body(upstream, fork["name"])), (
            f"{fork['name']} differs from {fork['package']}'s own beyond the -- cdc lines"
        )
        assert "-- cdc" in _macro_body(text, fork["name"]), f"{fork['name']} adds nothing"


def test_the_comparison_sees_a_changed_line() -> None:
    """The normalisation keeps what matters: a fork that changed an upstream line differs."""
    text = FORKS.read_text(encoding="utf-8")
    body = _macro_body(text, "spark__snapshot_merge_sql")
    changed = body.replace("dbt_change_type = 'insert'", "dbt_change_type = 'upsert'")
    assert _normal(_without_our_lines(changed)) != _normal(_without_our_lines(body))
