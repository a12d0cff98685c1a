"""The state tables live in one declared schema for the runner and dbt alike
(`vars: {cdc_state_schema: ...}`), whatever the entities' staging schema: the runner writes the
manifest there, the apply creates and writes the markers and tombstones there, and reconcile
reads the markers from there."""

from __future__ import annotations

import json
import shutil

import pytest
import sqlalchemy as sa
import yaml
from helpers.project import EXAMPLE_FILES, REPO, drop_pg_schemas

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.dbt]


def test_state_tables_live_in_the_declared_schema(cli_project, request) -> None:  # noqa: ANN001
    cli = cli_project("postgres")
    state = cli.schema + "_state"
    request.addfinalizer(lambda: drop_pg_schemas(state))
    # the sample without the shop group (not in this project): every landed File is staged
    shutil.copytree(
        REPO / "landing",
        cli.root / "landing",
        ignore=shutil.ignore_patterns("shop", *EXAMPLE_FILES),
    )
    conf_file = cli.root / "dbt_project" / "dbt_project.yml"
    conf = yaml.safe_load(conf_file.read_text())
    conf["vars"] = {"cdc_state_schema": state}
    conf_file.write_text(yaml.safe_dump(conf, sort_keys=False))

    cli.runner("run", "--landing", "landing")

    engine = sa.create_engine(request.getfixturevalue("pg_url"))
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text(
                    "select table_schema, table_name from information_schema.tables "
                    "where table_schema in (:a, :b) and table_name like 'cdc\\_%'"
                ),
                {"a": cli.schema, "b": state},
            ).all()
            staged = conn.execute(sa.text(f'select count(*) from "{state}".cdc_staged_files'))
            staged_count = staged.scalar()
            marked = conn.execute(
                sa.text(
                    f'select target_table, count(*) from "{state}".cdc_applied_files '
                    "group by target_table"
                )
            )
            markers = {table.rsplit(".", 1)[-1].strip('"'): n for table, n in marked.all()}
    finally:
        engine.dispose()
    assert sorted(tables) == [
        (state, "cdc_applied_files"),
        (state, "cdc_held_files"),
        (state, "cdc_history_deletes"),
        (state, "cdc_staged_files"),
        (state, "cdc_tombstones"),
    ]
    landed = sum(1 for f in (cli.root / "landing").rglob("*") if f.is_file())
    assert staged_count == landed
    # One marker per File and apply model: the sample applies each entity twice (current state
    # and history).
    per_entity = {d.name: len(list(d.iterdir())) for d in (cli.root / "landing").iterdir()}
    assert markers == {
        "customers": per_entity["customers"],
        "customers_changes_history": per_entity["customers"],
        "accounts": per_entity["accounts"],
        "accounts_history": per_entity["accounts"],
    }
    files = json.loads(cli.runner("status", "--json").stdout)
    assert sorted(f["state"] for f in files) == ["COMMITTED"] * landed, files
