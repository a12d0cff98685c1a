"""`runner ingest`: discover, hash, register, claim and stage each entity's Files."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from audit import AuditDB, FileRecord, IllegalTransition
from runner.destinations import Destination, FileToStage
from runner.destinations.base import StagingWriter
from runner.discover import LandedFile, discover_each, settle
from runner.entities import Column as EntityColumn
from runner.entities import Entity
from runner.errors import CdcError, ConfigError, TerminalError, TransientError, classify
from runner.fs import FilePath, RemoteFile, as_file, configure, is_uri
from runner.hashing import content_hash
from runner.invocation import Invocation
from runner.phases import Phases
from runner.progress import Progress
from runner.project import Project
from runner.reconcile import reconcile
from runner.spool import Spool, spark_reads
from runner.staging import reloads
from runner.staging.schema import declaration_yaml
from runner.staging.spark import StageResult, stage_entity

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger("runner.ingest")


@dataclass
class IngestResult:
    registered: int = 0
    duplicates: int = 0
    staged: int = 0
    quarantined: int = 0
    failed: int = 0
    retrying: int = 0  # failed this time, back to PENDING for the next run
    rows: int = 0
    committed: int = 0  # STAGED Files found applied by the reconcile that ingest starts with
    notes: list[str] = field(default_factory=list)
    # Columns Files added to staging tables (meta.cdc.on_schema_change), one line per entity.
    schema_changes: list[str] = field(default_factory=list)
    phases: Phases = field(default_factory=Phases)


def landing_roots(project: Project, landing: list[str] | None) -> list[FilePath]:
    """The folders Files may be read from: --landing, else runner.yml's landing_roots. A root
    may be a URI (s3://, gs://, abfss://, file://): listed and read through fsspec."""
    roots = landing or list(project.settings.landing_roots)
    configure(project.settings.landing_options)
    out: list[FilePath] = []
    for r in roots:
        if is_uri(r):
            out.append(RemoteFile(r))
        else:
            out.append((project.root / r) if not Path(r).is_absolute() else Path(r))
    return out


def ingest(
    inv: Invocation,
    process_id: str,
    *,
    landing: list[str] | None = None,
    entity_names: list[str] | None = None,
    min_age_seconds: float = 0.0,
    settle_seconds: float = 0.0,
    progress: Progress | None = None,
    effective_date: date | None = None,
    recover: bool = True,
) -> IngestResult:
    """Reconcile, recover what earlier runs left (unless the caller did: ``recover``), then
    find, hash, register and stage each chosen entity's Files."""
    project, db, destination = inv.project, inv.db, inv.destination
    entities = inv.entities
    unknown = sorted(set(entity_names or []) - set(entities))
    if unknown:
        raise ConfigError(f"unknown entities {unknown}; declared: {sorted(entities)}")
    chosen: list[Entity] = [entities[n] for n in (entity_names or sorted(entities))]
    roots = landing_roots(project, landing)
    result = IngestResult()
    progress = progress or Progress()
    phases = result.phases
    with phases.time("reconcile"):
        result.committed = reconcile(inv, process_id, skip_held=True).committed
    if recover:
        recovery = db.recover(process_id)
        for pid in recovery.aborted_runs:
            result.notes.append(f"run {pid} had stopped without ending; closed as aborted")
        for rec in recovery.reclaimed:
            result.notes.append(f"{rec.path}: {rec.last_error}; back to {rec.state}")
    found: dict[str, list[LandedFile]] = {}
    with phases.time("discover"):
        listed = discover_each(chosen, roots, min_age_seconds=min_age_seconds)
        for entity in chosen:
            files, notes = listed[entity.name]
            result.notes.extend(notes)
            found[entity.name] = files
    if settle_seconds > 0:  # one pause for all entities, then a second listing
        every = [f for files in found.values() for f in files]
        stable, notes = settle(every, settle_seconds)
        result.notes.extend(notes)
        keep = {f.path for f in stable}
        found = {name: [f for f in files if f.path in keep] for name, files in found.items()}
    spool = _spool(inv, roots, process_id)
    try:
        for entity in chosen:
            files = found[entity.name]
            progress.start("hash", entity.name, len(files))
            with phases.time("hash"):
                _register(db, entity, files, process_id, result, progress, spool)
        waiting = [e for e in chosen if db.files(entity=e.name, states=["PENDING"])]
        if not waiting:
            return result  # nothing to stage: no SparkSession is started
        with phases.time("spark_start"):
            spark = inv.spark
        writer = destination.writer()  # one for all entities: it makes the state tables once
        for entity in chosen:
            with phases.time("stage"):
                stager = _Stager(
                    spark, db, entity, process_id, destination, writer, result, progress
                )
                stager.effective_date = effective_date
                stager.spool = spool
                if entity in waiting:
                    stager.pending()
                # An entity no File has arrived for still gets its (empty) staging table, so
                # that `dbt build` can build its models.
                stager.writer.ensure_table(spark, entity)
        return result
    finally:
        if spool is not None:
            spool.close()


def _spool(inv: Invocation, roots: list[FilePath], process_id: str) -> Spool | None:
    """The run's spool (runner/spool.py) when a landing root is remote: copies made while
    hashing where the destination's Spark runs in this process (``eager``), else only for a
    Spark found without a connector for the scheme when staging. Copies left by runs that are
    no longer running are removed first."""
    if not any(isinstance(r, RemoteFile) for r in roots):
        return None
    max_bytes = inv.project.settings.spool_max_mib * 1024 * 1024
    eager = inv.destination.spools_remote_files
    spool = Spool(inv.project.state_dir / "spool", process_id, max_bytes, eager=eager)
    spool.clean({r["process_id"] for r in inv.db.runs() if r["outcome"] == "running"})
    return spool


def _register(
    db: AuditDB,
    entity: Entity,
    files: list[LandedFile],
    process_id: str,
    result: IngestResult,
    progress: Progress,
    spool: Spool | None = None,
) -> None:
    """Hash and register the Files not seen before (same path, size and mtime): hashed one by
    one (a remote File kept in the ``spool`` on the way, when there is one), then registered
    together."""
    seen = db.sightings(entity.name, (str(f.path) for f in files))
    # A reload File rewritten with bytes seen before is a new File: only where Files are
    # ordered by their names (a commit-time column gives a reload new bytes: its times).
    reloads = entity.reloads if entity.reload_files and entity.file_order is not None else None
    entries = []
    for landed in files:
        path = str(landed.path)
        if (path, landed.size, landed.mtime) in seen:
            progress.advance("hash", entity.name, bytes=0)
            continue  # same path, size and mtime: already hashed and registered
        remote = landed.path if isinstance(landed.path, RemoteFile) else None
        digest = (
            spool.hash_and_keep(remote, landed.size)
            if spool is not None and spool.eager and remote is not None
            else content_hash(landed.path)
        )
        entries.append(
            dict(
                entity=entity.name,
                path=path,
                size=landed.size,
                mtime=landed.mtime,
                content_hash=digest,
                process_id=process_id,
                reloads=reloads,
            )
        )
        progress.advance("hash", entity.name, bytes=landed.size)
    for reg in db.register_files(entries) if entries else []:
        if reg.created:
            result.registered += 1
            result.duplicates += reg.file.state == "DUPLICATE"


class _Stager:
    """Stages claimed Files and settles each one's fate in the Audit DB.

    A batch that fails is split into single Files, so one unreadable File is quarantined and
    the others are staged. A transient error gives every File back without counting an
    attempt. An unknown error counts against a File only when it can be pinned on it (it was
    staged alone, or others succeeded alone); when every File fails alone the cause is not the
    Files: they are given back uncounted (each with a lapse, so they go alone next time) and
    the error is re-raised.
    """

    def __init__(
        self,
        spark: SparkSession,
        db: AuditDB,
        entity: Entity,
        process_id: str,
        destination: Destination,
        writer: StagingWriter,
        result: IngestResult,
        progress: Progress,
    ) -> None:
        self.spark, self.db, self.entity = spark, db, entity
        self.process_id, self.destination, self.writer = process_id, destination, writer
        self.result, self.progress = result, progress
        self.effective_date: date | None = None  # runner ingest --effective-date
        self.spool: Spool | None = None  # remote Files read from local copies (runner/spool.py)

    def pending(self) -> None:
        """Claim and stage the entity's PENDING Files."""
        db, entity, process_id = self.db, self.entity, self.process_id
        eff = entity.effective_date
        if eff is not None and eff.option and self.effective_date is None:
            waiting = db.files(entity=entity.name, states=["PENDING"])
            if waiting:
                raise ConfigError(
                    f"entity {entity.name}: {len(waiting)} File(s) wait for an effective date; "
                    "give it with `runner ingest --effective-date YYYY-MM-DD` (or "
                    "`--entity` to leave this entity out)"
                )
        # Files that were in flight when a run died are staged alone first: if one of them
        # kills the process again, that lapse is pinned on it (and it ends FAILED).
        suspects = [f.id for f in db.files(entity=entity.name, states=["PENDING"]) if f.lapses]
        for file_id in suspects:
            try:
                self.stage([db.claim(file_id, process_id)])
            except IllegalTransition:
                continue  # another run took it
        claimed = db.claim_pending(process_id, entity=entity.name)
        if claimed:
            log.info("staging %d Files of %s", len(claimed), entity.name)
            if self.spool is None:
                self.stage(claimed)
                return
            # from the spool: a batch's copies at most its max_bytes, removed once staged
            for batch in self.spool.batches(claimed, [c.size for c in claimed]):
                try:
                    self.stage(batch)
                finally:
                    self.spool.release(self._bytes_hash(c) for c in batch)

    def _try(self, files: list[FileRecord]) -> StageResult | CdcError:
        try:
            to_stage = [self._to_stage(c) for c in files]
            return stage_entity(
                self.spark,
                self.entity,
                to_stage,
                self.process_id,
                self.writer,
                self.destination.file_identity,
                self.effective_date,
                self._staged_before(),
            )
        except Exception as exc:  # decided below, per File
            one = files[0] if len(files) == 1 else None
            err = classify(
                exc,
                path=one.path if one else None,
                content_hash=one.content_hash if one else None,
                process_id=self.process_id,
            )
            err.__cause__ = exc
            log.debug("staging %d File(s) of %s failed", len(files), self.entity.name, exc_info=exc)
            return err

    def _staged_before(self) -> list[list[str]]:
        """With meta.cdc.reloads: the names of the entity's Files staged before, batch by
        batch in staging order (what tells a reload from the first full load)."""
        if not self.entity.reload_files:
            return []
        staged = self.db.staged_paths(self.entity.name)
        return reloads.batches((as_file(path).name, at, by) for path, at, by in staged)

    def _bytes_hash(self, rec: FileRecord) -> str:
        """The hash of the File's bytes (the spool names and checks copies by it): its content
        hash, or for a reload rewritten with bytes seen before, the earlier File's."""
        return (
            rec.content_hash if rec.reload_of is None else self.db.get(rec.reload_of).content_hash
        )

    def _to_stage(self, rec: FileRecord) -> FileToStage:
        path = as_file(rec.path)
        spool = self.spool
        if spool is None or not isinstance(path, RemoteFile):
            return FileToStage(rec.id, path, rec.content_hash)
        held = self._bytes_hash(rec)
        if not spool.has(path, held) and spark_reads(self.spark, path.uri):
            return FileToStage(rec.id, path, rec.content_hash)  # its Spark reads the URI
        return FileToStage(rec.id, path, rec.content_hash, spool.local_copy(path, held))

    def stage(self, claimed: list[FileRecord]) -> None:
        self.progress.start("stage", self.entity.name, len(claimed))
        outcome = self._try(claimed)
        if isinstance(outcome, TransientError):
            self._release(claimed, outcome)
            raise outcome
        if not isinstance(outcome, CdcError):
            self._settle(outcome)
            return
        if len(claimed) == 1:
            self._fail(claimed[0], outcome)
            if not isinstance(outcome, TerminalError):
                raise outcome
            return
        log.warning(
            "staging %d Files of %s together failed (%s); staging them one by one",
            len(claimed),
            self.entity.name,
            outcome.message,
        )
        unknown: list[tuple[FileRecord, CdcError]] = []
        succeeded = 0
        for i, rec in enumerate(claimed):
            single = self._try([rec])
            if isinstance(single, TransientError):
                self._release(claimed[i:], single)
                self._release([r for r, _ in unknown], single)
                raise single
            if isinstance(single, TerminalError):
                self._fail(rec, single)
            elif isinstance(single, CdcError):
                unknown.append((rec, single))
            else:
                succeeded += 1
                self._settle(single)
        if unknown and not succeeded:  # every File failed alone: not the Files' fault
            self._release([r for r, _ in unknown], unknown[0][1], lapse=True)
            raise unknown[0][1]
        for rec, err in unknown:
            self._fail(rec, err)

    def _settle(self, staged: StageResult) -> None:
        for file_id, reason in staged.quarantined.items():
            self.db.quarantine(file_id, self.process_id, reason)
            self.result.quarantined += 1
            log.warning("quarantined %s", reason)
        added: dict[str, EntityColumn] = {}
        details: dict[int, str | None] = {}
        for file_id in staged.staged:
            skipped = staged.skipped.get(file_id)
            notes = [f"{skipped} Kafka tombstone(s) skipped (blank or null lines)"] * bool(skipped)
            new = staged.added.get(file_id, [])
            if new:
                notes.append(
                    "added to the staging table (meta.cdc.on_schema_change: "
                    f"{self.entity.on_schema_change}): "
                    + ", ".join(f"{c.name} {c.data_type}" for c in new)
                )
                added.update({c.name: c for c in new})
            details[file_id] = "; ".join(notes) or None
        moved = {r.id for r in self.db.mark_staged_many(details, self.process_id, self.process_id)}
        for file_id, rows in staged.staged.items():
            if file_id not in moved:  # our lease lapsed and another run took it
                lost = IllegalTransition(
                    file_id, "mark_staged", ["PROCESSING"], self.db.get(file_id).state
                )
                self.result.notes.append(f"File {file_id}: lease lost while staging ({lost})")
                continue
            if details[file_id]:
                log.info("File %s: %s", file_id, details[file_id])
            self.result.staged += 1
            self.result.rows += rows
        if added:
            self.result.schema_changes.append(
                f"{self.entity.name}: {', '.join(added)} added to staging table "
                f"{self.entity.staging_table} (older rows NULL); declare "
                f"{'them' if len(added) > 1 else 'it'} under the entity's columns in "
                f"{self.entity.declared_in.name}:\n" + declaration_yaml(list(added.values()))
            )
        n = len(staged.staged) + len(staged.quarantined)
        self.progress.advance("stage", self.entity.name, files=n, rows=staged.rows)

    def _fail(self, rec: FileRecord, err: CdcError) -> None:
        name = as_file(rec.path).name
        message = err.message if err.message.startswith(name) else f"{name}: {err.message}"
        try:
            if isinstance(err, TerminalError):
                self.db.quarantine(rec.id, self.process_id, message)
                self.result.quarantined += 1
                log.warning("quarantined %s", message)
            else:
                after = self.db.record_failure(rec.id, self.process_id, message[:2000])
                self.result.failed += after.state == "FAILED"
                self.result.retrying += after.state == "PENDING"
                log.warning("failed %s", message)
        except IllegalTransition as exc:
            self.result.notes.append(f"{rec.path}: lease lost ({exc})")

    def _release(self, recs: list[FileRecord], err: CdcError, *, lapse: bool = False) -> None:
        for rec in recs:
            try:
                self.db.release(rec.id, self.process_id, err.message[:2000], lapse=lapse)
            except IllegalTransition:
                continue
