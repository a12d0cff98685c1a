"""Two `dbt build`s applying one table at the same time (one scheduled, one started by hand):
each File is applied once, with one marker, and the table equals the oracle (issue "Exactly
once", class 2).

PostgreSQL: the test holds an exclusive lock on the markers table until both builds are
waiting on it, then lets them go at the same instant, so their applies overlap every time.
Before the fix both applied every File (two current rows per key, two markers per File).
Local Spark: see tests/test_crash_recovery.py, which races two builds between its phases.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.oracles import applied, builds_at_once, error_lines, only_lost_races
from helpers.oracles import customers_oracle as oracle
from helpers.project import (
    CHANGES_HISTORY,
    audit_rows,
    bigquery_rows,
    drop_key_index,
    key_indexes,
    query,
    read_table,
)
from helpers.scenario import (
    LATE,
    LATE_TRUNCATED,
    PARTIAL_FILE,
    ROUND_1,
    ROUND_2,
    SAMPLE_SNAPSHOTS,
    TRUNCATE_FILE,
    CurrentOracle,
    HistoryOracle,
    current,
    current_rows,
    declare,
    for_table,
    history_rows,
    seq,
    write,
)
from helpers.scenario import oracle as scenario_oracle

from runner.contract import lineage_columns, state_tables
from runner.project import Project
from runner.run import lost_a_race
from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt]


@pytest.mark.postgres
def test_two_overlapping_builds_on_postgres_apply_each_file_once(cli_project, pg_url) -> None:  # noqa: ANN001
    cli = cli_project("postgres", without=CHANGES_HISTORY)
    landing = cli.root / "landing"
    files = generate_customers(landing / "customers", initial=3000, files=4, changes_per_file=1000)
    for f in files[1:]:  # the full load first, applied alone; the changes race
        f.rename(f.with_suffix(".later"))
    cli.runner("ingest", "--landing", str(landing))
    cli.dbt("build")
    for f in files[1:]:
        f.with_suffix(".later").rename(f)
    cli.runner("ingest", "--landing", str(landing))

    # Held at the staging table the view reads, both rebuild the staging view at once, then
    # apply the changes: dbt's own view materialization fails one
    # (`relation "stg_customers__dbt_backup" already exists`).
    outs, codes = builds_at_once(cli, "--select", "+customers", gate="customers__staged")
    assert codes == [0, 0], [error_lines(o[0]) for o in outs]

    assert applied(cli, files) == oracle(files)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("bigquery", marks=pytest.mark.bigquery),
    ],
)
def test_two_builds_at_once_apply_the_current_state_and_the_history_once(
    spark,  # noqa: ANN001
    cli_project,  # noqa: ANN001
    target: str,
) -> None:
    """The scenario's second round (late Files, partial updates, a truncate) applied by two
    `dbt build` processes started together, on the current state and its change history (the
    re-closing of neighbours): each File applied once, one marker per File and model, both
    tables equal to the oracles; a loser fails saying it lost the race (or waits, PostgreSQL),
    and the same build run again afterwards converges. (Local Spark: the same Files race in
    test_two_runs_at_once_keep_every_history_exact, two whole runs held at a gate.)"""
    cli = cli_project(target, without=SAMPLE_SNAPSHOTS)  # the racing builds: processes
    declare(cli.root)
    folder = cli.root / "landing" / "customers"
    schema = cli.env["CDC_SCHEMA"]
    project = Project.load(cli.root, target=target)
    now, hist = CurrentOracle(), HistoryOracle({})

    def stage(*rounds: dict[str, list[list[str]]]) -> list[Path]:
        batch = [write(folder / n, rows) for files in rounds for n, rows in files.items()]
        cli.runner("ingest", "--landing", str(folder.parent))
        hist.pids.update(
            {Path(p).name: pid for p, pid in audit_rows(cli, "select path, staged_by from files")}
        )
        now.apply(batch)
        hist.apply(batch)
        return batch

    def read(table: str) -> list[dict]:
        if target == "bigquery":
            return bigquery_rows(cli, table)
        return read_table(target, spark, project, schema, table)

    models = ("--select", "customers", "customers_changes_history")
    good = stage(ROUND_1)
    # The current state only: the history's table does not exist yet, so the race below is
    # also two first creates of it (issue "First-create race") beside two applies of customers.
    cli.dbt("build", "--select", "+customers")
    good += stage(ROUND_2, LATE, PARTIAL_FILE, TRUNCATE_FILE, LATE_TRUNCATED)
    # PostgreSQL: two whole builds, as in the issue, which also rebuild the staging view and
    # create the dbt snapshot of customers at once; elsewhere the two apply models.
    racing = () if target == "postgres" else models
    outs, codes = builds_at_once(cli, *racing)
    only_lost_races(outs, codes)  # the loser: Iceberg's conflict, said as such
    if target == "postgres":  # the advisory locks: the second waits, then finds the markers
        assert codes == [0, 0], [o[0][-3000:] for o in outs]
        # the snapshot, created by one build, holds each current customer once, still open
        snapshot = read("customers_history")
        assert sorted(r["customer_id"] for r in snapshot) == sorted(now.table())
        assert {r["dbt_valid_to"] for r in snapshot} == {None}
    cli.dbt("build", *models)  # after the race: converges, applies nothing twice

    assert current_rows(read("customers")) == now.table()
    assert history_rows(read("customers_changes_history")) == hist.table()
    markers = read(state_tables()["applied_files"]["identifier"])
    for table in ("customers", "customers_changes_history"):
        names = sorted(m["file_name"] for m in for_table(markers, table))
        assert names == sorted(p.name for p in good), table


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_builds_at_once_repair_duplicate_keys_once(
    spark,  # noqa: ANN001
    cli_project,  # noqa: ANN001
    target: str,
) -> None:
    """ADR-019's repair raced: the target holds keys more than once (rows copied by hand), and
    two `dbt build`s of it start together with new Files staged: one row per key after them
    (the copy of highest sequence survives), each File applied once, the loser lost a race (or
    waited, PostgreSQL), the same build afterwards converges."""
    cli = cli_project(target, without=(*CHANGES_HISTORY, *SAMPLE_SNAPSHOTS))
    folder = cli.root / "landing" / "customers"
    schema = cli.env["CDC_SCHEMA"]
    project = Project.load(cli.root, target=target)
    good = [write(folder / n, rows) for n, rows in ROUND_1.items()]
    cli.runner("ingest", "--landing", str(folder.parent))
    cli.dbt("build", "--select", "+customers")
    rows = read_table(target, spark, project, schema, "customers")
    q = "`" if target == "local" else '"'
    table = f"{q}{schema}{q}.{q}customers{q}"

    def copy_of(key: int, **changed: str) -> str:
        cols = ", ".join(changed.get(c, f"{q}{c}{q}") for c in rows[0])
        return f"insert into {table} select {cols} from {table} where customer_id = {key}"

    seq_col = lineage_columns()["sequence"]
    if target == "postgres":  # as a table an earlier release made: no unique index on the keys
        drop_key_index(project, schema, "customers")
    query(target, spark, project, copy_of(3, name="'dirty newer'", **{seq_col: f"'{seq(25)}'"}))
    query(target, spark, project, copy_of(5))  # an exact copy, of a key the next Files update
    good += [write(folder / n, rows) for n, rows in ROUND_2.items()]
    cli.runner("ingest", "--landing", str(folder.parent))

    outs, codes = builds_at_once(cli, "--select", "customers")
    only_lost_races(outs, codes)
    if target == "postgres":  # the advisory lock: the second waits, then finds the markers
        assert codes == [0, 0], [o[0][-3000:] for o in outs]
    cli.dbt("build", "--select", "customers")  # converges

    after = read_table(target, spark, project, schema, "customers")
    keys = [r["customer_id"] for r in after]
    assert len(keys) == len(set(keys))  # one row per key
    expected = scenario_oracle(good)
    k3 = next(r for r in after if r["customer_id"] == 3)
    assert k3["name"] == "dirty newer"  # the copy of highest sequence survived
    expected[3] = current([k3])[3]
    assert current(after) == expected
    markers = read_table(
        target, spark, project, schema, state_tables()["applied_files"]["identifier"]
    )
    names = sorted(m["file_name"] for m in for_table(markers, "customers"))
    assert names == sorted(p.name for p in good)
    if target == "postgres":  # made again by the build that repaired the table, once
        assert len(key_indexes(project, schema, "customers")) == 1


HOLD_AT = Path(__file__).parent / "hold_at.py"
Done = subprocess.CompletedProcess[str]


@pytest.mark.parametrize("target", ["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_two_runs_at_once_keep_every_history_exact(
    spark,  # noqa: ANN001
    cli_project,  # noqa: ANN001
    tmp_path: Path,
    target: str,
) -> None:
    """Two `runner run`s at once on one landing, the interleaving that once closed every open
    version of a snapshot-mode history, made certain by a gate (tests/hold_at.py): run A is held
    after its MERGE into accounts_history (two new extracts in its batch, and the scenario's
    second round of change Files: late Files, partial updates, a truncate),
    before its markers, while run B runs whole (local Spark) or waits for A's lock (PostgreSQL);
    then A goes on. On local Spark, with two more extracts, A is also held after classifying,
    before its MERGE, while B applies them: A then fails saying it lost the race and the same
    command run again applies nothing twice. After each, the current states and both
    histories (snapshot and change log) equal plain-Python folds, and no version ends before
    it starts."""
    import sys
    import time

    from helpers.scenario import write as write_changes
    from test_snapshot import Expected, expected_history, expected_table, read_back

    from runner.entities import load_entities
    from runner.samples.generate import SnapshotSpec, generate_snapshots

    cli = cli_project(target)
    declare(cli.root)
    # Not this test's: the dbt snapshot of customers (its own race is dbt's snapshot's).
    (cli.root / "dbt_project" / "snapshots" / "customers_history.yml").unlink()
    landing = cli.root / "landing"
    (landing / "accounts").mkdir(parents=True, exist_ok=True)
    entity = load_entities(Project.load(cli.root, target=target))["accounts"]
    spec = SnapshotSpec(initial=30, incremental=32, days=5, seed=11)
    days = generate_snapshots(entity, tmp_path / "generated", spec)
    accounts, now, hist = Expected({}, {}), CurrentOracle(), HistoryOracle({})
    schema = cli.env["CDC_SCHEMA"]
    project = Project.load(cli.root, target=target)

    def land(extracts: list[Path], rounds: tuple[dict, ...] = ()) -> list[Path]:
        for path in extracts:
            (landing / "accounts" / path.name).write_bytes(path.read_bytes())
        folder = landing / "customers"
        return [write_changes(folder / n, rows) for r in rounds for n, rows in r.items()]

    def folded(extracts: list[Path], changed: list[Path]) -> None:
        pids = dict(audit_rows(cli, "select path, staged_by from files"))
        by_name = {Path(p).name: pid for p, pid in pids.items()}
        accounts.pids.update(by_name)
        hist.pids.update(by_name)
        accounts.apply(extracts)
        now.apply(changed)
        hist.apply(changed)

    def check() -> None:
        got = read_back(cli)
        assert got.table == expected_table(accounts)
        assert got.history == expected_history(accounts)
        assert all(v[2] is None or v[2] > v[1] for v in got.history)  # valid_to after valid_from
        read = lambda t: read_table(target, spark, project, schema, t)  # noqa: E731
        assert current_rows(read("customers")) == now.table()
        assert history_rows(read("customers_changes_history")) == hist.table()

    def held_and_other(phase: str) -> tuple[Done, Done]:
        """Run A (a process) held at ``phase`` until run B has run (local Spark: in this
        process, on the warm session) or waits for A's lock (PostgreSQL: a process); then A
        goes on."""
        held, go = tmp_path / f"held-{phase}", tmp_path / f"go-{phase}"
        args = ("run", "--landing", "landing", "--target", target)
        a = cli.start(sys.executable, str(HOLD_AT), phase, str(held), str(go), "runner", *args)
        deadline = time.monotonic() + 600
        while not held.exists():
            assert a.poll() is None, a.communicate()
            assert time.monotonic() < deadline, "run A never reached the gate"
            time.sleep(0.2)
        if target == "local":
            b: Done = cli.runner("run", "--landing", "landing", ok=(0, 1))
        else:
            started = cli.start("runner", *args)
            while started.poll() is None and not _waiting_on_locks(schema):
                assert time.monotonic() < deadline, "run B neither ended nor waited"
                time.sleep(0.2)
        go.write_text("go")
        out, err = a.communicate(timeout=600)
        if target != "local":
            said = started.communicate(timeout=600)
            b = subprocess.CompletedProcess(args, started.returncode, *said)
        return subprocess.CompletedProcess(a.args, a.returncode, out, err), b

    first = land(days[:1], (ROUND_1,))
    cli.runner("run", "--landing", "landing")
    folded(days[:1], first)

    def only_races(*done: Done) -> None:
        """Each run succeeded, or failed only for a lost race (on local Spark, two builds of
        the dbt snapshot of customers at once may also race), said in one line."""
        for d in done:
            if d.returncode != 0:
                said = [ln for ln in d.stderr.splitlines() if ln.startswith("error:")]
                assert d.returncode == 1 and len(said) == 1 and lost_a_race(said[0]), d.stderr
                assert "Traceback" not in d.stderr and "\tat " not in d.stderr + d.stdout

    changed = land(days[1:3], (ROUND_2, LATE, PARTIAL_FILE, TRUNCATE_FILE, LATE_TRUNCATED))
    a, b = held_and_other("before-markers-of=accounts_history")
    if target == "postgres":  # the second waited for the first's lock
        assert (a.returncode, b.returncode) == (0, 0), (a.stderr[-3000:], b.stderr[-3000:])
    only_races(a, b)
    if a.returncode or b.returncode:  # a lost race: the same command again, nothing twice
        cli.runner("run", "--landing", "landing")
    folded(days[1:3], changed)
    check()

    if target == "local":  # PostgreSQL holds its lock from the classification to the COMMIT
        land(days[3:5])
        a, b = held_and_other("before-merge-of=accounts_history")
        only_races(a, b)
        assert a.returncode == 1 and "accounts_history: another build" in a.stderr, a.stderr
        cli.runner("run", "--landing", "landing")
        folded(days[3:5], [])
        check()


def _waiting_on_locks(schema: str) -> bool:
    """A build of this PostgreSQL schema waits for a lock (WAITING: tests/helpers/oracles.py)."""
    import psycopg2
    from helpers.oracles import PG_URL, WAITING

    conn = psycopg2.connect(PG_URL.replace("postgresql+psycopg2", "postgresql"))
    try:
        with conn.cursor() as cur:
            cur.execute(WAITING, {"schema": schema})
            return cur.fetchone()[0] > 0
    finally:
        conn.close()
