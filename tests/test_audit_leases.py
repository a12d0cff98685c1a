"""Leases under real concurrency: separate OS processes racing on one Audit DB."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections import Counter
from pathlib import Path

import pytest

from audit import AuditDB, IllegalTransition, utcnow
from audit.store import HEAD_REVISION
from runner.ids import new_process_id

WORKERS = 4


def _race_worker(url: str, schema: str | None, file_ids: list[int], barrier, results) -> None:
    db = AuditDB(url, schema=schema)
    owner = new_process_id()
    db.start_run(owner, "race", None)
    for file_id in file_ids:
        barrier.wait(timeout=60)  # everybody claims the same File at the same moment
        try:
            db.claim(file_id, owner)
            results.put((file_id, owner, True))
        except IllegalTransition:
            results.put((file_id, owner, False))
    db.dispose()


def _drain_worker(url: str, schema: str | None, barrier, results) -> None:
    db = AuditDB(url, schema=schema)
    owner = new_process_id()
    db.start_run(owner, "drain", None)
    barrier.wait(timeout=60)
    while True:
        batch = db.claim_pending(owner, limit=3)
        if not batch:
            break
        for record in batch:
            results.put((record.id, owner))
            db.mark_staged(record.id, owner, owner)
    db.dispose()


def _register(db: AuditDB, n: int) -> list[int]:
    pid = new_process_id()
    db.start_run(pid, "test", None)
    return [
        db.register_file(
            entity="customers",
            path=f"/landing/customers/{i}.csv",
            size=1,
            mtime=utcnow(),
            content_hash=f"{i:064x}",
            process_id=pid,
        ).file.id
        for i in range(n)
    ]


def _run(target, args_list) -> None:
    procs = [mp.get_context("spawn").Process(target=target, args=args) for args in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


def test_exactly_one_of_concurrent_claimers_wins(audit_url: tuple[str, str | None]) -> None:
    url, schema = audit_url
    db = AuditDB(url, schema=schema)
    file_ids = _register(db, 8)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    _run(_race_worker, [(url, schema, file_ids, barrier, results)] * WORKERS)
    outcomes = [results.get(timeout=10) for _ in range(WORKERS * len(file_ids))]
    winners = Counter(file_id for file_id, _, won in outcomes if won)
    assert winners == Counter({file_id: 1 for file_id in file_ids})
    for file_id in file_ids:
        record = db.get(file_id)
        owner = next(o for f, o, won in outcomes if f == file_id and won)
        assert (record.state, record.lease_owner, record.attempts) == ("PROCESSING", owner, 1)
    db.dispose()


def test_concurrent_workers_drain_the_queue_without_overlap(
    audit_url: tuple[str, str | None],
) -> None:
    url, schema = audit_url
    db = AuditDB(url, schema=schema)
    file_ids = _register(db, 60)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    _run(_drain_worker, [(url, schema, barrier, results)] * WORKERS)
    claims = []
    while True:  # workers have exited; read until the queue stays empty
        try:
            claims.append(results.get(timeout=3))
        except queue.Empty:
            break
    claimed_ids = [file_id for file_id, _ in claims]
    assert sorted(claimed_ids) == sorted(file_ids), "every File claimed exactly once"
    assert all(db.get(i).state == "STAGED" and db.get(i).attempts == 1 for i in file_ids)
    db.dispose()


def _migrate_worker(url: str, schema: str | None, barrier) -> None:
    db = AuditDB(url, schema=schema)
    barrier.wait(timeout=60)  # every runner finds the new Audit DB empty at the same moment
    db.ensure_current()
    db.dispose()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_runners_starting_together_on_a_new_audit_db_build_it_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ctx = mp.get_context("spawn")
    # SQLite's races are timing's (tried twice); PostgreSQL's advisory lock settles its own.
    for attempt in range(2 if backend == "sqlite" else 1):
        if backend == "sqlite":
            url, schema = f"sqlite:///{tmp_path / f'audit{attempt}.db'}", None
        else:
            url = request.getfixturevalue("pg_url")
            schema = request.getfixturevalue("pg_schema")
        _run(_migrate_worker, [(url, schema, ctx.Barrier(WORKERS))] * WORKERS)
        db = AuditDB(url, schema=schema)
        assert db.current_revision() == HEAD_REVISION
        db.dispose()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
