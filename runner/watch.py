"""`runner run --watch`: one process that keeps its SparkSession and its parsed dbt project,
polls the landing roots, and runs a batch (ingest, `dbt build` of what the new Files touch,
reconcile) whenever there is something new. A landing root that is a local folder is also
watched for changes (inotify on Linux, through watchdog): a File written there ends the wait at
once instead of at the next poll. Polling stays, for roots in object storage and for what a
notification misses.

A poll costs a listing and an Audit DB lookup per File: no run is recorded, no Spark job and no
dbt invocation happen until a File is new (or a waiting File is given another try). Each batch
is a run of its own in the Audit DB, with its heartbeat, recovery and outcome, so `runner runs`
and `runner status` show it as any `runner run`. A batch that fails is reported and the loop goes
on. SIGTERM or Ctrl-C lets the current batch finish, then ends the loop; a second one abandons
the batch: its leases are given back and its run is closed as aborted, and the next run (this
command again) applies what it left, once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.dbt_invoke import parsed_dbt
from runner.discover import discover_each
from runner.errors import CdcError, TransientError
from runner.ingest import landing_roots
from runner.invocation import Invocation, recorded_run
from runner.maintain import MaintainResult, maintain_if_due
from runner.run import RunResult, run
from runner.summary import EntitySummary, summarize

log = logging.getLogger("runner.watch")

#: A batch that failed is tried again, with nothing new, after this many seconds.
RETRY_SECONDS = 60.0
#: After a change in a watched folder, the poll waits until the folder has been quiet this long
#: (a File still being written keeps it busy), and never longer than the poll interval.
QUIET_SECONDS = 0.2


@dataclass
class Batch:
    """One batch of a watch: its run's process id, what it did, or the error that ended it."""

    process_id: str
    result: RunResult | None = None
    error: str | None = None
    seconds: float = 0.0
    entities: list[EntitySummary] = field(default_factory=list)
    maintained: MaintainResult | None = None  # runner.yml maintain_every, after the batch

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok


class Stop:
    """Set by SIGTERM or Ctrl-C: the batch running finishes and the loop ends. A second signal
    raises KeyboardInterrupt, which abandons the batch."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.wake = threading.Event()  # set by a signal or a change in a watched folder

    def install(self) -> None:
        """Take SIGTERM and SIGINT (again: starting Spark replaces the SIGINT handler)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._signalled)
            signal.signal(signal.SIGINT, self._signalled)

    def _signalled(self, signum: int, _frame: Any) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()  # first: a second signal during the log line below is a second one
        self.wake.set()
        log.warning("%s: stopping after the current batch", signal.Signals(signum).name)

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> None:
        """Wait ``seconds``, or less: until stopped, or until a watched folder changed and then
        stayed quiet for QUIET_SECONDS."""
        deadline = time.monotonic() + seconds
        woken = self.wake.wait(seconds)
        while woken and not self.event.is_set():
            self.wake.clear()
            left = deadline - time.monotonic()
            woken = left > 0 and self.wake.wait(min(QUIET_SECONDS, left))
        self.wake.clear()


class Changes:
    """Sets ``wake`` whenever something is written, moved or removed under the local folders
    among ``roots`` (a thread of watchdog's, inotify on Linux). A root it cannot watch (a URI,
    a folder not there yet) is polled only, as before; so are the folders past the system's
    limit on watches (watchdog watches what fits and says nothing)."""

    def __init__(self, roots: list[Any], wake: threading.Event) -> None:
        self.roots = [r for r in roots if isinstance(r, Path)]
        self.wake = wake
        self.watched: list[Path] = []
        self._observer: Any = None

    def start(self) -> Changes:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        wake = self.wake

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                if event.event_type not in ("opened", "closed_no_write"):
                    wake.set()

        observer = Observer()
        for root in self.roots:
            if root.is_dir():
                observer.schedule(_Handler(), str(root), recursive=True)
                self.watched.append(root)
        if self.watched:
            observer.daemon = True
            try:  # the watches are added here, not by schedule()
                observer.start()
            except OSError as exc:
                log.warning("landing folders not watched for changes (%s); polled only", exc)
                with contextlib.suppress(Exception):
                    observer.unschedule_all()
                self.watched = []
                return self
            self._observer = observer
        return self

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None


