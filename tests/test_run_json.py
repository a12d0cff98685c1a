"""`runner run --json`: one JSON object with the counts and the time of each phase, its numbers
checked against the landing Files and the destination; the runner's process id reaches dbt
without a changing `--vars` value, so the next run's dbt keeps its partial parse.

The per-entity summary (Files staged and applied, rows inserted, updated, deleted and stale per
target table) is checked against the Applied File Markers read from PostgreSQL with plain SQL,
and against a fold of the landing Files; so are `runner status --json`'s per-File counts and
`runner runs --json`, and the plain-text table `runner run` prints."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers.oracles import HEADER
from helpers.project import REPO, TEST_JAVA_OPTIONS

from audit.store import MARKER_COUNTS as COUNTS

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.dbt]

# Large pages asked for on a machine that has none configured: the JVM says so at once in its
# log, at warning level, and runs on as usual. And a user's own GC log, which the JVM writes to
# its stdout unless told otherwise.
LARGE_PAGES = f"{TEST_JAVA_OPTIONS} -XX:+UseLargePages -Xlog:gc"
PHASES = {"spark_start", "reconcile", "discover", "hash", "stage", "dbt_fixed", "dbt_nodes"}


def data_rows(folder) -> int:  # noqa: ANN001
    return data_rows_of(list(folder.iterdir()))


def test_run_json_reports_counts_and_phases_and_keeps_partial_parsing(cli_project, request) -> None:  # noqa: ANN001
    cli = cli_project("postgres")
    landing = cli.root / "landing" / "customers"
    shutil.copytree(REPO / "landing" / "customers", landing)
    late = sorted(landing.iterdir())[-1]
    held = cli.root / late.name
    late.rename(held)  # lands before the second run

    first = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert set(first["phases"]) >= PHASES, first["phases"]
    assert all(v >= 0 for v in first["phases"].values())
    assert first["ok"] and first["dbt_ok"], first
    assert first["ingest"]["staged"] == len(list(landing.iterdir()))
    assert first["ingest"]["rows"] == data_rows(landing)
    assert first["audit"] == {"COMMITTED": len(list(landing.iterdir()))}

    engine = sa.create_engine(request.getfixturevalue("pg_url"))
    try:
        with engine.connect() as conn:
            counts = {
                f"{cli.schema}.{t}": conn.execute(
                    sa.text(f'select count(*) from "{cli.schema}".{t}')
                ).scalar()
                for t in ("customers", "customers_changes_history")
            }
            assert first["tables"] == counts
            # the history snapshot got the runner's process id (from CDC_PROCESS_ID)
            pids = conn.execute(
                sa.text(
                    f'select distinct "_cdc_insert_process_id" '
                    f'from "{cli.schema}".customers_history'
                )
            ).all()
            assert pids == [(first["process_id"],)]
    finally:
        engine.dispose()

    # The summary per entity equals the markers, summed per target table, read with plain SQL.
    markers = marker_rows(request.getfixturevalue("pg_url"), cli.schema)
    assert first["entities"] == expected_summary(markers, staged=len(list(landing.iterdir())))
    # ... and what a fold of this run's landing Files gives for cdc.customers, which started
    # empty: each key's last change is applied (the earlier ones are stale), so the keys whose
    # last change is not a delete are inserts, the others deletes (a tombstone, even for a
    # key whose insert is in a File still to come), and nothing is an update.
    last: dict[str, str] = {}
    for path in sorted(landing.iterdir()):
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                key = row["customer_id"]
                if key not in last or row["AR_H_CHANGE_SEQ"] > last[key][0]:
                    last[key] = (row["AR_H_CHANGE_SEQ"], row["Op"])
    current = next(
        t for t in first["entities"][0]["targets"] if t["target_table"].endswith(".customers")
    )
    deletes = sum(1 for _, op in last.values() if op == "D")
    assert (current["rows_inserted"], current["rows_updated"], current["rows_deleted"]) == (
        len(last) - deletes,
        0,
        deletes,
    )
    assert current["rows_inserted"] == counts[f"{cli.schema}.customers"]

    status = json.loads(cli.runner("status", "--json", "--target", "postgres").stdout)
    by_hash = {}
    for m in markers:
        by_hash.setdefault(m["file_hash"], []).append({k: m[k] for k in ("target_table", *COUNTS)})
    for f in status:
        assert f["state"] == "COMMITTED" and f["age_seconds"] >= 0
        got = [{k: m[k] for k in ("target_table", *COUNTS)} for m in f["markers"]]
        assert sorted(got, key=str) == sorted(by_hash[f["content_hash"]], key=str), f

    log = cli.root / "dbt_project" / "logs" / "dbt.log"
    log.write_text("")
    held.rename(landing / late.name)
    second = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert second["ingest"]["staged"] == 1 and second["committed"] == 1, second
    text = log.read_text()
    assert "Running with dbt" in text  # the log is where this dbt wrote it
    assert "Unable to do partial parsing" not in text

    # Only the late File's markers count in the second summary.
    late_markers = [
        m
        for m in marker_rows(request.getfixturevalue("pg_url"), cli.schema)
        if m["file_name"] == late.name
    ]
    assert second["entities"] == expected_summary(late_markers, staged=1)

    runs = json.loads(cli.runner("runs", "--json", "--target", "postgres").stdout)
    mine = [r for r in runs if r["process_id"] in (first["process_id"], second["process_id"])]
    assert [(r["command"], r["outcome"], r["target"]) for r in mine] == [
        ("run", "ok", "postgres")
    ] * 2
    assert mine[0]["process_id"] == second["process_id"]  # newest first
    assert mine[0]["files"]["COMMITTED"] == 1 and mine[0]["files"]["STAGED"] == 1
    assert mine[1]["files"]["COMMITTED"] == first["ingest"]["staged"]
    assert all(r["seconds"] > 0 for r in mine)
    # Plain text says what each run did as counts, in the order Files go through.
    plain = cli.runner("runs", "--target", "postgres").stdout.splitlines()
    line = next(x for x in plain if second["process_id"] in x)
    assert "staged 1, committed 1" in line, line


def test_run_prints_the_summary_table_as_plain_text(cli_project, request) -> None:  # noqa: ANN001
    """Without --json (and piped): one line per entity and target table, numbers as in the
    markers; dbt's own lines stay out unless -v."""
    cli = cli_project("postgres")
    landing = cli.root / "landing" / "customers"
    shutil.copytree(REPO / "landing" / "customers", landing)
    late = sorted(landing.iterdir())[-1]
    held = cli.root / late.name
    late.rename(held)  # lands before the verbose run, so that dbt runs in it
    out = cli.runner("run", "--landing", "landing").stdout
    assert "Running with dbt" not in out and "START" not in out, out
    markers = marker_rows(request.getfixturevalue("pg_url"), cli.schema)
    n_files = len(list((cli.root / "landing" / "customers").iterdir()))
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["entity", "staged"])
    rows = [line.split() for line in lines[header + 1 :] if line.strip()][:2]
    want = expected_summary(markers, staged=n_files)[0]
    first, second = rows
    assert first[:5] == ["customers", str(n_files), "0", "0", str(n_files)], out
    for row, target in zip([first[5:], second], want["targets"], strict=True):
        assert row == [target["target_table"], *(str(target[c]) for c in COUNTS)], out
    held.rename(late)
    verbose = cli.runner("run", "--landing", "landing", "-v").stdout
    assert "Running with dbt" in verbose


