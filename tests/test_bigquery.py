"""The bigquery target, live on the local BigQuery emulator, through the documented commands
(in this process, tests/helpers/project.py):
`runner ingest --target bigquery`, `dbt build --target bigquery`, `runner reconcile --target
bigquery`. The same multi-File scenario as tests/test_apply.py (changes per key, rows out of
order, deletes, re-inserts, late Files, a duplicate, a broken File, a header-only File, a
no-op rerun, partial updates, a truncate) gives the oracles' current state and change history
after every build, with one marker per File and lineage on every row; an apply script that
fails between its MERGE and the markers leaves the table unchanged, and the next build gives
the oracles' tables. The history snapshot runs there too.

What the emulator cannot prove (job-id dedup, isolation between sessions) is in
docs/destinations.md; the staging's own idempotency (delete the File's rows, load, count) is
checked here by staging a File a second time."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from helpers.project import Cli
from helpers.project import bigquery_rows as read
from helpers.scenario import (
    BROKEN,
    LATE,
    LATE_PARTIAL,
    LATE_TRUNCATED,
    PARTIAL_FILE,
    ROUND_1,
    ROUND_2,
    ROUND_3,
    SAMPLE_SNAPSHOTS,
    TRUNCATE_FILE,
    CurrentOracle,
    HistoryOracle,
    check_truncate_markers,
    current_rows,
    declare,
    for_table,
    history_rows,
    write,
)

from runner.contract import lineage_on

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.bigquery]


@contextmanager
def failing_markers_step(dbt_project: Path) -> Iterator[None]:
    """The project overrides the apply's insert_markers step with one that fails first, the way
    a project overrides any step: a macro of its own and a dispatch entry for `cdc`."""
    conf_file = dbt_project / "dbt_project.yml"
    saved = conf_file.read_text()
    conf = yaml.safe_load(saved)
    name = conf["name"]
    conf["dispatch"] = [
        *conf.get("dispatch", []),
        {"macro_namespace": "cdc", "search_order": [name, "cdc"]},
    ]
    macro = dbt_project / "macros" / "failing_markers.sql"
    macro.write_text(
        "{% macro bigquery__apply_insert_markers_sql(ctx) %}\n"
        "  {{ return(\"select error('injected: failing before the markers');\\n\"\n"
        "            ~ cdc.default__apply_insert_markers_sql(ctx)) }}\n"
        "{% endmacro %}\n"
    )
    conf_file.write_text(yaml.safe_dump(conf, sort_keys=False))
    try:
        yield
    finally:
        conf_file.write_text(saved)
        macro.unlink()


def markers(cli: Cli, table: str = "customers") -> list[dict]:
    return for_table(read(cli, "cdc_applied_files"), table)


def test_bigquery_applies_the_scenario_like_the_oracle_and_recovers_a_failed_apply(
    tmp_path: Path, cli_project: Callable[..., Cli]
) -> None:
    """test_apply's scenario through the commands a user runs: after every build, customers
    and its change history equal the oracles (partial updates and the truncate included)."""
    cli = cli_project("bigquery", SAMPLE_SNAPSHOTS)
    declare(cli.root)
    landing = tmp_path / "landing"
    folder = landing / "customers"
    pids: dict[str, str] = {}
    now, hist = CurrentOracle(), HistoryOracle(pids)

    def stage(files: dict[str, list[list[str]]], ok: tuple[int, ...] = (0,)) -> list[Path]:
        batch = [write(folder / n, rows) for n, rows in files.items()]
        cli("runner", "ingest", "--landing", str(landing), "--target", "bigquery", ok=ok)
        pids.update({m["file_name"]: m["process_id"] for m in read(cli, "cdc_staged_files")})
        return batch

    def build() -> None:
        cli("dbt", "build", "--project-dir", "dbt_project", "--target", "bigquery")
        cli("runner", "reconcile", "--target", "bigquery")

    def applied(batch: list[Path]) -> None:
        now.apply(batch)
        hist.apply(batch)
        assert current_rows(read(cli, "customers")) == now.table(), [p.name for p in batch]
        assert history_rows(read(cli, "customers_changes_history")) == hist.table()

    def step(files: dict[str, list[list[str]]], ok: tuple[int, ...] = (0,)) -> list[Path]:
        batch = stage(files, ok)
        build()
        applied(batch)
        return batch

    good = step(ROUND_1)
    shutil.copy(folder / "20260301-080500000.csv", folder / "copy-of-080500.csv")  # DUPLICATE
    (bad,) = [write(folder / n, rows) for n, rows in BROKEN.items()]
    good += step(ROUND_2 | PARTIAL_FILE, ok=(1,))  # 1: a File was quarantined
    status = json.loads(cli("runner", "status", "--json", "--target", "bigquery").stdout)
    states = {Path(f["path"]).name: f["state"] for f in status}
    assert states["copy-of-080500.csv"] == "DUPLICATE" and states[bad.name] == "QUARANTINED"
    assert 13 not in now.table()  # nothing of the quarantined File was applied

    good += step(LATE | LATE_PARTIAL)  # late versions in place, their neighbours re-closed
    table = cli.table("{{ ref('customers') }}")  # once through `dbt show`, as a user reads it
    for r in table:
        for col in lineage_on("staged", "cdc") + lineage_on("applied", "cdc"):
            assert r[col.name] is not None, (col.name, r)

    # Nothing new: a second build changes nothing, not even the lineage of a row.
    before = read(cli, "customers")
    build()
    assert sorted(read(cli, "customers"), key=str) == sorted(before, key=str)

    # The apply script fails between its MERGEs and the markers: BigQuery rolls it back. The
    # fault is the project overriding one step of the apply (nothing of it ships in macros/).
    batch = stage(ROUND_3)
    with failing_markers_step(cli.root / "dbt_project"):
        failed = cli.dbt("build", ok=(1,))
    assert "injected: failing before the markers" in failed.stdout
    assert "20260301-082000000.csv" not in {m["file_name"] for m in markers(cli)}
    assert current_rows(read(cli, "customers")) == now.table()  # nothing of the failed script
    build()
    applied(batch)
    good += batch

    good += step(TRUNCATE_FILE)
    good += step(LATE_TRUNCATED)
    assert len(set(pids.values())) == 6  # six ingests, six process ids
    for table in ("customers", "customers_changes_history"):
        names = sorted(m["file_name"] for m in markers(cli, table))
        assert names == sorted(p.name for p in good), table  # one marker per File
    late = {m["file_name"]: m for m in markers(cli)}["20260301-075900000.csv"]
    counts = ("rows_inserted", "rows_updated", "rows_deleted", "rows_skipped")
    assert tuple(late[c] for c in counts) == (1, 0, 1, 4)
    check_truncate_markers(read(cli, "cdc_applied_files"), now)
    status = json.loads(cli("runner", "status", "--json", "--target", "bigquery").stdout)
    assert {f["state"] for f in status if Path(f["path"]) in good} == {"COMMITTED"}

    # History (dbt snapshot of the current state) ran in every build: one open version per
    # current key, each with the process id that staged it.
    history = read(cli, "customers_history")
    open_versions = {r["customer_id"] for r in history if r["dbt_valid_to"] is None}
    assert open_versions == set(now.table())
    assert all(r["_cdc_insert_process_id"] for r in history)


def test_bigquery_staging_a_file_again_replaces_its_rows(
    spark, spark_project: Path, tmp_path: Path, bq_emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A File staged twice (a retry after its rows were loaded, as after a crash before the
    Audit DB heard of it) is in BigQuery once, and in the manifest once."""
    from runner.destinations import FileToStage, destination_for
    from runner.entities import load_entities
    from runner.hashing import content_hash
    from runner.project import Project
    from runner.staging.spark import stage_entity

    monkeypatch.setenv("CDC_BQ_ENDPOINT", bq_emulator.endpoint)
    monkeypatch.setenv("CDC_SCHEMA", "bq_restage")
    project = Project.load(spark_project, target="bigquery")
    destination = destination_for(project)
    entity = load_entities(project)["customers"]
    path = write(tmp_path / "customers" / "LOAD00000001.csv", ROUND_1["LOAD00000001.csv"])
    f = FileToStage(1, path, content_hash(path))
    for attempt in ("first", "second"):
        result = stage_entity(spark, entity, [f], attempt, destination.writer())
        assert result.staged == {1: len(ROUND_1["LOAD00000001.csv"])}, result
    client = destination.client
    dataset = f"`{destination.gcp_project}`.`bq_restage`"
    rows = list(client.query(f"select _cdc_process_id from {dataset}.customers__staged").result())
    assert [r[0] for r in rows] == ["second"] * len(ROUND_1["LOAD00000001.csv"])
    manifest = list(client.query(f"select * from {dataset}.cdc_staged_files").result())
    assert [(m["file_hash"], m["process_id"]) for m in manifest] == [(f.content_hash, "second")]