class _Poll:
    """What a poll sees: Files not registered yet, and the Files waiting for a stage or an
    apply (PENDING, STAGED) of the chosen entities."""

    def __init__(
        self,
        inv: Invocation,
        landing: list[str] | None,
        entity_names: list[str] | None,
        min_age_seconds: float,
    ) -> None:
        self.inv = inv
        entities = inv.entities
        self.entities = [entities[n] for n in (entity_names or sorted(entities))]
        self.roots = landing_roots(inv.project, landing)
        self.min_age_seconds = min_age_seconds

    def new_files(self) -> int:
        db, new = self.inv.db, 0
        listed = discover_each(self.entities, self.roots, min_age_seconds=self.min_age_seconds)
        for entity in self.entities:
            files, _ = listed[entity.name]
            seen = db.sightings(entity.name, (str(f.path) for f in files))
            new += sum((str(f.path), f.size, f.mtime) not in seen for f in files)
        return new

    def waiting(self) -> set[int]:
        names = {e.name for e in self.entities}
        return {f.id for f in self.inv.db.files(states=["PENDING", "STAGED"]) if f.entity in names}


def watch(
    inv: Invocation,
    *,
    interval: float,
    stop: Stop,
    report: Callable[[Batch], None],
    dbt_args: list[str] | None = None,
    max_batches: int | None = None,
    **ingest_args: Any,
) -> list[Batch]:
    """Poll every ``interval`` seconds (sooner when a watched folder changes) until ``stop`` (or
    ``max_batches`` batches); run a batch when a File is new, when Files wait that the last
    batch did not see, and, after a failed batch, every RETRY_SECONDS. ``ingest_args``: as
    `runner run` takes them (landing, entity_names, min_age_seconds, settle_seconds,
    effective_date)."""
    landing = ingest_args.get("landing")
    entity_names = ingest_args.get("entity_names")
    min_age_seconds = float(ingest_args.get("min_age_seconds") or 0.0)
    poll = _Poll(inv, landing, entity_names, min_age_seconds)
    changes = Changes(poll.roots, stop.wake).start()
    try:
        return _loop(inv, poll, interval, stop, report, dbt_args, max_batches, ingest_args)
    finally:
        changes.close()


def _loop(
    inv: Invocation,
    poll: _Poll,
    interval: float,
    stop: Stop,
    report: Callable[[Batch], None],
    dbt_args: list[str] | None,
    max_batches: int | None,
    ingest_args: dict[str, Any],
) -> list[Batch]:
    batches: list[Batch] = []
    seen: set[int] | None = None  # the Files waiting after the last batch
    failed_at: float | None = None  # when the last batch failed
    dbt_runner: Any = None
    while not stop.is_set() and (max_batches is None or len(batches) < max_batches):
        waiting = poll.waiting()
        retry = failed_at is not None and time.monotonic() - failed_at >= RETRY_SECONDS
        try:
            new = poll.new_files()
        except TransientError as exc:  # a landing root in object storage did not answer
            log.warning("%s; polling again", exc.message)
            new = 0
        if new or (waiting and (seen is None or waiting - seen)) or retry:
            if dbt_runner is None:
                dbt_runner = parsed_dbt(inv.project)
            batch = _batch(inv, dbt_runner, dbt_args=dbt_args, **ingest_args)
            batches.append(batch)
            report(batch)
            stop.install()
            seen = poll.waiting()
            failed_at = None if batch.ok else time.monotonic()
        inv.close()  # the Audit DB's connections; the SparkSession stays
        if not stop.is_set():
            stop.wait(interval)
    return batches


def _batch(inv: Invocation, dbt_runner: Any, **kwargs: Any) -> Batch:
    started = time.perf_counter()
    batch = Batch(process_id="")
    try:
        with recorded_run(inv, "run") as rec:
            batch.process_id = rec.process_id
            try:
                batch.result = run(
                    rec.inv, rec.process_id, recover=False, dbt_runner=dbt_runner, **kwargs
                )
                rec.outcome = "ok" if batch.result.ok else "failed"
            except KeyboardInterrupt:
                rec.outcome = "aborted"
                _release(inv, rec.process_id)
                raise
            finally:
                batch.entities = summarize(rec.db, rec.process_id)
    except Exception as exc:  # reported, and the loop goes on
        log.debug("batch %s failed", batch.process_id, exc_info=exc)
        if isinstance(exc, CdcError):
            batch.error = exc.message
        else:
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            batch.error = f"{type(exc).__name__}: {text}"
    if batch.ok:
        try:
            batch.maintained = maintain_if_due(inv)
        except Exception as exc:  # noqa: BLE001 - said; the batch itself succeeded
            log.warning("maintenance after batch %s failed: %s", batch.process_id, exc)
    batch.seconds = time.perf_counter() - started
    return batch


def _release(inv: Invocation, process_id: str) -> None:
    """Give back the Files this batch holds, uncounted: it was stopped, they did nothing."""
    db = inv.db
    for f in db.files(states=["PROCESSING"]):
        if f.lease_owner == process_id:
            try:
                db.release(f.id, process_id, "runner run --watch stopped")
            except Exception:  # noqa: BLE001 - the next run's recovery gives it back
                log.debug("could not release File %s", f.id, exc_info=True)
