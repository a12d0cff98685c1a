"""Destinations: one module per dbt adapter type, the Python mirror of ``adapter.dispatch``.

``destination_for(project)`` picks the module by the profile target's ``type``; ``ingest``,
``reconcile``, ``run`` and the CLI ask it and never branch on the type themselves. Adding a
destination is one module here and one line in ``DESTINATIONS``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from runner.destinations.base import Destination, FileToStage, StagedBatch, StagingWriter
from runner.errors import ConfigError

if TYPE_CHECKING:
    from runner.project import Project

# dbt adapter type -> "module:class" (imported on demand: each pulls its own client library).
DESTINATIONS: dict[str, str] = {
    "spark": "runner.destinations.spark.destination:SparkDestination",
    "postgres": "runner.destinations.postgres:PostgresDestination",
    "bigquery": "runner.destinations.bigquery:BigQueryDestination",
    "databricks": "runner.destinations.databricks:DatabricksDestination",
}


def destination_for(project: Project) -> Destination:
    """The Destination of the project's dbt target."""
    kind = str(project.target.get("type", ""))
    spec = DESTINATIONS.get(kind)
    if spec is None:
        raise ConfigError(
            f"profile target {project.target_name!r} is of type {kind!r}; the runner stages to "
            f"{', '.join(sorted(DESTINATIONS))}"
        )
    module, cls = spec.split(":")
    destination: Destination = getattr(importlib.import_module(module), cls)(project)
    return destination


__all__ = [
    "DESTINATIONS",
    "Destination",
    "FileToStage",
    "StagedBatch",
    "StagingWriter",
    "destination_for",
]
