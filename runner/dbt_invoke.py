"""dbt invoked in this process (``dbtRunner``) on the project's dbt project, profiles and
target: the argument list every invocation shares, and a parsed manifest."""

from __future__ import annotations

from typing import Any

from runner.project import Project


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

    res = dbtRunner().invoke(dbt_command(project, "parse", "--quiet"))
    if not res.success or not isinstance(res.result, Manifest):
        raise RuntimeError(f"dbt parse failed: {res.exception or 'see dbt output'}")
    return res.result


def parsed_dbt(project: Project) -> Any:
    """A ``dbtRunner`` holding the dbt project's parsed manifest, for builds that skip parsing
    (watch mode: the project is parsed once per process; restart to pick up edited models)."""
    from dbt.cli.main import dbtRunner

    return dbtRunner(manifest=parsed_manifest(project))
