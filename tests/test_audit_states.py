"""The Audit DB state machine, on SQLite and on PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
import sqlalchemy as sa

from audit import AuditDB, FileState, IllegalTransition, utcnow
from audit.models import files as files_table
from audit.models import runs as runs_table
from audit.store import HEAD_REVISION
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


def _die_holding(audit_url: tuple[str, str | None], file_ids: list[int]) -> str:
    """A real process that starts a run, claims ``file_ids`` and is killed: its process id."""
    url, schema = audit_url
    code = (
        "import os, signal, sys\n"
        "from audit import AuditDB\n"
        "from runner.ids import new_process_id\n"
        f"db = AuditDB({url!r}, schema={schema!r})\n"
        "pid = new_process_id()\n"
        "db.start_run(pid, 'ingest', 'local')\n"
        f"for i in {file_ids!r}:\n"
        "    db.claim(i, pid)\n"
        "print(pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    return out.stdout.strip()


def test_a_dead_runs_files_come_back_at_once_and_uncounted_when_not_pinned(
    audit_db: AuditDB, audit_url: tuple[str, str | None]
) -> None:
    a = register(audit_db, "/landing/customers/a.csv", "d" * 64)
    b = register(audit_db, "/landing/customers/b.csv", "e" * 64)
    dead = _die_holding(audit_url, [a, b])
    me = new_process_id()
    audit_db.start_run(me, "ingest", "local")
    recovery = audit_db.recover(me)  # no waiting: the lease (60 s) has not expired
    assert recovery.aborted_runs == [dead]
    assert sorted(r.id for r in recovery.reclaimed) == [a, b]
    for file_id in (a, b):
        rec = audit_db.get(file_id)
        # Two Files were in flight: the crash cannot be pinned on either.
        assert (rec.state, rec.attempts, rec.lapses) == ("PENDING", 0, 1)
        assert "not counted" in (rec.last_error or "")
    run = next(r for r in audit_db.runs() if r["process_id"] == dead)
    assert run["outcome"] == "aborted" and run["ended_at"] is not None
    assert audit_db.recover(me).reclaimed == []  # nothing twice


def test_a_file_that_kills_every_run_alone_ends_failed(
    audit_db: AuditDB, audit_url: tuple[str, str | None]
) -> None:
    poison = register(audit_db, "/landing/customers/poison.csv", "f" * 64)
    me = new_process_id()
    audit_db.start_run(me, "ingest", "local")
    states = []
    for _ in range(audit_db.max_attempts):
        _die_holding(audit_url, [poison])  # the only File in flight: pinned on it
        states.append(audit_db.recover(me).reclaimed[0].state)
    assert states == ["PENDING"] * (audit_db.max_attempts - 1) + ["FAILED"]
    final = audit_db.get(poison)
    assert final.attempts == audit_db.max_attempts and "only this File" in final.last_error


def test_expired_leases_and_silent_runs_elsewhere_are_reclaimed(audit_db: AuditDB) -> None:
    expired_id = register(audit_db, "/landing/customers/a.csv", "1" * 64)
    live_id = register(audit_db, "/landing/customers/b.csv", "2" * 64)
    owner = new_process_id()
    audit_db.start_run(owner, "ingest", "local")  # this very process: alive
    audit_db.claim(expired_id, owner, lease_seconds=5)
    audit_db.claim(live_id, owner, lease_seconds=3600)
    later = utcnow() + timedelta(seconds=30)
    reclaimed = audit_db.recover(new_process_id(), now=later).reclaimed
    assert [r.id for r in reclaimed] == [expired_id]
    assert audit_db.get(expired_id).state == "PENDING"
    assert audit_db.get(live_id).state == "PROCESSING"
    assert audit_db.heartbeat(owner) == 1  # the live lease is renewed; the lost one is not
    # A run on another host cannot be checked for its process: its heartbeat decides.
    with audit_db.engine.begin() as conn:
        conn.execute(
            sa.update(runs_table)
            .where(runs_table.c.process_id == owner)
            .values(host="another-host", heartbeat_at=utcnow())
        )
    assert audit_db.recover(new_process_id()).aborted_runs == []
    much_later = utcnow() + timedelta(seconds=audit_db.lease_seconds + 5000)
    recovery = audit_db.recover(new_process_id(), now=much_later)
    assert recovery.aborted_runs == [owner]
    assert [r.id for r in recovery.reclaimed] == [live_id]


def test_release_gives_the_attempt_back(audit_db: AuditDB) -> None:
    file_id = register(audit_db, "/landing/customers/a.csv", "3" * 64)
    owner = new_process_id()
    audit_db.start_run(owner, "ingest", "local")
    for _ in range(audit_db.max_attempts + 1):  # more than max_attempts: never FAILED
        audit_db.claim(file_id, owner)
        rec = audit_db.release(file_id, owner, "connection refused")
    assert (rec.state, rec.attempts, rec.lapses) == ("PENDING", 0, 0)


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


def test_files_registered_together_get_what_one_by_one_gives(audit_db: AuditDB) -> None:
    """register_files (one transaction): a copy of a File earlier in the same call is its
    DUPLICATE, a File already known is returned as it is, new content under an old path is a
    new File, and sightings() says which (path, size, mtime) are known, per entity."""
    original = register(audit_db, "/landing/customers/a.csv", "f" * 64)
    pid = new_process_id()
    audit_db.start_run(pid, "ingest", "local")
    when = utcnow()

    def entry(path: str, content: str, entity: str = "customers") -> dict:
        return dict(entity=entity, path=path, size=7, mtime=when, content_hash=content,
                    process_id=pid)  # fmt: skip

    regs = audit_db.register_files(
        [
            entry("/landing/customers/a.csv", "f" * 64),  # known: same path and bytes
            entry("/landing/customers/b.csv", "b" * 64),
            entry("/landing/customers/b-copy.csv", "b" * 64),  # a copy of the one before
            entry("/landing/customers/a.csv", "0" * 64),  # rewritten under an old path
            entry("/landing/orders/b.csv", "b" * 64, "orders"),  # another entity's
        ]
    )
    known, b, copy, rewritten, orders = regs
    assert (known.created, known.file.id) == (False, original)
    assert [r.created for r in regs[1:]] == [True, True, True, True]
    assert [r.file.state for r in regs[1:]] == ["PENDING", "DUPLICATE", "PENDING", "PENDING"]
    assert copy.file.duplicate_of == b.file.id
    assert audit_db.get(copy.file.id).state == "DUPLICATE"
    assert rewritten.file.id not in (original, b.file.id)
    assert [(e["from_state"], e["to_state"]) for e in audit_db.events(copy.file.id)] == [
        (None, "DUPLICATE")
    ]
    assert audit_db.events(copy.file.id)[0]["detail"] == (
        f"duplicate of File {b.file.id} (/landing/customers/b.csv)"
    )
    seen = audit_db.sightings(
        "customers", ["/landing/customers/a.csv", "/landing/customers/b.csv", "/landing/x.csv"]
    )
    a_first = audit_db.get(original)
    assert seen == {
        ("/landing/customers/a.csv", a_first.size, a_first.mtime),
        ("/landing/customers/a.csv", 7, when),
        ("/landing/customers/b.csv", 7, when),
    }
    assert audit_db.sightings("orders", ["/landing/customers/b.csv"]) == set()


def test_a_reload_file_rewritten_with_bytes_its_path_held_is_a_new_file_only_after_changes(
    audit_db: AuditDB,
) -> None:
    """With ``reloads`` (file order): a LOAD File rewritten at its path with bytes it held
    before is a new File naming the earlier one, once that one was staged and a change File
    was modified between the two sightings; two runs seeing the rewrite register it once; a
    rewrite with no change between, a change File's own rewrite, or an earlier File not staged
    yet is the earlier File seen again."""
    pid = new_process_id()
    audit_db.start_run(pid, "run", "local")
    day = utcnow() - timedelta(days=1)
    is_load = lambda name: name.startswith("LOAD")  # noqa: E731

    def sighting(path: str, content: str, minute: int, reloads: object = is_load) -> object:
        return audit_db.register_file(
            entity="customers", path=f"/landing/customers/{path}", size=7,
            mtime=day + timedelta(minutes=minute), content_hash=content, process_id=pid,
            reloads=reloads,
        )  # fmt: skip

    def staged(reg: object) -> None:
        audit_db.claim(reg.file.id, pid)  # type: ignore[attr-defined]
        audit_db.mark_staged(reg.file.id, pid, pid)  # type: ignore[attr-defined]

    load, pending = sighting("LOAD00000001.csv", "a" * 64, 0), sighting("LOAD2.csv", "c" * 64, 1)
    staged(load)
    assert sighting("LOAD00000001.csv", "a" * 64, 2).file.id == load.file.id  # no change between
    change = sighting("20260301-080000000.csv", "b" * 64, 3)
    staged(change)
    assert sighting("20260301-080000000.csv", "b" * 64, 9).file.id == change.file.id
    assert sighting("LOAD2.csv", "c" * 64, 9).file.id == pending.file.id  # never staged
    assert sighting("LOAD00000001.csv", "a" * 64, 9, reloads=None).file.id == load.file.id
    reload = sighting("LOAD00000001.csv", "a" * 64, 5)
    assert reload.created and reload.file.reload_of == load.file.id
    assert (reload.file.state, reload.file.duplicate_of) == ("PENDING", None)
    assert reload.file.content_hash not in ("a" * 64, load.file.content_hash)
    assert audit_db.events(reload.file.id)[0]["detail"] == (
        f"reload: the bytes of File {load.file.id} written at its path again, after change Files"
    )
    again = sighting("LOAD00000001.csv", "a" * 64, 5)  # another run, the same rewrite
    assert (again.created, again.file.id) == (False, reload.file.id)


def test_files_claimed_and_staged_together_keep_their_leases(audit_db: AuditDB) -> None:
    """claim_pending and mark_staged_many move many Files per statement: a File whose lease
    another run holds is neither staged nor returned, and each moved File has its event."""
    ids = [register(audit_db, f"/landing/customers/{i}.csv", f"{i:064x}") for i in range(4)]
    owner, other = new_process_id(), new_process_id()
    for pid in (owner, other):
        audit_db.start_run(pid, "ingest", "local")
    audit_db.claim(ids[3], other)
    claimed = audit_db.claim_pending(owner)
    assert [r.id for r in claimed] == ids[:3]
    assert {(r.state, r.lease_owner, r.attempts) for r in claimed} == {("PROCESSING", owner, 1)}
    staged = audit_db.mark_staged_many({i: f"note {i}" for i in ids}, owner, owner)
    assert [r.id for r in staged] == ids[:3]
    assert [audit_db.get(i).state for i in ids] == ["STAGED"] * 3 + ["PROCESSING"]
    assert audit_db.get(ids[3]).lease_owner == other
    history = [(e["from_state"], e["to_state"], e["detail"]) for e in audit_db.events(ids[0])]
    assert history == [
        (None, "PENDING", None),
        ("PENDING", "PROCESSING", None),
        ("PROCESSING", "STAGED", f"note {ids[0]}"),
    ]
    assert [e["to_state"] for e in audit_db.events(ids[3])] == ["PENDING", "PROCESSING"]


def test_files_committed_together_keep_their_marker_counts_and_skip_the_already_committed(
    audit_db: AuditDB,
) -> None:
    """mark_committed_many: each STAGED File COMMITTED with its event and its marker counts in
    one transaction; one another run committed since is left out; one in another state (here
    PENDING) raises and nothing of it changes."""
    ids = [register(audit_db, f"/landing/customers/{i}.csv", f"{i:064x}") for i in range(4)]
    pid = new_process_id()
    audit_db.start_run(pid, "run", "local")
    audit_db.claim_pending(pid)
    audit_db.mark_staged_many(dict.fromkeys(ids), pid, pid)
    audit_db.mark_committed(ids[2], pid)  # another runner was first

    def marker(i: int) -> dict[str, object]:
        return {"target_table": "cdc.customers", "rows_inserted": i + 1, "rows_updated": 2 * i}

    found = {i: (f"marker {i}", [marker(i)]) for i in ids[:3]}
    moved = audit_db.mark_committed_many(found, pid)
    assert [r.id for r in moved] == ids[:2]
    assert [audit_db.get(i).state for i in ids] == ["COMMITTED"] * 3 + ["STAGED"]
    history = [(e["from_state"], e["to_state"], e["detail"]) for e in audit_db.events(ids[1])]
    assert history[-1] == ("STAGED", "COMMITTED", f"marker {ids[1]}")
    kept = audit_db.file_markers()
    assert {i: [(m["rows_inserted"], m["rows_updated"]) for m in kept[i]] for i in kept} == {
        ids[0]: [(ids[0] + 1, 2 * ids[0])],
        ids[1]: [(ids[1] + 1, 2 * ids[1])],
    }
    late = register(audit_db, "/landing/customers/late.csv", "f" * 64)  # PENDING
    with pytest.raises(IllegalTransition) as caught:
        audit_db.mark_committed_many({late: (None, [marker(late)])}, pid)
    assert caught.value.actual == "PENDING"
    assert audit_db.get(late).state == "PENDING" and late not in audit_db.file_markers()


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
    table = files_table
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
    # A run reads the revision without Alembic and compares it with HEAD_REVISION.
    assert audit_db.current_revision() == audit_db.head_revision() == HEAD_REVISION


def _committed(db: AuditDB, path: str, content_hash: str, entity: str = "customers") -> int:
    file_id = register(db, path, content_hash, entity)
    pid = new_process_id()
    db.start_run(pid, "run", "local")
    db.claim(file_id, pid)
    db.mark_staged(file_id, pid, pid)
    db.mark_committed(file_id, pid)
    return file_id


def test_retention_picks_each_old_committed_file_of_the_entity_once(audit_db: AuditDB) -> None:
    """`runner maintain`'s choice: COMMITTED before the cutoff, of this entity, staged rows not
    yet removed; and the events pruned are the COMMITTED Files' older ones only."""
    first = _committed(audit_db, "/landing/customers/a.csv", "a" * 64)
    second = _committed(audit_db, "/landing/customers/b.csv", "b" * 64)
    _committed(audit_db, "/landing/orders/a.csv", "c" * 64, entity="orders")
    waiting = register(audit_db, "/landing/customers/c.csv", "d" * 64)  # PENDING
    later = utcnow() + timedelta(seconds=1)
    assert audit_db.retention_candidates("customers", utcnow() - timedelta(days=1)) == []
    picked = audit_db.retention_candidates("customers", later)
    assert [f.id for f in picked] == [first, second]
    audit_db.mark_staged_removed([first])
    assert [f.id for f in audit_db.retention_candidates("customers", later)] == [second]
    assert audit_db.get(first).state == "COMMITTED" and audit_db.get(first).staged_removed_at
    assert audit_db.prune_events(later, dry_run=True) == 12  # 4 events of each COMMITTED File
    assert audit_db.prune_events(utcnow() - timedelta(days=1)) == 0
    assert audit_db.prune_events(later) == 12
    assert audit_db.events(first) == [] and len(audit_db.events(waiting)) == 1


