"""The command-line contract an independent check uses, run as real processes from a fresh
project root: `runner ingest`, `dbt build`, `runner reconcile`, `runner status --json` and
`dbt show ... --output json`, with `--target T` after the subcommand, on the local, postgres and
bigquery (local emulator) targets."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle as oracle
from helpers.oracles import shown_customers
from helpers.project import Cli

from runner.destinations.spark.class_archive import archive_path
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.mark.parametrize(
    "target",
    [
        "local",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("bigquery", marks=pytest.mark.bigquery),
    ],
)
def test_the_documented_commands_produce_the_expected_table(
    tmp_path: Path, target: str, cli_project: Callable[[str], Cli]
) -> None:
    """Exactly the forms of the README and the issues, `--target` after the subcommand, from a
    checkout whose path holds a space, a quote, an `@` and a non-ASCII letter (as "My Projects"
    or "OneDrive - Company" do), set up by `runner init` as `make setup` does, with the Spark
    class archive at such a path too; dbt also run from inside dbt_project/."""
    cli = cli_project(target, processes=True, folder="new user's @ñ/repo")
    archive = archive_path()
    if archive is not None and archive.is_file():  # else `runner init` writes one there
        cli.env["CDC_CLASS_ARCHIVE_DIR"] = str(cli.root.parent / "class archive")
        Path(cli.env["CDC_CLASS_ARCHIVE_DIR"]).mkdir()
        shutil.copy(archive, cli.env["CDC_CLASS_ARCHIVE_DIR"])
    init = cli("runner", "init")
    assert f"Spark class archive: {cli.root.parent}" in init.stdout or archive is None, init.stdout
    landing = tmp_path / "landing"
    files = generate_customers(landing / "customers", initial=40, files=3, changes_per_file=25)
    shutil.copy(files[1], landing / "customers" / "copy.csv")
    (landing / "customers" / "broken.csv").write_text(
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\nI,1,x,,,,,\n"
    )
    t = ("--target", target)
    # 1: a File was quarantined
    out = cli("runner", "ingest", "--landing", str(landing), *t, "-v", ok=(1,))
    # Not a terminal, with -v: progress comes as plain key=value log lines.
    n = len(files) + 2
    assert f"progress phase=hash entity=customers files={n}/{n} bytes=" in out.stderr
    assert "progress phase=stage entity=customers files=" in out.stderr
    inside = cli.root / "dbt_project"  # where a dbt user stands
    cli("dbt", "build", "--profiles-dir", "..", *t, cwd=inside)
    if target == "local":  # the profile's jars and warehouse: paths of the local target
        fresh = cli("dbt", "source", "freshness", "--profiles-dir", "..", *t, cwd=inside, ok=(0, 1))
        assert "freshness of cdc_staging.customers" in fresh.stdout, fresh.stdout[-3000:]
    cli("runner", "reconcile", *t)
    status = {
        Path(f["path"]).name: f["state"]
        for f in json.loads(cli("runner", "status", "--json", *t).stdout)
    }
    assert status == {
        **{p.name: "COMMITTED" for p in files},
        "copy.csv": "DUPLICATE",
        "broken.csv": "QUARANTINED",
    }
    shown = cli(
        "dbt",
        "show",
        "--project-dir",
        "dbt_project",
        *t,
        "--inline",
        "select * from {{ ref('customers') }}",
        "--limit",
        "-1",
        "--output",
        "json",
        "-q",
    )
    assert shown_customers(json.loads(shown.stdout)["show"]) == oracle(files)
