"""`runner reconcile`: STAGED Files whose Applied File Marker exists become COMMITTED.

The marker is written by the apply in the destination, after the target changed (ADR-0009);
this is the second phase of ADR-0004's two-phase commit. A File counts as applied once any
target table holds a marker for its content hash. The markers' row counts are kept with the
File in the Audit DB (``runner status``, the run summary).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from audit.models import FileState
from audit.store import IllegalTransition
from runner.invocation import Invocation

log = logging.getLogger("runner.reconcile")


@dataclass
class ReconcileResult:
    committed: int = 0
    waiting: int = 0  # STAGED, no marker yet: `dbt build` has not applied them
    targets: dict[str, list[str]] = field(default_factory=dict)  # file name -> target tables


def applied_markers(inv: Invocation) -> dict[str, list[dict[str, Any]]]:
    """Content hash -> its markers (one per target table), read from the destination (through
    the invocation's SparkSession where the destination reads through Spark)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for marker in inv.destination.markers(inv.reading_spark):
        out.setdefault(marker["file_hash"], []).append(marker)
    return out


def reconcile(inv: Invocation, process_id: str, *, skip_held: bool = False) -> ReconcileResult:
    """``skip_held``: leave out the Files a build left held by their transaction group (no
    marker can have come since without another build): with only those STAGED, nothing is read
    from the destination (no SparkSession is started for it)."""
    result = ReconcileResult()
    db = inv.db
    staged = db.files(states=["STAGED"])
    if skip_held and staged:
        held = db.held()
        result.waiting += sum(f.id in held for f in staged)
        staged = [f for f in staged if f.id not in held]
    if not staged:
        return result
    markers = applied_markers(inv)
    for rec in staged:
        found = markers.get(rec.content_hash)
        if not found:
            result.waiting += 1
            continue
        targets = sorted({m["target_table"] for m in found})
        try:
            db.mark_committed(
                rec.id, process_id, detail=f"marker in {', '.join(targets)}", markers=found
            )
        except IllegalTransition as exc:
            if exc.actual != FileState.COMMITTED.value:
                raise
            continue  # another runner reconciled it since we read the STAGED Files
        result.committed += 1
        result.targets[rec.path] = sorted(targets)
    return result


def table_rows(inv: Invocation, tables: list[str]) -> dict[str, int]:
    """Row counts of destination tables named ``schema.table`` (for the run's summary)."""
    plain = [
        t for t in tables if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", t)
    ]
    if not plain:
        return {}  # nothing to count: no SparkSession is started for it
    return inv.destination.table_rows(plain, inv.reading_spark)