def test_two_runs_keeping_a_partly_applied_files_marker_at_once_keep_it_once(
    audit_db: AuditDB,
) -> None:
    """keep_markers (reconcile, a File applied to some of its targets): a second run keeping
    the same marker while the first one's transaction is still open waits for it and leaves its
    row; the first run keeps the counts (it applied them), and committing the File later adds
    only the targets not kept yet."""
    import threading

    (file_id,) = [register(audit_db, "/landing/customers/a.csv", "a" * 64)]
    first, second = new_process_id(), new_process_id()
    for pid in (first, second):
        audit_db.start_run(pid, "run", "local")
    audit_db.claim(file_id, first)
    audit_db.mark_staged(file_id, first, first)
    marker = {"target_table": "cdc.customers", "rows_inserted": 3, "invocation_id": "i1"}
    errors: list[BaseException] = []

    def keep_too() -> None:
        try:
            audit_db.keep_markers({file_id: [marker]}, second)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    other = threading.Thread(target=keep_too)
    with audit_db.engine.begin() as conn:  # the first run's transaction, open
        if audit_db.dialect == "sqlite":
            other.start()  # SQLite: it waits for the write lock
            audit_db._keep_markers(conn, file_id, first, [marker])
        else:
            audit_db._keep_markers(conn, file_id, first, [marker])
            other.start()  # PostgreSQL: its insert waits on the first one's key
        other.join(timeout=1)
        assert other.is_alive() or errors, "the second run did not wait"
    other.join(timeout=30)
    assert not errors, errors
    kept = audit_db.file_markers()[file_id]
    assert [(m["target_table"], m["rows_inserted"]) for m in kept] == [("cdc.customers", 3)]
    assert kept[0]["recorded_by"] == first
    history = {"target_table": "cdc.customers_changes_history", "rows_inserted": 5}
    audit_db.mark_committed_many({file_id: (None, [marker, history])}, second)
    kept = {m["target_table"]: m["recorded_by"] for m in audit_db.file_markers()[file_id]}
    assert kept == {"cdc.customers": first, "cdc.customers_changes_history": second}
