"""Names from declarations are validated on the dbt path too (issue "Exactly once", class 6).

The runner refuses an entity whose name holds a quote, but dbt reads the same YAML: before, the
apply rendered the name unescaped (`where cdc_files.entity = 'customers' or 'a'='a'`) and the
build succeeded. Now the build stops with a compiler error naming the value.
"""

from __future__ import annotations

import pytest
from helpers.project import CHANGES_HISTORY

from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]

BAD_NAME = "customers' or 'a'='a"


def test_an_entity_name_that_is_not_an_identifier_stops_the_build(cli_project) -> None:  # noqa: ANN001
    cli = cli_project("postgres", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    generate_customers(landing / "customers", initial=20, files=1, changes_per_file=5)
    cli.runner("ingest", "--landing", str(landing))
    sources = cli.root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    sources.write_text(
        sources.read_text().replace("- name: customers\n", f'- name: "{BAD_NAME}"\n')
    )
    stg = cli.root / "dbt_project" / "models" / "staging" / "stg_customers.sql"
    stg.write_text(stg.read_text().replace("'customers'", f'"{BAD_NAME}"'))
    out = cli.dbt("build", "--select", "stg_customers", "customers", ok=(1,))
    assert "must be a plain identifier" in out.stdout and "or 'a'='a" in out.stdout, out.stdout
    assert "Compilation Error" in out.stdout


def test_file_names_with_quotes_backslashes_and_glob_characters_are_applied_as_they_are(
    cli_project,  # noqa: ANN001
) -> None:
    """A File's name reaches Spark's reader (which expands glob patterns: a backslash escapes,
    brackets and braces match others) and, on Spark, the apply's SQL literals (the batch's Files
    in a temporary view). Names that would end a literal early, escape its quote or be read as
    a pattern are staged, applied and marked under their own names."""
    cli = cli_project("local", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    files = generate_customers(landing / "customers", initial=20, files=3, changes_per_file=5)
    odd = [
        files[1].rename(files[1].with_name("it's a \\ test.csv")),
        files[2].rename(files[2].with_name("x[1]{a,b}*?.csv")),
    ]
    out = cli.runner("run", "--landing", str(landing))
    assert f"{len(files)} staged" in out.stdout and "0 failed" in out.stdout, out.stdout
    markers = cli.table(f"{cli.schema}.cdc_applied_files")
    names = sorted(m["file_name"] for m in markers if m["target_table"].endswith(".customers"))
    landed = [files[0], *odd, *files[3:]]
    assert names == sorted(f.name for f in landed) and len(landed) == len(files), names
