"""Snapshot mode in `make bench` (issue "Snapshot mode"), in the bench's one process and session:

- snapshot_vs_dbt_snapshot: the history apply (accounts_history: SCD Type 2 from the daily
  extracts, validity from their effective dates) against dbt's own snapshot on the same staged
  extracts (check strategy on all compared columns, hard_deletes: invalidate), one extract per
  dbt invocation on both sides (dbt's snapshot sees one state per run). Also our apply of every
  extract in one invocation, which dbt's snapshot cannot do. Both histories must end with the
  same open versions.
- snapshot_hash_vs_full_row: the current-state apply of one full extract (classified by key and
  row hashes, the target read for its hashes only) against the MERGE a user would write without
  hashes (every compared column in the join's condition, deletes by NOT MATCHED BY SOURCE), at
  10 and 100 non-key columns: what hashing saves as the table widens.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from runner.dbt_invoke import dbt_command
from runner.entities import load_entities
from runner.ids import new_process_id
from runner.phases import Phases
from runner.run import dbt_build
from runner.samples.generate import (
    SnapshotSpec,
    generate_snapshots,
    synthetic_snapshot_declaration,
    synthetic_snapshot_entity,
)

if TYPE_CHECKING:
    from run import Bench

DBT_SNAPSHOT = """
{#- What a user would write with dbt's own snapshot: the day's extract (the bench writes the
    day into bench_day before each run), check strategy on the compared columns, deletes
    invalidate the open row. #}
{% snapshot accounts_dbt_snapshot %}
{{ config(unique_key='account_id', strategy='check', check_cols='all', hard_deletes='invalidate') }}
select account_id, owner, plan, monthly_fee, opened_on
from {{ ref('stg_accounts') }}
where _cdc_sequence = (select day from {{ target.schema }}.bench_day)
{% endsnapshot %}
"""

WIDE_MODEL = """
{{{{ config(materialized='incremental', incremental_strategy='merge', unique_key='k1',
            meta={{'cdc': {{'apply': true}}}}) }}}}
