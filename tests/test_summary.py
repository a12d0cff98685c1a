"""The run summary on a terminal (runner/summary.py, runner/present.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.project import CHANGES_HISTORY, dbt_build
from helpers.scenario import ROUND_1, CurrentOracle, scenario_project, write

from audit import AuditDB
from audit.store import MARKER_COUNTS as COUNTS
from runner.ids import new_process_id
from runner.ingest import IngestResult, ingest
from runner.invocation import Invocation
from runner.phases import Phases
from runner.present import report_run
from runner.project import Project
from runner.reconcile import ReconcileResult, reconcile, table_rows
from runner.run import RunResult
from runner.summary import summarize


def test_the_run_summary_is_whole_at_80_and_200_columns() -> None:
    """Entity and target table names are never cut: a table when it fits, else one block per
    entity (a terminal of 80 columns, the default of most terminals and tmux panes)."""
    import io

    from rich.console import Console

    from runner.present import print_summary
    from runner.summary import EntitySummary, TargetRows

    entities = [
        EntitySummary(
            "accounts_receivable_ledger", staged=17, applied=15,
            targets=[TargetRows("cdc_analytics.accounts_receivable_ledger_changes_history", 15,
                                1200, 340, 12, 3)],
        ),
        EntitySummary("customers", staged=2, quarantined=1, applied=2,
                      targets=[TargetRows("cdc_analytics.customers", 2, 10, 5, 1, 0)]),
    ]  # fmt: skip
    for width in (80, 200):
        buf = io.StringIO()
        print_summary(
            entities, Console(file=buf, width=width, force_terminal=True, color_system=None)
        )
        text = buf.getvalue()
        lines = text.splitlines()
        assert all(len(line) <= width for line in lines), text
        for name in ("accounts_receivable_ledger", "customers",
                     "cdc_analytics.accounts_receivable_ledger_changes_history",
                     "cdc_analytics.customers"):  # fmt: skip
            assert any(name in line for line in lines), (width, name, text)
        for number in ("1200", "340", "17", "15"):
            assert number in text, (width, number, text)
        assert ("┃" in text) == (width == 200), text  # a table at 200, blocks at 80


@pytest.mark.dbt
def test_a_run_summary_counts_what_it_applied_whatever_its_files_states(
    spark: Any,
    tmp_path: Path,
    pg_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A run that builds only the current state (a user's own `--select +customers`): its
    summary counts what it applied to customers, says the Files wait for the change history,
    and the table's rows now are the oracle's. The run that then builds the history commits
    the Files and counts only what it applied itself. On PostgreSQL, in this process."""
    monkeypatch.setenv("CDC_SCHEMA", pg_schema)
    root = scenario_project(tmp_path / "repo")
    project = Project.load(root, target="postgres")
    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    inv = Invocation.of(project, db, spark)  # the worker's session stages (not one of its own)
    folder = tmp_path / "landing" / "customers"
    files = [write(folder / n, rows) for n, rows in ROUND_1.items()]
    changes = sum(len(p.read_text().splitlines()) - 1 for p in files)  # each has a header
    current, changes_history = (f"{pg_schema}.{t}" for t in ("customers", CHANGES_HISTORY[0]))

    def run(select: str) -> tuple[str, ReconcileResult]:
        pid = new_process_id()
        db.start_run(pid, "run", "postgres")
        ingest(inv, pid, landing=[str(folder.parent)])
        built = dbt_build(
            root / "dbt_project", "postgres", "--select", select, "--exclude", "resource_type:test"
        )
        assert built.success, built.exception
        return pid, reconcile(inv, pid)

    first, done = run("+customers")
    waits = {changes_history: len(files)}  # every File waits for the history's markers
    assert (done.committed, done.waiting, done.missing) == (0, len(files), waits)
    (summary,) = summarize(db, first)
    assert (summary.entity, summary.staged, summary.applied) == ("customers", len(files), 0)
    assert [t.target_table.lower() for t in summary.targets] == [current]
    counted = summary.targets[0]
    assert counted.files == len(files)
    assert sum(getattr(counted, c) for c in COUNTS) == changes  # every change counted once
    now = CurrentOracle()
    now.apply(files)
    rows = table_rows(inv, [current])
    assert rows == {current: len(now.table())}
    # what `runner run` prints from these: the rows applied to customers, why the Files wait
    result = RunResult(IngestResult(staged=len(files)), True, None, done, {"customers": len(files)})
    report_run(first, result, [summary], rows, db.counts(), Phases(), 1.0, False)
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("customers "))
    numbers = [str(getattr(counted, c)) for c in COUNTS]  # inserted, updated, deleted, stale
    assert row.split()[5:] == [current, *numbers], printed
    assert f"staged and not applied (waiting for {changes_history}: {len(files)})" in printed
    assert f"rows now: {current} {len(now.table())}" in printed, printed

    second, done = run("+customers_changes_history")
    assert (done.committed, done.waiting, done.missing) == (len(files), 0, {})
    (summary,) = summarize(db, second)
    assert (summary.staged, summary.applied) == (0, len(files))
    assert [t.target_table.lower() for t in summary.targets] == [changes_history]
    db.dispose()
