"""The `runner` CLI skeleton, run as a real console script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.project import REPO, make_project

from audit import AuditDB, utcnow
from runner import status
from runner.ids import new_process_id

RUNNER = str(Path(sys.executable).parent / "runner")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RUNNER, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = run("--help", cwd=tmp_path)
    assert out.returncode == 0
    for word in ("status", "audit", "--project-dir", "--target", "--audit-url"):
        assert word in out.stdout


def test_status_json_is_an_empty_array_on_a_new_project(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    out = run("status", "--json", cwd=root)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    assert (root / ".cdc" / "local" / "audit.db").exists(), "default Audit DB: SQLite per target"


def test_status_json_lists_every_file_with_the_documented_keys(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    url = f"sqlite:///{root / '.cdc' / 'local' / 'audit.db'}"
    db = AuditDB(url)
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "test", "local")
    first = db.register_file(
        entity="customers",
        path="/l/a.csv",
        size=5,
        mtime=utcnow(),
        content_hash="a" * 64,
        process_id=pid,
    ).file
    db.register_file(
        entity="customers",
        path="/l/b.csv",
        size=5,
        mtime=utcnow(),
        content_hash="a" * 64,
        process_id=pid,
    )
    # under the project's landing root, with a long name and a reason of two lines
    long_name = "customers/2026/03/01/" + "x" * 90 + "/20260301-081300000.csv"
    bad = db.register_file(
        entity="customers",
        path=str(root / "landing" / long_name),
        size=5,
        mtime=utcnow(),
        content_hash="b" * 64,
        process_id=pid,
    ).file
    db.claim(first.id, pid)
    db.mark_staged(first.id, pid, pid)
    db.claim(bad.id, pid)
    db.quarantine(bad.id, pid, "line 3, column 2: 'x' is not an integer\nmore detail")
    records = db.files()
    db.dispose()
    out = run("--project-dir", str(root), "status", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["path"], r["state"]) for r in rows] == [
        ("/l/a.csv", "STAGED"),
        ("/l/b.csv", "DUPLICATE"),
        (str(root / "landing" / long_name), "QUARANTINED"),
    ]
    required = {"path", "entity", "content_hash", "state", "attempts", "last_error", "process_id"}
    assert all(required <= set(r) for r in rows)
    assert rows[0]["process_id"] == pid and rows[0]["attempts"] == 1

    # One line per entity (piped: nothing cut): customers has none committed, one waiting
    # (seconds old), one quarantined with its File under the landing root and its reason's
    # first line; a declared entity without Files is there too.
    table = run("--project-dir", str(root), "status", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = ["entity", "committed", "waiting", "(oldest)", "quarantined", "failed", "last"]
    assert lines[0].split() == [*header, "commit"], lines[0]
    entity_line = next(line for line in lines if line.startswith("customers "))
    assert re.fullmatch(r"customers +0 +1 \(\d+s\) +1 +0 +never", entity_line), entity_line
    assert f"  quarantined: {long_name}: line 3, column 2: 'x' is not an integer" in lines
    assert any(re.fullmatch(r"accounts +0 +0 +0 +0 +never", line) for line in lines), lines
    unknown = run("--project-dir", str(root), "status", "--entity", "custmers", cwd=tmp_path)
    assert unknown.returncode == 2 and "no entity 'custmers'" in unknown.stderr, unknown.stderr
    files = run("--project-dir", str(root), "status", "--files", cwd=tmp_path).stdout
    assert re.search(r"^ *2 +customers +DUPLICATE +0 +\d+s +/l/b\.csv$", files, re.M), files
    assert f"  {long_name}" in files, files  # relative to the landing root

    # At 80 columns (a terminal's width): nothing longer; the long path cut in its folder's
    # middle keeps the folder's start and the File's name.
    now = utcnow()
    show = status.relative_to(status.landing_prefixes(root, ["landing"]), records)
    declared = ["accounts", "customers", "order_lines", "orders", "shop_transactions"]
    per_entity = status.entity_lines(status.by_entity(records, declared), now, 80, show)
    assert [line.split()[0] for line in per_entity if not line.startswith(" ")] == [
        "entity",
        *declared,
    ]
    for lines in (per_entity, status.file_lines(records, {}, now, 80, show)):
        assert all(len(line) <= 80 for line in lines), lines
    cut = status.file_lines(records, {}, now, 80, show)[3]
    assert len(cut) == 80 and re.search(r"  cust[\w/]*\.\.\.x+/20260301-081300000\.csv$", cut), cut


def test_errors_are_one_line_with_exit_2_and_traceback_only_with_debug(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    out = run("--target", "nowhere", "status", cwd=root)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "no target 'nowhere'" in out.stderr and "Traceback" not in out.stderr
    debug = run("--debug", "--target", "nowhere", "status", cwd=root)
    assert debug.returncode == 2 and "Traceback" in debug.stderr  # the same exit code
    unexpected = run(
        "--debug", "--audit-url", "postgresql+psycopg2://nobody@127.0.0.1:1/x", "status", cwd=root
    )
    assert unexpected.returncode == 2 and "Traceback" in unexpected.stderr
    usage = run("status", "--no-such-flag", cwd=root)
    assert usage.returncode == 2


def test_global_options_work_after_every_command_as_with_dbt(tmp_path: Path) -> None:
    """`runner COMMAND --target T` (dbt's habit) and `runner --target T COMMAND` both work, for
    every command; given after the command, the option wins."""
    root = make_project(tmp_path / "repo")
    for args in (
        ["status", "--json"],
        ["reconcile"],
        ["retry", "--failed"],
        ["audit", "upgrade"],
    ):
        after = run(*args, "--target", "nowhere", cwd=root)
        assert after.returncode == 2 and "no target 'nowhere'" in after.stderr, (args, after)
        short = run(*args, "-t", "nowhere", cwd=root)
        assert short.returncode == 2 and "no target 'nowhere'" in short.stderr, (args, short)
        wins = run("--target", "local", *args, "--target", "nowhere", cwd=root)
        assert wins.returncode == 2 and "no target 'nowhere'" in wins.stderr, (args, wins)
        before = run("--target", "local", *args, cwd=root)
        assert before.returncode == 0, (args, before.stderr)
    for command in ("ingest", "run", "generate"):
        usage = run(command, "--help", cwd=root)
        assert "--target" in usage.stdout and "--project-dir" in usage.stdout
    elsewhere = run("status", "--json", "--project-dir", str(root), cwd=tmp_path)
    assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout) == []
    debug = run("status", "--target", "nowhere", "--debug", cwd=root)
    assert debug.returncode == 2 and "Traceback" in debug.stderr


def test_missing_profile_says_how_to_create_it(tmp_path: Path) -> None:
    out = run("--project-dir", str(tmp_path), "status", cwd=tmp_path)
    assert out.returncode == 2 and "make setup" in out.stderr


@pytest.mark.postgres
def test_postgres_target_keeps_its_audit_db_on_the_same_server(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    root = make_project(tmp_path / "repo")
    up = run("--target", "postgres", "--audit-schema", pg_schema, "audit", "upgrade", cwd=root)
    assert up.returncode == 0, up.stderr
    newest = max(p.name[:4] for p in (REPO / "audit" / "migrations" / "versions").glob("0*.py"))
    assert f"schema {pg_schema}" in up.stdout and f"revision {newest}" in up.stdout
    db = AuditDB(pg_url, schema=pg_schema)
    assert db.current_revision() == newest
    db.dispose()
    out = run("--target", "postgres", "--audit-schema", pg_schema, "status", "--json", cwd=root)
    assert out.returncode == 0 and json.loads(out.stdout) == []


def test_audit_url_password_never_reaches_output(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    secret = "s3cr3t-pw"
    out = run(
        "--audit-url",
        f"postgresql+psycopg2://someone:{secret}@127.0.0.1:1/x",
        "audit",
        "upgrade",
        cwd=root,
    )
    assert out.returncode == 2
    assert secret not in out.stdout + out.stderr


def test_retry_puts_failed_and_quarantined_files_back_with_an_event(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    db = AuditDB(f"sqlite:///{root / '.cdc' / 'local' / 'audit.db'}", max_attempts=1)
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "test", "local")
    ids = {}
    for name, digit in (("failed", "1"), ("bad", "2"), ("staged", "3"), ("failed2", "4")):
        rec = db.register_file(
            entity="orders" if name == "failed2" else "customers",
            path=f"/l/{name}.csv",
            size=1,
            mtime=utcnow(),
            content_hash=digit * 64,
            process_id=pid,
        ).file
        db.claim(rec.id, pid)
        ids[name] = rec.id
    db.record_failure(ids["failed"], pid, "boom")
    db.record_failure(ids["failed2"], pid, "boom")
    db.quarantine(ids["bad"], pid, "bad.csv: line 2, ...")
    db.mark_staged(ids["staged"], pid, pid)
    assert {f.id: f.state for f in db.files()}[ids["failed"]] == "FAILED"

    nothing = run("retry", cwd=root)
    assert nothing.returncode == 2 and "--failed" in nothing.stderr
    staged = run("retry", str(ids["staged"]), cwd=root)
    assert staged.returncode == 2 and "is STAGED" in staged.stderr
    out = run("retry", "--failed", "--entity", "customers", "/l/bad.csv", cwd=root)
    assert out.returncode == 0, out.stderr
    assert "2 File(s) back to PENDING" in out.stdout
    states = {f.id: (f.state, f.attempts) for f in db.files()}
    assert states[ids["failed"]] == ("PENDING", 0) and states[ids["bad"]] == ("PENDING", 0)
    assert states[ids["failed2"]][0] == "FAILED"  # another entity: left alone
    by_hash = run("retry", "44444444", cwd=root)  # a content hash prefix
    assert by_hash.returncode == 0 and db.get(ids["failed2"]).state == "PENDING"
    last = db.events(ids["bad"])[-1]
    assert (last["from_state"], last["to_state"]) == ("QUARANTINED", "PENDING")
    assert "runner retry" in last["detail"]
    db.dispose()


def test_bigquery_target_with_no_emulator_running_says_how_to_start_it(tmp_path: Path) -> None:
    """Google's client would retry a refused connection for ten minutes: a local endpoint that
    does not answer is one readable line, at once, naming `make bq-up`."""
    import os
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = make_project(tmp_path / "repo")
    env = dict(os.environ, CDC_BQ_ENDPOINT=f"http://127.0.0.1:{port}", CDC_HOME=str(root))
    for command in ("ingest", "reconcile"):
        out = subprocess.run(
            [RUNNER, command, "--target", "bigquery"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2, out.stderr
        assert "does not answer" in out.stderr and "make bq-up" in out.stderr, out.stderr
        assert out.stderr.strip().count("\n") == 0, out.stderr


def test_times_read_as_a_person_reads_them() -> None:
    """Durations in their largest units, source commit times (epoch ms) as UTC timestamps."""
    said = {ms: status.duration_ms(ms) for ms in (3, 59_999, 60_000, 3_660_000, 90_000_000)}
    assert said == {3: "3 ms", 59_999: "59 s", 60_000: "1 min", 3_660_000: "1 h 1 min",
                    90_000_000: "1 d 1 h"}  # fmt: skip
    assert status.source_time(1_770_000_022_003) == "2026-02-02 02:40:22.003 UTC"
