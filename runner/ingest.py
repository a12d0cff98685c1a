"""`runner ingest`: discover, hash, register, claim and stage each entity's Files."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from audit import AuditDB
from runner.discover import LandedFile, discover, settle
from runner.entities import Entity, load_entities
from runner.errors import ConfigError
from runner.hashing import content_hash
from runner.progress import Progress
from runner.project import Project

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from runner.staging.spark import StagingWriter

log = logging.getLogger("runner.ingest")


@dataclass
class IngestResult:
    registered: int = 0
    duplicates: int = 0
    staged: int = 0
    quarantined: int = 0
    failed: int = 0
    rows: int = 0
    committed: int = 0  # STAGED Files found applied by the reconcile that ingest starts with
    notes: list[str] = field(default_factory=list)


def landing_roots(project: Project, landing: list[str] | None) -> list[Path]:
    """The folders Files may be read from: --landing, else runner.yml's landing_roots."""
    roots = landing or list(project.settings.landing_roots)
    return [(project.root / r) if not Path(r).is_absolute() else Path(r) for r in roots]


def staging_writer(project: Project) -> StagingWriter:
    """Where staged rows go: Iceberg tables on Spark targets, COPY on PostgreSQL."""
    if project.target_type == "spark":
        from runner.staging.iceberg import IcebergWriter

        return IcebergWriter("iceberg")
    if project.target_type == "postgres":
        from runner.staging.postgres import PostgresWriter

        return PostgresWriter(project.target, project.state_dir / project.target_name / "scratch")
    raise ConfigError(
        f"staging to a {project.target_type!r} target is not built yet; `runner ingest` stages "
        "to the local Spark + Iceberg target and to PostgreSQL"
    )


def ingest(
    project: Project,
    db: AuditDB,
    process_id: str,
    *,
    spark: SparkSession,
    landing: list[str] | None = None,
    entity_names: list[str] | None = None,
    min_age_seconds: float = 0.0,
    settle_seconds: float = 0.0,
    progress: Progress | None = None,
) -> IngestResult:
    from runner.staging.spark import FileToStage, stage_entity

    writer = staging_writer(project)

    entities = load_entities(project)
    unknown = sorted(set(entity_names or []) - set(entities))
    if unknown:
        raise ConfigError(f"unknown entities {unknown}; declared: {sorted(entities)}")
    chosen: list[Entity] = [entities[n] for n in (entity_names or sorted(entities))]
    roots = landing_roots(project, landing)
    result = IngestResult()
    progress = progress or Progress()
    from runner.reconcile import reconcile

    result.committed = reconcile(project, db, process_id, spark).committed
    for rec in db.reclaim_expired(process_id=process_id):
        result.notes.append(f"{rec.path}: lease expired, back to {rec.state}")
    found: dict[str, list[LandedFile]] = {}
    for entity in chosen:
        files, notes = discover(entity, roots, min_age_seconds=min_age_seconds)
        result.notes.extend(notes)
        found[entity.name] = files
    if settle_seconds > 0:  # one pause for all entities, then a second listing
        every = [f for files in found.values() for f in files]
        stable, notes = settle(every, settle_seconds)
        result.notes.extend(notes)
        keep = {f.path for f in stable}
        found = {name: [f for f in files if f.path in keep] for name, files in found.items()}
    for entity in chosen:
        files = found[entity.name]
        progress.start("hash", entity.name, len(files))
        for landed in files:
            path = str(landed.path)
            known = db.find_sighting(
                entity=entity.name, path=path, size=landed.size, mtime=landed.mtime
            )
            if known is not None:
                progress.advance("hash", entity.name, bytes=0)
                continue  # same path, size and mtime: already hashed and registered
            reg = db.register_file(
                entity=entity.name,
                path=path,
                size=landed.size,
                mtime=landed.mtime,
                content_hash=content_hash(landed.path),
                process_id=process_id,
            )
            if reg.created:
                result.registered += 1
                result.duplicates += reg.file.state == "DUPLICATE"
            progress.advance("hash", entity.name, bytes=landed.size)
        claimed = db.claim_pending(process_id, entity=entity.name)
        if not claimed:
            continue
        log.info("staging %d Files of %s", len(claimed), entity.name)
        progress.start("stage", entity.name, len(claimed))
        to_stage = [FileToStage(c.id, Path(c.path), c.content_hash) for c in claimed]
        try:
            staged = stage_entity(spark, entity, to_stage, process_id, writer)
        except Exception as exc:  # transient: back to PENDING until attempts run out
            for c in claimed:
                rec = db.record_failure(c.id, process_id, f"{type(exc).__name__}: {exc}"[:2000])
                result.failed += rec.state == "FAILED"
            raise
        for file_id, reason in staged.quarantined.items():
            db.quarantine(file_id, process_id, reason)
            result.quarantined += 1
            log.warning("quarantined %s", reason)
        for file_id, rows in staged.staged.items():
            db.mark_staged(file_id, process_id, process_id)
            result.staged += 1
            result.rows += rows
        progress.advance("stage", entity.name, files=len(claimed), rows=staged.rows)
    return result
