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
