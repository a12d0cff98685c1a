"""The run summary on a terminal (runner/summary.py, runner/present.py)."""

from __future__ import annotations


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
