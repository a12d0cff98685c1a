"""Bad input is quarantined with its file, line and column, and never blocks the good Files;
good input under any landing path is staged whole (issue "Exactly once", classes 1, 3, 4, 7).

On local Spark + Iceberg and on PostgreSQL, one ingest over a landing root whose path holds a
space, an '@' and a non-ASCII letter: every good File's staged rows equal a plain-Python oracle
(before: every row silently dropped), and each bad File is QUARANTINED with a reason naming
where it breaks: invalid UTF-8 far past the first 8 KB, values a cast would change (10.005
into decimal(12,2), 1.5 into bigint), a truncated gzip File, a duplicated header name, a NUL
character where the destination cannot store it.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from helpers.oracles import HEADER, staged_tuples
from helpers.oracles import staged_oracle as oracle
from helpers.project import read_table

from audit import AuditDB
from runner.entities import load_entities
from runner.ids import new_process_id
from runner.ingest import ingest
from runner.invocation import Invocation
from runner.project import Project
from runner.samples.generate import generate_customers

pytestmark = pytest.mark.spark

SEQ = "2026030109000000000000000000000000{}"


def row(n: int, key: object, name: str = "a", balance: str = "1.00") -> str:
    return f"U,{SEQ.format(n)},{key},{name},b@example.com,gold,{balance},2026-03-01 09:00:00\n"


def bad_files(folder: Path, target: str) -> dict[str, str]:
    """Write the bad Files; return file name -> what its quarantine reason must say."""
    folder.mkdir(parents=True, exist_ok=True)
    # Invalid UTF-8 on line 402, in the field `name`, about 26 KB into the File.
    lines = [row(n, n) for n in range(1, 401)]
    body = (HEADER + "".join(lines)).encode() + b"U," + SEQ.format(7).encode() + b",401,ab\xff"
    (folder / "late_bad_utf8.csv").write_bytes(body + b"c,x@example.com,gold,1.00,2026-03-01\n")
    (folder / "rounding.csv").write_text(HEADER + row(1, 1) + row(2, 2, balance="10.005"))
    (folder / "truncating.csv").write_text(HEADER + row(1, 1) + row(2, "1.5"))
    text = (HEADER + "".join(row(n, n) for n in range(1, 2000))).encode()
    packed = gzip.compress(text)
    (folder / "truncated.csv.gz").write_bytes(packed[: len(packed) // 2])
    (folder / "dup_header.csv").write_text(
        "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at,name\n"
    )
    expected = {
        "late_bad_utf8.csv": (
            "late_bad_utf8.csv: line 402, column 45 (field 'name'): not valid UTF-8"
        ),
        "rounding.csv": (
            "rounding.csv: line 3, column 'balance': \"10.005\" does not fit decimal(12,2) "
            "unchanged (it would be stored as 10.01)"
        ),
        "truncating.csv": "truncating.csv: line 3, column 'customer_id': \"1.5\" does not fit",
        "truncated.csv.gz": "truncated.csv.gz: not a complete gzip File",
        "dup_header.csv": "dup_header.csv: line 1, column 'name': appears twice in the header",
    }
    if target == "postgres":  # PostgreSQL text cannot hold NUL; Iceberg can
        (folder / "nul.csv").write_text(HEADER + row(1, 1) + row(2, 2, name="x\x00y"))
        expected["nul.csv"] = "nul.csv: line 3, column 'name': a NUL character"
    return expected


@pytest.fixture(params=["local", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The destination, with a schema of this module's own (the Spark warehouse is shared)."""
    if request.param == "postgres":
        monkeypatch.setenv("CDC_SCHEMA", request.getfixturevalue("pg_schema"))
    else:
        monkeypatch.setenv("CDC_SCHEMA", "bad_input_test")
    return request.param


def test_bad_files_are_quarantined_precisely_and_good_files_under_any_path_are_staged(
    spark,
    spark_project: Path,
    tmp_path: Path,
    target: str,  # noqa: F811
) -> None:
    project = Project.load(spark_project, target=target)
    entity = load_entities(project)["customers"]
    landing = tmp_path / 'landing dir "x@ñ"'
    folder = landing / "customers"
    good = generate_customers(folder, initial=50, files=3, changes_per_file=30)
    zipped = folder / "20990101-000000000.csv.gz"  # the sample declaration globs *.csv.gz too
    zipped.write_bytes(gzip.compress((HEADER + row(9, 7, name="zipped")).encode()))
    expected = bad_files(folder, target)

    db = AuditDB(f"sqlite:///{tmp_path / 'audit.db'}")
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "ingest", target)
    result = ingest(Invocation.of(project, db, spark), pid, landing=[str(landing)])

    states = {Path(f.path).name: f for f in db.files()}
    for name, reason in expected.items():
        assert states[name].state == "QUARANTINED", (name, states[name].state)
        assert reason in (states[name].last_error or ""), (name, states[name].last_error)
    for p in [*good, zipped]:
        f = states[p.name]
        assert (f.state, f.attempts) == ("STAGED", 1), (p.name, f.state, f.last_error)
    assert (result.quarantined, result.failed, result.staged) == (len(expected), 0, len(good) + 1)

    rows = read_table(target, spark, project, entity.staging_schema, entity.staging_table)
    plain = tmp_path / "zipped.csv"  # the oracle reads the gzip File's text
    plain.write_bytes(gzip.decompress(zipped.read_bytes()))
    want = [row for p in good for row in oracle(p)]
    want += [(zipped.name, *r[1:]) for r in oracle(plain)]
    assert staged_tuples(rows) == sorted(want)
    db.dispose()
