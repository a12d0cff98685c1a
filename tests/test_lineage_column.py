"""Adding a lineage column is one edit: one entry in the package's contract
(macros/common/contract.sql), and the runner stages it, every destination's DDL has it, the
apply model passes it through (cdc.lineage_select()), the target keeps it and
cdc.lineage_complete checks it.

The test works on a copy of the repository's code (runner, audit, the dbt package, the dbt
project), edits that one file, checks that nothing else differs from the repository, and runs
the documented pipeline with the copy's code on PostgreSQL."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest
from helpers.project import EXAMPLE_FILES, REPO

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.dbt]

NEW_ENTRY = '          "file_path": {"name": "_cdc_file_path", "type": "string", "on": "staged"},\n'
SHIPPED = ("runner", "audit", "macros", "dbt_project")


def _differing(a: Path, b: Path, rel: str = "") -> list[str]:
    """Files that differ between two trees (both sides), ignoring caches and dbt's output."""
    skip = {"__pycache__", "target", "logs", "dbt_packages", ".user.yml", "package-lock.yml"}
    cmp = filecmp.dircmp(a, b, ignore=list(skip))
    out = [f"{rel}{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files]
    for sub in cmp.common_dirs:
        if not (a / sub).is_symlink():
            out += _differing(a / sub, b / sub, f"{rel}{sub}/")
    return out


def test_a_new_lineage_column_is_one_entry_in_the_contract(cli_project) -> None:  # noqa: ANN001
    cli = cli_project("postgres", shop=True)  # the whole sample, Debezium group included
    root = cli.root
    for name in ("runner", "audit"):
        shutil.copytree(
            REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copytree(
        REPO / "landing", root / "landing", ignore=shutil.ignore_patterns(*EXAMPLE_FILES)
    )
    assert (root / "runner" / "dbt_package").resolve() == (root / "macros").resolve()

    contract = root / "macros" / "common" / "contract.sql"
    text = contract.read_text()
    # The end of the lineage map: its last entry, then the map's closing brace.
    end = '},\n      },\n      "state_tables"'
    assert text.count(end) == 1
    contract.write_text(text.replace(end, "},\n" + NEW_ENTRY + '      },\n      "state_tables"'))
    changed = [d for name in SHIPPED for d in _differing(REPO / name, root / name, f"{name}/")]
    assert changed == ["macros/common/contract.sql"], changed

    # The copy's runner, not the installed one: python -c from the copy's root.
    code = "import sys; from runner.cli import main; sys.exit(main())"
    where = cli("python", "-c", "import runner; print(runner.__file__)").stdout.strip()
    assert where == str(root / "runner" / "__init__.py"), where
    cli("dbt", "deps", "--project-dir", "dbt_project")
    cli("python", "-c", code, "run", "--landing", "landing", "--target", "postgres")

    landing = root / "landing" / "customers"
    staged = cli.table(f"{cli.schema}.customers__staged")
    assert staged and {r["_cdc_file_path"] for r in staged} == {
        str(landing / r["_cdc_file_name"]) for r in staged
    }
    assert all(r["_cdc_file_path"] == str(landing / r["_cdc_file_name"]) for r in staged)
    target = cli.table(f"{cli.schema}.customers")
    assert target and all(r["_cdc_file_path"] == str(landing / r["_cdc_file_name"]) for r in target)
