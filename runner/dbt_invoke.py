"""dbt invoked in this process (``dbtRunner``) on the project's dbt project, profiles and
target: the argument list every invocation shares, and a parsed manifest."""

from __future__ import annotations

import sys
from typing import Any

from runner.project import Project


def _flag_source() -> str:
    """The module that declared a behavior flag: the first frame outside dbt_common's
    behavior_flags, named by its globals."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name and name != "dbt_common.behavior_flags":
            return str(name)
        frame = frame.f_back  # type: ignore[assignment]
    return "Unknown"


def quick_flag_source() -> None:
    """dbt_common names the module that declared a behavior flag (a field of its
    behavior-change log event) with ``inspect.stack()`` for every flag of every adapter it
    registers: that reads each frame's source and, for frames of generated code, walks all of
    ``sys.modules``, which in a long-lived process with many modules (watch mode, the test
    workers) costs more than the dbt command itself. The same name, read from the frames."""
    from dbt_common import behavior_flags

    rendered = getattr(behavior_flags, "BehaviorFlagRendered", None)
    if rendered is not None and hasattr(rendered, "_default_source"):
        rendered._default_source = staticmethod(_flag_source)


def dbt_command(project: Project, command: str, *args: str) -> list[str]:
    """A dbt command on the project's dbt project, profiles and target, as dbtRunner takes it."""
    return [
        command,
        "--project-dir",
        str(project.dbt_project_dir),
        "--profiles-dir",
        str(project.profiles_dir),
        "--target",
        project.target_name,
        *args,
    ]


def parsed_manifest(project: Project) -> Any:
    """The dbt project's manifest, parsed in this process (dbt also writes it to its target
    path)."""
    from dbt.cli.main import dbtRunner
    from dbt.contracts.graph.manifest import Manifest

    quick_flag_source()
    res = dbtRunner().invoke(dbt_command(project, "parse", "--quiet"))
    if not res.success or not isinstance(res.result, Manifest):
        raise RuntimeError(f"dbt parse failed: {res.exception or 'see dbt output'}")
    return res.result


def parsed_dbt(project: Project) -> Any:
    """A ``dbtRunner`` holding the dbt project's parsed manifest, for builds that skip parsing
    (watch mode: the project is parsed once per process; restart to pick up edited models)."""
    from dbt.cli.main import dbtRunner

    return dbtRunner(manifest=parsed_manifest(project))
