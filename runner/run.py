"""`runner run`: reconcile, ingest, `dbt build`, reconcile, in one process and one SparkSession.

dbt runs in-process (``dbtRunner``); on a Spark target dbt-spark's session method gets the
runner's SparkSession back from ``getOrCreate()``, so the JVM starts once. The runner's
process_id is passed to dbt in the ``CDC_PROCESS_ID`` environment variable (not a ``--vars``
value: a var that changes every run makes dbt re-parse the whole project, every run).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from runner.ingest import IngestResult, ingest
from runner.invocation import Invocation
from runner.phases import Phases
from runner.progress import Progress
from runner.project import Project
from runner.reconcile import ReconcileResult, reconcile

log = logging.getLogger("runner.run")


@dataclass
class RunResult:
    ingest: IngestResult
    dbt_ok: bool
    dbt_error: str | None
    reconcile: ReconcileResult = field(default_factory=ReconcileResult)

    @property
    def ok(self) -> bool:
        return self.dbt_ok and not (self.ingest.quarantined or self.ingest.failed)


def dbt_build(
    project: Project,
    process_id: str,
    args: list[str] | None = None,
    phases: Phases | None = None,
) -> tuple[bool, str | None]:
    """`dbt build` on the project's dbt project and target, in this process. ``phases`` gets
    ``dbt_nodes`` (the nodes' own execution time: the apply) and ``dbt_fixed`` (the rest: parse,
    compile, connections)."""
    from dbt.cli.main import dbtRunner

    start = time.perf_counter()
    before = os.environ.get("CDC_PROCESS_ID")
    os.environ["CDC_PROCESS_ID"] = process_id
    try:
        res = dbtRunner().invoke(
            [
                "build",
                "--project-dir",
                str(project.dbt_project_dir),
                "--profiles-dir",
                str(project.profiles_dir),
                "--target",
                project.target_name,
                *(args or []),
            ]
        )
    finally:
        if before is None:
            os.environ.pop("CDC_PROCESS_ID", None)
        else:
            os.environ["CDC_PROCESS_ID"] = before
    if phases is not None:
        total = time.perf_counter() - start
        nodes = sum(
            float(getattr(r, "execution_time", 0) or 0)
            for r in getattr(res.result, "results", None) or []
        )
        phases.add("dbt_fixed", max(total - nodes, 0.0))
        phases.add("dbt_nodes", nodes)
    if res.success:
        return True, None
    if res.exception is not None:
        return False, f"{type(res.exception).__name__}: {res.exception}"
    results: Any = res.result
    failed = [
        f"{r.node.name}: {r.status}"
        for r in getattr(results, "results", None) or []
        if str(getattr(r, "status", "")) in ("error", "fail")
    ]
    return False, "dbt build failed: " + ("; ".join(failed) or "see dbt's output")


def run(
    inv: Invocation,
    process_id: str,
    *,
    landing: list[str] | None = None,
    entity_names: list[str] | None = None,
    min_age_seconds: float = 0.0,
    settle_seconds: float = 0.0,
    dbt_args: list[str] | None = None,
    progress: Progress | None = None,
    effective_date: date | None = None,
    recover: bool = True,
) -> RunResult:
    ingested = ingest(
        inv,
        process_id,
        landing=landing,
        entity_names=entity_names,
        min_age_seconds=min_age_seconds,
        settle_seconds=settle_seconds,
        progress=progress,
        effective_date=effective_date,
        recover=recover,
    )
    phases = ingested.phases
    ok, error = dbt_build(inv.project, process_id, dbt_args, phases)
    with phases.time("reconcile"):
        after = reconcile(inv, process_id)
    return RunResult(ingest=ingested, dbt_ok=ok, dbt_error=error, reconcile=after)