def marker_rows(pg_url: str, schema: str) -> list[dict]:
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = (
                conn.execute(sa.text(f'select * from "{schema}".cdc_applied_files'))
                .mappings()
                .all()
            )
            return [dict(r) for r in rows]
    finally:
        engine.dispose()


def expected_summary(markers: list[dict], staged: int) -> list[dict]:
    """What the run summary must say for a run that staged and applied `staged` customers
    Files whose markers are `markers`."""
    targets: dict[str, dict] = {}
    for m in markers:
        t = targets.setdefault(
            m["target_table"],
            {"target_table": m["target_table"], "files": 0, **dict.fromkeys(COUNTS, 0)},
        )
        t["files"] += 1
        for c in COUNTS:
            t[c] += m[c]
    return [
        {
            "entity": "customers",
            "staged": staged,
            "quarantined": 0,
            "failed": 0,
            "applied": staged,
            "targets": [targets[k] for k in sorted(targets)],
        }
    ]


def test_json_stdout_stays_json_when_the_jvm_itself_warns(cli_project) -> None:  # noqa: ANN001
    """The JVM writes its own warnings (unified logging: "CodeCache is full", "UseLargePages
    disabled", ...) and a GC log asked for with -Xlog:gc to stdout by default; a JVM asked for
    large pages on a machine without them says so at once, and `--json` must still print
    nothing but its JSON on stdout, the warning and the GC log on stderr."""
    huge = Path("/proc/meminfo").read_text()
    assert "HugePages_Total:       0" in huge, "this machine has large pages: the JVM won't warn"
    cli = cli_project("local", processes=True)
    shutil.copytree(REPO / "landing" / "customers", cli.root / "landing" / "customers")
    for name in ("runner.yml", "profiles.yml"):  # staging's and the target's JVM settings
        settings = cli.root / name
        text = settings.read_text()
        assert TEST_JAVA_OPTIONS in text, name
        settings.write_text(text.replace(TEST_JAVA_OPTIONS, LARGE_PAGES))
    out = cli("runner", "run", "--json", "--landing", "landing")
    assert "UseLargePages disabled" in out.stderr, out.stderr  # the JVM did warn
    assert "[gc]" in out.stderr, out.stderr  # and logged its collections
    assert out.stdout.startswith("{"), out.stdout[:2000]
    summary = json.loads(out.stdout)  # and stdout is the one JSON object
    assert summary["ok"], summary
    assert summary["ingest"]["staged"] == len(list((cli.root / "landing" / "customers").iterdir()))


def test_ingest_json_is_one_object_with_the_counts_and_exit_1_for_a_quarantined_file(
    cli_project,  # noqa: ANN001
) -> None:
    """`runner ingest --json`: stdout is one JSON object whose counts equal the landing Files
    (one of them malformed), with the time of each phase; the exit code says a File was
    quarantined; a second run finds nothing new and exits 0."""
    cli = cli_project("postgres")
    landing = cli.root / "landing" / "customers"
    shutil.copytree(REPO / "landing" / "customers", landing)
    good = sorted(landing.iterdir())
    (landing / "99990101-000000000.csv").write_text(HEADER + "U,1,2\n")  # too few fields

    first = json.loads(cli.runner("ingest", "--json", "--landing", "landing", ok=(1,)).stdout)
    assert not first["ok"], first
    assert (first["registered"], first["staged"], first["quarantined"], first["failed"]) == (
        len(good) + 1,
        len(good),
        1,
        0,
    ), first
    assert first["rows"] == data_rows_of(good)
    assert {"discover", "hash", "stage"} <= set(first["phases"]), first["phases"]

    again = json.loads(cli.runner("ingest", "--json", "--landing", "landing").stdout)
    assert again["ok"] and (again["registered"], again["staged"], again["rows"]) == (0, 0, 0)


def data_rows_of(files: list) -> int:
    total = 0
    for path in files:
        with open(path, newline="", encoding="utf-8") as handle:
            total += sum(1 for _ in csv.reader(handle)) - 1
    return total
