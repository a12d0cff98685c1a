"""`runner`: the command line, parsing and printing only. Each command builds its context once
(``runner.invocation``), calls the library, and prints through ``runner.present``.

Exit codes: 0 ok, 1 finished with failed or quarantined Files, 2 usage or unexpected error.
Errors print one readable line; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import click

from runner.cli import pipeline, setup
from runner.cli.options import Context, ExitCode, RunnerGroup, _configure_logging

__all__ = ["ExitCode", "main"]


@click.group(cls=RunnerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--project-dir",
    envvar="CDC_PROJECT_DIR",
    type=click.Path(file_okay=False),
    help="Repository root holding runner.yml, profiles.yml and dbt_project/ (default: .).",
)
@click.option(
    "--target", "-t", envvar="DBT_TARGET", help="dbt profile target (default: the profile's)."
)
@click.option("--profiles-dir", envvar="DBT_PROFILES_DIR", help="Folder holding profiles.yml.")
@click.option(
    "--audit-url",
    envvar="CDC_AUDIT_URL",
    help="Audit DB SQLAlchemy URL (default: SQLite under the state folder; for a postgres "
    "target, the same server).",
)
@click.option(
    "--audit-schema", envvar="CDC_AUDIT_SCHEMA", help="PostgreSQL schema of the Audit DB."
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Show progress lines, Spark's warnings and dbt's output."
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="cdc-runner")
@click.pass_context
def main(
    ctx: click.Context,
    project_dir: str | None,
    target: str | None,
    profiles_dir: str | None,
    audit_url: str | None,
    audit_schema: str | None,
    verbose: bool,
    debug: bool,
) -> None:
    """Find CDC Files, record them in the Audit DB, stage them with Spark; dbt applies them.

    Global options go before or after the command, as with dbt:
    `runner ingest --landing landing --target postgres`.
    """
    _configure_logging(debug, verbose)
    ctx.obj = Context(project_dir, target, profiles_dir, audit_url, audit_schema, debug, verbose)


for command in (
    pipeline.status,
    pipeline.runs,
    pipeline.metrics,
    pipeline.ingest,
    pipeline.reconcile,
    pipeline.run,
    pipeline.retry,
    pipeline.maintain,
    setup.generate,
    setup.audit,
    setup.drop_catalog,
    setup.migrate_catalog,
    setup.init,
    setup.new_entity,
):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
