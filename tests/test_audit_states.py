"""The Audit DB state machine, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from audit import AuditDB, FileState, IllegalTransition, utcnow
from audit.models import AuditFile
from runner.ids import new_process_id

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def register(db: AuditDB, path: str, content_hash: str, entity: str = "customers") -> int:
    pid = new_process_id()
    db.start_run(pid, "test", "local")
    reg = db.register_file(
        entity=entity,
        path=path,
        size=10,
        mtime=utcnow(),
        content_hash=content_hash,
        process_id=pid,
    )
    return reg.file.id


def test_happy_path_pending_to_committed(audit_db: AuditDB) -> None:
    file_id = register(audit_db, "/landing/customers/a.csv", "h" * 64)
    assert audit_db.get(file_id).state == FileState.PENDING
    pid = new_process_id()
    audit_db.start_run(pid, "ingest", "local")
    claimed = audit_db.claim(file_id, pid)
    assert (claimed.state, claimed.lease_owner, claimed.attempts) == ("PROCESSING", pid, 1)
    assert claimed.lease_expires_at is not None and claimed.lease_expires_at > utcnow()
    staged = audit_db.mark_staged(file_id, pid, pid)
    assert (staged.state, staged.staged_by, staged.lease_owner) == ("STAGED", pid, None)
    committed = audit_db.mark_committed(file_id, pid)
    assert committed.state == "COMMITTED" and committed.committed_at is not None
    history = [(e["from_state"], e["to_state"]) for e in audit_db.events(file_id)]
    assert history == [
        (None, "PENDING"),
        ("PENDING", "PROCESSING"),
        ("PROCESSING", "STAGED"),
        ("STAGED", "COMMITTED"),
    ]


@pytest.mark.parametrize(
    ("prepare", "transition"),
    [
        ([], "mark_staged"),  # PENDING cannot be STAGED without a claim
        ([], "mark_committed"),  # nor COMMITTED
        (["claim"], "claim"),  # PROCESSING cannot be claimed again
        (["claim", "mark_staged"], "quarantine"),  # STAGED is past validation
        (["claim", "mark_staged", "mark_committed"], "record_failure"),
        (["claim", "mark_staged", "mark_committed"], "mark_committed"),
    ],
)
def test_illegal_transitions_raise_and_change_nothing(
    audit_db: AuditDB, prepare: list[str], transition: str
) -> None:
    file_id = register(audit_db, "/landing/customers/a.csv", "a" * 64)
    owner = new_process_id()
    audit_db.start_run(owner, "ingest", "local")
    steps = {
        "claim": lambda: audit_db.claim(file_id, owner),
        "mark_staged": lambda: audit_db.mark_staged(file_id, owner, owner),
        "mark_committed": lambda: audit_db.mark_committed(file_id, owner),
        "quarantine": lambda: audit_db.quarantine(file_id, owner, "bad"),
        "record_failure": lambda: audit_db.record_failure(file_id, owner, "boom"),
    }
    for step in prepare:
        steps[step]()
    before = audit_db.get(file_id)
    events_before = len(audit_db.events(file_id))
    with pytest.raises(IllegalTransition) as err:
        steps[transition]()
    assert err.value.actual == before.state
    after = audit_db.get(file_id)
    assert (after.state, after.attempts, after.updated_at) == (
        before.state,
        before.attempts,
        before.updated_at,
    )
    assert len(audit_db.events(file_id)) == events_before


def test_only_the_lease_owner_may_finish_a_file(audit_db: AuditDB) -> None:
    file_id = register(audit_db, "/landing/customers/a.csv", "b" * 64)
    owner, intruder = new_process_id(), new_process_id()
    for pid in (owner, intruder):
        audit_db.start_run(pid, "ingest", "local")
    audit_db.claim(file_id, owner)
    for attempt in (
        lambda: audit_db.mark_staged(file_id, intruder, intruder),
        lambda: audit_db.quarantine(file_id, intruder, "x"),
        lambda: audit_db.record_failure(file_id, intruder, "x"),
    ):
        with pytest.raises(IllegalTransition):
            attempt()
    assert audit_db.get(file_id).state == "PROCESSING"


def test_failures_retry_until_max_attempts_then_fail_with_last_error(audit_db: AuditDB) -> None:
    file_id = register(audit_db, "/landing/customers/a.csv", "c" * 64)
    owner = new_process_id()
    audit_db.start_run(owner, "ingest", "local")
    states = []
    for n in range(1, audit_db.max_attempts + 1):
        audit_db.claim(file_id, owner)
        states.append(audit_db.record_failure(file_id, owner, f"error {n}").state)
    assert states == ["PENDING"] * (audit_db.max_attempts - 1) + ["FAILED"]
    final = audit_db.get(file_id)
    assert (final.attempts, final.last_error) == (
        audit_db.max_attempts,
        f"error {audit_db.max_attempts}",
    )
    with pytest.raises(IllegalTransition):
        audit_db.claim(file_id, owner)
    assert audit_db.requeue(file_id, owner, "operator retry").state == "PENDING"
    assert audit_db.get(file_id).attempts == 0


def test_expired_leases_are_reclaimed_and_count_as_attempts(audit_db: AuditDB) -> None:
    expired_id = register(audit_db, "/landing/customers/a.csv", "d" * 64)
    live_id = register(audit_db, "/landing/customers/b.csv", "e" * 64)
    owner = new_process_id()
    audit_db.start_run(owner, "ingest", "local")
    audit_db.claim(expired_id, owner, lease_seconds=5)
    audit_db.claim(live_id, owner, lease_seconds=3600)
    reclaimed = audit_db.reclaim_expired(now=utcnow() + timedelta(seconds=60))
    assert [r.id for r in reclaimed] == [expired_id]
    assert audit_db.get(expired_id).state == "PENDING"
    assert "lease expired" in (audit_db.get(expired_id).last_error or "")
    assert audit_db.get(live_id).state == "PROCESSING"
    # A crash on every attempt: the File ends FAILED rather than looping forever.
    for _ in range(audit_db.max_attempts - 1):
        audit_db.claim(expired_id, owner, lease_seconds=5)
        audit_db.reclaim_expired(now=utcnow() + timedelta(seconds=60))
    final = audit_db.get(expired_id)
    assert (final.state, final.attempts) == ("FAILED", audit_db.max_attempts)


def test_same_content_is_a_duplicate_and_new_content_under_old_path_is_new(
    audit_db: AuditDB,
) -> None:
    original = register(audit_db, "/landing/customers/a.csv", "f" * 64)
    copy = register(audit_db, "/landing/customers/copy-of-a.csv", "f" * 64)
    again = register(audit_db, "/landing/customers/a.csv", "f" * 64)
    rewritten = register(audit_db, "/landing/customers/a.csv", "0" * 64)
    other_entity = register(audit_db, "/landing/orders/a.csv", "f" * 64, entity="orders")
    assert audit_db.get(copy).state == "DUPLICATE"
    assert audit_db.get(copy).duplicate_of == original
    assert again == original, "the same path and bytes seen again is the same File"
    assert audit_db.get(rewritten).state == "PENDING" and rewritten != original
    assert audit_db.get(other_entity).state == "PENDING"


def test_unique_constraint_forbids_registering_same_content_twice(audit_db: AuditDB) -> None:
    """Bypassing register_file: the database itself refuses a second original."""
    pid = new_process_id()
    audit_db.start_run(pid, "test", None)
    now = utcnow()
    row = dict(
        entity="customers",
        size=1,
        mtime=now,
        content_hash="9" * 64,
        state="PENDING",
        attempts=0,
        registered_by=pid,
        created_at=now,
        updated_at=now,
    )
    table = AuditFile.__table__
    with audit_db.engine.begin() as conn:
        conn.execute(sa.insert(table).values(path="/a.csv", **row))
    with pytest.raises(sa.exc.IntegrityError), audit_db.engine.begin() as conn:
        conn.execute(sa.insert(table).values(path="/b.csv", **row))
    # And a DUPLICATE must point at its original.
    with pytest.raises(sa.exc.IntegrityError), audit_db.engine.begin() as conn:
        conn.execute(sa.insert(table).values(path="/c.csv", **{**row, "state": "DUPLICATE"}))


def test_migrations_build_exactly_the_models(audit_db: AuditDB) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from audit.models import metadata

    with audit_db.engine.connect() as conn:
        if audit_db.schema:  # compare inside the Audit DB's own schema
            conn.execute(sa.text(f'SET search_path TO "{audit_db.schema}"'))
        ctx = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": False,
                "version_table_schema": audit_db.schema,
                "compare_type": True,
                "include_name": lambda name, kind, _: name != "alembic_version",
            },
        )
        diff = compare_metadata(ctx, metadata)
    assert diff == []
    assert audit_db.current_revision() == audit_db.head_revision()
