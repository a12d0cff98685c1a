"""What every command shares: the global options (accepted before or after the command's name,
as with dbt), the context they fill, logging, and the group that turns errors into one line and
an exit code."""

from __future__ import annotations

import enum
import logging
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import click

from runner.errors import CdcError, error_line
from runner.invocation import Invocation
from runner.project import Project

log = logging.getLogger("runner")


class ExitCode(enum.IntEnum):
    OK = 0
    FILES_FAILED = 1
    ERROR = 2


# A process whose reader closed the pipe ends as one killed by SIGPIPE would: 128 + 13.
SIGPIPE_EXIT = 141


@dataclass
class Context:
    """What every command gets from the global options."""

    project_dir: str | None
    target: str | None
    profiles_dir: str | None
    audit_url: str | None
    audit_schema: str | None
    debug: bool
    verbose: bool = False

    def project(self) -> Project:
        """The project and target alone, for commands that reach no destination."""
        return Project.load(self.project_dir, self.target, self.profiles_dir)

    def invocation(self) -> Invocation:
        """This command's context: project, target, destination, Audit DB location."""
        return Invocation.load(
            self.project_dir, self.target, self.profiles_dir, self.audit_url, self.audit_schema
        )


class RunnerGroup(click.Group):
    """Turns expected errors into one line and an exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # the reader went away (`runner status | head`): stop as a Unix tool stopped by
            # SIGPIPE does, saying nothing (stdout to /dev/null: Python's own flush at exit)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(SIGPIPE_EXIT)
        except CdcError as exc:
            debug = _debug(ctx)
            if debug:
                traceback.print_exc()
            click.echo(f"error: {exc.message}", err=True)
            ctx.exit(ExitCode.ERROR)
        except Exception as exc:  # unexpected: still one line unless --debug
            debug = _debug(ctx)
            if debug:
                traceback.print_exc()
            click.echo(f"error: {error_line(exc)}", err=True)
            if not debug:
                click.echo("run again with --debug for the traceback", err=True)
            ctx.exit(ExitCode.ERROR)


def _debug(ctx: click.Context) -> bool:
    """--debug, given before or after the subcommand."""
    return bool(ctx.params.get("debug")) or bool(getattr(ctx.obj, "debug", False))


def _configure_logging(debug: bool, verbose: bool = False) -> None:
    """Quiet by default: the runner's warnings and errors only (Spark's log is kept to errors
    in runner/spark_session.py, dbt's to errors by `runner run`). ``-v`` adds the runner's
    progress lines, Spark's WARN lines and dbt's own output; ``--debug`` everything."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    log.setLevel(logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING)


def verbose() -> bool:
    """-v or --debug is on (the runner's logger says so)."""
    return log.isEnabledFor(logging.INFO)


# The options every command takes, before or after its name (`runner ingest --target prod`, as
# `dbt build --target prod`): (parameter names, Context field, help, is a flag).
GLOBAL_OPTIONS: list[tuple[tuple[str, ...], str, str, bool]] = [
    (
        ("--project-dir",),
        "project_dir",
        "Repository root holding runner.yml, profiles.yml and dbt_project/ (default: .).",
        False,
    ),
    (("--target", "-t"), "target", "dbt profile target (default: the profile's).", False),
    (("--profiles-dir",), "profiles_dir", "Folder holding profiles.yml.", False),
    (
        ("--audit-url",),
        "audit_url",
        "Audit DB SQLAlchemy URL (default: SQLite under the state folder; for a postgres "
        "target, the same server).",
        False,
    ),
    (("--audit-schema",), "audit_schema", "PostgreSQL schema of the Audit DB.", False),
    (
        ("--verbose", "-v"),
        "verbose",
        "Show progress lines, Spark's warnings and dbt's own output.",
        True,
    ),
    (("--debug",), "debug", "Show tracebacks and debug logs.", True),
]


def global_options(func: Any) -> Any:
    """Accept the group's options after the subcommand too; a value given there wins."""

    def setter(field: str) -> Any:
        def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
            if value is None or value is False:
                return
            obj = ctx.find_object(Context)
            if obj is None:  # pragma: no cover - the group always sets it
                return
            setattr(obj, field, value)
            if field in ("debug", "verbose"):
                _configure_logging(obj.debug, obj.verbose)

        return callback

    for names, field, help_text, flag in reversed(GLOBAL_OPTIONS):
        func = click.option(
            *names,
            field,
            is_flag=flag,
            default=False if flag else None,
            expose_value=False,
            callback=setter(field),
            help=help_text,
        )(func)
    return func
