"""`runner reconcile`: STAGED Files whose Applied File Markers exist become COMMITTED.

The marker is written by the apply in the destination, after the target changed (ADR-0009);
this is the second phase of ADR-0004's two-phase commit. A File counts as applied once every
apply target of its own entity holds a marker for its content hash: each model that applies
the entity's staged rows (``meta.cdc.apply``: current state, history) and, for a transaction
metadata entity, its ledger. Which models those are is read from the dbt project's manifest
(``target/manifest.json``, written by every dbt command; parsed here when there is none). Two
entities may receive Files of identical bytes: only the entity's own targets count, and the
markers' row counts kept with the File (``runner status``, the run summary) are theirs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.dbt_invoke import parsed_manifest
from runner.invocation import Invocation
from runner.transactions import group_status

log = logging.getLogger("runner.reconcile")


@dataclass
class ReconcileResult:
    committed: int = 0
    waiting: int = 0  # STAGED, no marker yet: `dbt build` has not applied them
    targets: dict[str, list[str]] = field(default_factory=dict)  # file name -> target tables
    # target table -> Files applied to some of their entity's targets and not yet to this one
    missing: dict[str, int] = field(default_factory=dict)


def applied_markers(inv: Invocation) -> dict[str, list[dict[str, Any]]]:
    """Content hash -> its markers (one per target table), read from the destination (through
    the invocation's SparkSession where the destination reads through Spark)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for marker in inv.destination.markers(inv.reading_spark):
        out.setdefault(marker["file_hash"], []).append(marker)
    return out


def manifest_path(inv: Invocation) -> Path:
    """Where dbt writes the project's manifest (its target path: DBT_TARGET_PATH, else
    dbt_project.yml's target-path, else ``target``)."""
    folder = os.environ.get("DBT_TARGET_PATH")
    if not folder:
        folder = str(inv.project.dbt_conf.get("target-path") or "target")
    return inv.project.dbt_project_dir / folder / "manifest.json"


def apply_targets(inv: Invocation) -> dict[str, set[str]]:
    """Entity -> the tables (``schema.identifier``, lower case, as markers name them) of the
    models that write its Applied File Markers, from the dbt manifest."""
    return targets_in_manifest(_manifest(inv), inv.entities)


def _manifest(inv: Invocation) -> dict[str, Any]:
    """The manifest dbt last wrote; parsed here when there is none, or when it stays
    unreadable (another dbt command writing it: it is not written atomically)."""
    path = manifest_path(inv)
    for _ in range(5):
        try:
            return dict(json.loads(path.read_text()))
        except FileNotFoundError:
            break
        except (json.JSONDecodeError, UnicodeDecodeError):
            time.sleep(0.2)
    log.info("reading the dbt project's apply models from a fresh parse (no readable %s)", path)
    return dict(parsed_manifest(inv.project).writable_manifest().to_dict(omit_none=False))


def targets_in_manifest(manifest: dict[str, Any], entities: dict[str, Any]) -> dict[str, set[str]]:
    """The apply targets of each entity in a parsed manifest (see ``apply_targets``): the
    models with ``meta.cdc.apply`` whose one upstream CDC source is the entity (the walk
    stops at a transaction ledger, read for its gate only, as cdc.apply_entity() does), and
    each transaction metadata entity's ledger model (``meta.cdc.ledger``, default its name)."""
    nodes = manifest.get("nodes") or {}
    sources = manifest.get("sources") or {}
    ledgers = {e.meta.get("ledger") or e.name: e.name for e in entities.values() if e.members}
    out: dict[str, set[str]] = {}

    def cdc_meta(node: dict[str, Any]) -> dict[str, Any]:
        meta = (node.get("config") or {}).get("meta") or node.get("meta") or {}
        return meta.get("cdc") or {}

    def table(node: dict[str, Any]) -> str:
        return f"{node.get('schema')}.{node.get('alias') or node.get('name')}".lower()

    for node in nodes.values():
        if node.get("resource_type") != "model":
            continue
        meta = cdc_meta(node)
        if meta.get("transaction_ledger") and node.get("name") in ledgers:
            out.setdefault(ledgers[node["name"]], set()).add(table(node))
            continue
        if meta.get("apply") is not True:
            continue
        found: list[str] = []
        queue = list((node.get("depends_on") or {}).get("nodes") or [])
        seen = set(queue)
        while queue:
            uid = queue.pop(0)
            if uid in sources:
                name = sources[uid].get("name")
                if cdc_meta(sources[uid]) and name not in found:
                    found.append(name)
            elif uid in nodes and not cdc_meta(nodes[uid]).get("transaction_ledger"):
                for parent in (nodes[uid].get("depends_on") or {}).get("nodes") or []:
                    if parent not in seen:
                        seen.add(parent)
                        queue.append(parent)
        if len(found) == 1:
            out.setdefault(found[0], set()).add(table(node))
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
    record_groups(inv, process_id)  # the destination is being read: the groups' ledgers too
    if not any(rec.content_hash in markers for rec in staged):
        result.waiting += len(staged)
        return result
    targets_of = apply_targets(inv)
    ready: dict[int, tuple[str | None, Sequence[dict[str, Any]]]] = {}
    targets: dict[int, list[str]] = {}
    partly: dict[int, list[dict[str, Any]]] = {}
    for rec in staged:
        wanted = targets_of.get(rec.entity, set())
        found = [
            m for m in markers.get(rec.content_hash, []) if str(m["target_table"]).lower() in wanted
        ]
        have = {str(m["target_table"]).lower() for m in found}
        if not wanted or have != wanted:
            result.waiting += 1
            if found:  # applied to some targets: counted now, committed with the rest
                partly[rec.id] = found
                for table in sorted(wanted - have):
                    result.missing[table] = result.missing.get(table, 0) + 1
            continue
        targets[rec.id] = sorted({m["target_table"] for m in found})
        ready[rec.id] = (f"marker in {', '.join(targets[rec.id])}", found)
    if partly:
        db.keep_markers(partly, process_id)
    # A File another runner reconciled since we read the STAGED Files is not returned.
    for moved in db.mark_committed_many(ready, process_id):
        result.committed += 1
        result.targets[moved.path] = targets[moved.id]
    return result


def record_groups(inv: Invocation, process_id: str) -> None:
    """Keep each transaction group's state (watermark, held and quarantined transactions, read
    from its ledger) in the Audit DB, where `runner status` shows it without the destination.
    Nothing when no group is declared; a ledger that cannot be read is said and skipped."""
    if not any(e.is_transactions for e in inv.entities.values()):
        return
    try:
        found = group_status(inv)
    except Exception as exc:  # noqa: BLE001 - the Files' reconcile goes on without it
        log.warning("transaction groups not recorded: %s", str(exc).strip().splitlines()[:1])
        return
    inv.db.record_groups([g.as_json() for g in found], process_id)


def table_rows(inv: Invocation, tables: list[str]) -> dict[str, int]:
    """Row counts of destination tables named ``schema.table`` (for the run's summary)."""
    plain = [
        t for t in tables if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*", t)
    ]
    if not plain:
        return {}  # nothing to count: no SparkSession is started for it
    return inv.destination.table_rows(plain, inv.reading_spark)