select {columns}, {{{{ cdc.lineage_select() }}}}
from {{{{ cdc.unapplied(source('cdc_staging', '{name}')) }}}}
"""


def _dbt(project, *args: str) -> None:  # type: ignore[no-untyped-def]
    from dbt.cli.main import dbtRunner

    res = dbtRunner().invoke(dbt_command(project, args[0], *args[1:], "--quiet"))
    assert res.success, res.exception


def _build(project, select: str) -> float:  # type: ignore[no-untyped-def]
    """dbt build of ``select`` (no tests); seconds of the nodes themselves (not dbt's parse)."""
    phases = Phases()
    ok, err = dbt_build(
        project,
        new_process_id(),
        ["--select", select, "--exclude", "resource_type:test", "--quiet"],
        phases,
    )
    assert ok, err
    return phases.seconds.get("dbt_nodes", 0.0)


def snapshot_vs_dbt_snapshot(bench: Bench, rows: int, days: int) -> dict:
    entity = load_entities(bench.project)["accounts"]
    folder = bench.data / f"snapshot_{rows}_{days}"
    spec = SnapshotSpec(initial=rows, incremental=rows, days=days, seed=3)
    extracts = sorted(folder.glob("*.csv")) or generate_snapshots(entity, folder, spec)
    snapshots = bench.root / "dbt_project" / "snapshots" / "accounts_dbt_snapshot.sql"
    snapshots.write_text(DBT_SNAPSHOT)

    def landing(k: int) -> Path:
        day = bench.data / f"snapshot_day_{rows}_{k}" / "accounts"
        if not day.exists():
            day.mkdir(parents=True)
            (day / extracts[k].name).write_bytes(extracts[k].read_bytes())
        return day.parent

    ours, ours_nodes, theirs, one_run, one_run_nodes = [], [], [], [], []
    for _ in range(bench.repeat):
        # ours: one extract staged, then `dbt build` of the history model, day by day
        project, db = bench.fresh("snap_ours")
        wall = nodes = 0.0
        for k in range(days):
            bench.ingest(project, db, landing(k))
            start = time.perf_counter()
            nodes += _build(project, "+accounts_history")
            wall += time.perf_counter() - start
        ours.append(wall)
        ours_nodes.append(nodes)
        schema = project.target["schema"]
        ours_open = bench.spark.sql(
            f"select count(*) from {schema}.accounts_history where _cdc_valid_to is null"
        ).collect()[0][0]

        # dbt's snapshot: the same extracts staged, one `dbt snapshot` per day
        project, db = bench.fresh("snap_dbt")
        for k in range(days):
            bench.ingest(project, db, landing(k))
        _build(project, "stg_accounts")
        schema = project.target["schema"]
        wall = 0.0
        for k in range(days):
            day = extracts[k].stem.split("_")[1]
            bench.spark.sql(
                f"create or replace table {schema}.bench_day as select date'{day}' as day"
            )
            start = time.perf_counter()
            _dbt(project, "snapshot", "--select", "accounts_dbt_snapshot")
            wall += time.perf_counter() - start
        theirs.append(wall)
        their_open = bench.spark.sql(
            f"select count(*) from {schema}.accounts_dbt_snapshot where dbt_valid_to is null"
        ).collect()[0][0]
        assert ours_open == their_open, (ours_open, their_open)

        # ours, every extract in one run (staged first): what dbt's snapshot cannot do
        project, db = bench.fresh("snap_all")
        for k in range(days):
            bench.ingest(project, db, landing(k))
        _build(project, "stg_accounts")
        start = time.perf_counter()
        one_run_nodes.append(_build(project, "accounts_history"))
        one_run.append(time.perf_counter() - start)
    snapshots.unlink()
    t_ours, t_theirs = statistics.median(ours), statistics.median(theirs)
    return {
        "rows_per_extract": rows,
        "extracts": days,
        "history_apply_s": t_ours,
        "history_apply_nodes_s": statistics.median(ours_nodes),
        "dbt_snapshot_s": t_theirs,
        "ratio": t_ours / t_theirs,
        "history_apply_one_run_s": statistics.median(one_run),
        "history_apply_one_run_nodes_s": statistics.median(one_run_nodes),
        "open_versions": ours_open,
        "note": "one dbt invocation per extract on both sides; the one-run figure applies "
        "every extract in one invocation",
    }


def snapshot_hash_vs_full_row(bench: Bench, rows: int, widths: tuple[int, ...]) -> dict:
    out: dict = {}
    staging = bench.root / "dbt_project" / "models" / "staging"
    models = bench.root / "dbt_project" / "models"
    names = [f"wide{w}" for w in widths]
    decls = [synthetic_snapshot_declaration(n, 1, w) for n, w in zip(names, widths, strict=True)]
    (staging / "bench_wide.yml").write_text(
        yaml.safe_dump(
            {
                "version": 2,
                "sources": [
                    {"name": "cdc_staging", "schema": "{{ target.schema }}", "tables": decls}
                ],
            },
            sort_keys=False,
        )
    )
    try:
        for name, width in zip(names, widths, strict=True):
            entity = synthetic_snapshot_entity(name, 1, width)
            value_cols = [c.name for c in entity.columns if c.name != "k1"]
            (models / f"{name}.sql").write_text(
                WIDE_MODEL.format(columns=", ".join(["k1", *value_cols]), name=name)
            )
            folder = bench.data / f"{name}_{rows}" / name
            spec = SnapshotSpec(initial=rows, incremental=rows, days=2, seed=9)
            day1, day2 = sorted(folder.glob("*.csv")) or generate_snapshots(entity, folder, spec)
            for path, k in ((day1, 1), (day2, 2)):
                only = bench.data / f"{name}_{rows}_day{k}" / name
                if not only.exists():
                    only.mkdir(parents=True)
                    (only / path.name).write_bytes(path.read_bytes())
            ours, ours_nodes, hand = [], [], []
            for _ in range(bench.repeat):
                project, db = bench.fresh(f"wide{width}")
                schema = project.target["schema"]
                bench.ingest(project, db, bench.data / f"{name}_{rows}_day1")
                _build(project, name)
                # the hand-written side starts from the same day-1 table, without lineage
                bench.spark.sql(
                    f"create table {schema}.{name}_hand using iceberg as "
                    f"select {', '.join(['k1', *value_cols])} from {schema}.{name}"
                )
                bench.ingest(project, db, bench.data / f"{name}_{rows}_day2")
                start = time.perf_counter()
                ours_nodes.append(_build(project, name))
                ours.append(time.perf_counter() - start)
                day2_rows = (
                    f"(select {', '.join(['k1', *value_cols])} from {schema}.{name}__staged "
                    f"where _cdc_file_name = '{day2.name}')"
                )
                differs = " or ".join(f"not (t.{c} <=> s.{c})" for c in value_cols)
                sets = ", ".join(f"{c} = s.{c}" for c in value_cols)
                start = time.perf_counter()
                bench.spark.sql(
                    f"merge into {schema}.{name}_hand as t using {day2_rows} as s on t.k1 = s.k1 "
                    f"when matched and ({differs}) then update set {sets} "
                    "when not matched then insert * "
                    "when not matched by source then delete"
                )
                hand.append(time.perf_counter() - start)
                a = bench.spark.sql(f"select count(*) from {schema}.{name}").collect()[0][0]
                b = bench.spark.sql(f"select count(*) from {schema}.{name}_hand").collect()[0][0]
                assert a == b, (a, b)
            out[str(width)] = {
                "rows": rows,
                "hash_apply_s": statistics.median(ours),
                "hash_apply_nodes_s": statistics.median(ours_nodes),
                "full_row_merge_s": statistics.median(hand),
                "ratio_nodes_to_full_row": statistics.median(ours_nodes) / statistics.median(hand),
            }
    finally:
        (staging / "bench_wide.yml").unlink()
        for name in names:
            (models / f"{name}.sql").unlink(missing_ok=True)
    lo, hi = str(widths[0]), str(widths[-1])
    out["growth_hash"] = out[hi]["hash_apply_nodes_s"] / out[lo]["hash_apply_nodes_s"]
    out["growth_full_row"] = out[hi]["full_row_merge_s"] / out[lo]["full_row_merge_s"]
    out["note"] = (
        f"apply of one full extract of {rows} rows onto the previous day's; growth = time at "
        f"{hi} non-key columns / time at {lo}"
    )
    return out
