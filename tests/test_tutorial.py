"""docs/tutorial.md followed as written: each `sh` block's commands run in order, as processes,
from a project root with the shipped tutorial Files (`make setup` is the one command skipped:
the test's project is a set-up copy). One entity per format `runner new-entity` reads (DMS CSV,
JSON lines, DMS Parquet, Debezium's connector output), each table equal to a plain-Python oracle
of its shipped Files (json and pyarrow, not the runner), on the embedded default and on
PostgreSQL."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import subprocess
from decimal import Decimal

import pytest
from helpers.project import CHANGES_HISTORY, REPO, drop_pg_schemas, pg_connect

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]

PAGE = REPO / "docs" / "tutorial.md"
SHIPPED = REPO / "docs" / "tutorial"
FILES = SHIPPED / "orders"
MAKEFILE = REPO / "Makefile"


def oracle(names: list[str]) -> dict[int, tuple[str, Decimal]]:
    """order_id -> (status, amount) after the named Files' changes in sequence order."""
    rows = []
    for name in names:
        with open(FILES / name, encoding="utf-8", newline="") as handle:
            rows += list(csv.DictReader(handle))
    now: dict[int, tuple[str, Decimal]] = {}
    for r in sorted(rows, key=lambda r: r["AR_H_CHANGE_SEQ"]):
        if r["Op"] == "D":
            now.pop(int(r["order_id"]), None)
        else:
            now[int(r["order_id"])] = (r["status"], Decimal(r["amount"]))
    return now


def value(v: object) -> object:
    """A value as compared: numbers as Decimal (dbt show gives 38.0 for decimal 38.00)."""
    try:
        return Decimal(str(v))
    except ArithmeticError:
        return str(v)


def dms_oracle(rows: list[dict], key: str, column: str) -> dict[int, object]:
    """key -> value after DMS-style changes applied in sequence order."""
    now: dict[int, object] = {}
    for r in sorted(rows, key=lambda r: r["AR_H_CHANGE_SEQ"]):
        if r["Op"] == "D":
            now.pop(int(r[key]), None)
        else:
            now[int(r[key])] = value(r[column])
    return now


def other_formats() -> dict[str, tuple[str, str, dict[int, object]]]:
    """entity -> (key, column, expected key -> column) from the shipped Files, read by plain
    Python (json, pyarrow), not by the runner."""
    import pyarrow.parquet as pq

    payments = [json.loads(line) for f in sorted((SHIPPED / "payments").glob("*.json"))
                for line in f.read_text().splitlines() if line.strip()]  # fmt: skip
    refunds = [r for f in sorted((SHIPPED / "refunds").glob("*.parquet"))
               for r in pq.read_table(f).to_pylist()]  # fmt: skip
    events = []
    for f in sorted((SHIPPED / "products").glob("*.json")):
        for line in f.read_text().splitlines():
            if line.strip() not in ("", "null"):  # a tombstone line carries no change
                p = json.loads(line)["payload"]
                events.append((int(p["source"]["lsn"]), p))
    products: dict[int, object] = {}
    for _, p in sorted(events, key=lambda e: e[0]):
        if p["op"] == "d":
            products.pop(int(p["before"]["id"]), None)
        else:
            products[int(p["after"]["id"])] = value(p["after"]["name"])
    return {
        "payments": ("payment_id", "amount", dms_oracle(payments, "payment_id", "amount")),
        "refunds": ("refund_id", "amount", dms_oracle(refunds, "refund_id", "amount")),
        "products": ("id", "name", products),
    }


# The page in three parts, each its own test so that the two workers share it: the first
# entity's walk; every declaration then the last local run; every declaration then the run on
# PostgreSQL and the run from the bucket. Each command of the page runs in one of them, as
# written, in the page's order.
WALK, LOCAL, POSTGRES = "first entity", "all entities", "postgres"


def parts(commands: list[list[str]], part: str) -> list[str]:
    """The page's commands (blocks after `make setup`) that ``part`` runs, in order."""
    lines = [line for block in commands for line in block]
    postgres_run = next(i for i, line in enumerate(lines) if line.endswith("--target postgres"))
    assert lines[postgres_run].startswith("runner run --landing landing "), lines[postgres_run]
    before, bucket = lines[: postgres_run + 1], lines[postgres_run + 1 :]
    assert bucket[0] == "make s3-up" and bucket[-1] == "make s3-down", bucket
    runs = [i for i, line in enumerate(before) if line.startswith(("runner run", "dbt show"))]
    local_run = runs[-2]
    if part == WALK:  # up to and with `runner status`
        status = next(i for i, line in enumerate(lines) if line.startswith("runner status"))
        return lines[: status + 1]
    # files landed and declared (mkdir, cp, new-entity); then the one run
    declared = [
        line for line in before if not line.startswith(("runner run", "dbt show", "runner status"))
    ]
    if part == LOCAL:
        return [*declared, before[local_run]]
    return [*declared, before[postgres_run], *bucket]


def recipe(target: str) -> list[str]:
    """The commands of a Makefile target's recipe, with `$(BIN)/` as the PATH's."""
    rule = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
    assert rule, target
    return [ln.strip().lstrip("@").replace("$(BIN)/", "") for ln in rule[1].splitlines()]


@pytest.mark.parametrize("part", [WALK, LOCAL, POSTGRES])
def test_the_tutorial_runs_as_written(cli_project, part: str) -> None:  # noqa: ANN001
    cli = cli_project("local", without=CHANGES_HISTORY, processes=True)
    # The postgres target's Audit DB in a schema of this test's own (the only difference from
    # what a user's environment has: runner.yml's default is shared by every project).
    on_postgres = dict(cli.env, CDC_AUDIT_SCHEMA=cli.schema + "_audit")
    shutil.copytree(SHIPPED, cli.root / "docs" / "tutorial")
    formats = other_formats()
    assert all(want for _, _, want in formats.values()), formats
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    commands = [[ln for ln in b.splitlines() if ln.strip()] for b in blocks]
    assert commands[0] == ["make setup"], commands[0]
    # Step 8's local S3 API: `make s3-up`/`s3-down` run their Makefile recipe (the project has
    # no Makefile; its tool is copied), an `export` sets the environment of the lines after it,
    # and the schemas it names are made this test's own, as above.
    (cli.root / "tools").mkdir()
    shutil.copy(REPO / "tools" / "s3_local.py", cli.root / "tools")
    bucket_schema = cli.schema + "_s3"
    exported: dict[str, str] = {}
    ran: list[str] = []
    try:
        for line in parts(commands[1:], part):
            if line.startswith("export "):
                for assignment in shlex.split(line)[1:]:
                    name, _, val = assignment.partition("=")
                    own = name in ("CDC_SCHEMA", "CDC_AUDIT_SCHEMA")
                    exported[name] = val.replace("cdc_s3", bucket_schema, 1) if own else val
                ran.append(line)
                continue
            if line.startswith("unset "):
                for name in shlex.split(line)[1:]:
                    assert name in exported, f"{line}: {name} was not exported"
                    del exported[name]
                ran.append(line)
                continue
            env = on_postgres if line.endswith("--target postgres") else cli.env
            env = dict(env, **exported)
            script = " && ".join(recipe(line.split()[1])) if line.startswith("make ") else line
            done = subprocess.run(["bash", "-c", script], cwd=cli.root, env=env,
                                  capture_output=True, text=True, timeout=900)  # fmt: skip
            assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr}"
            ran.append(line)
            if line.startswith("dbt show"):  # step 4: the first two Files applied
                shown = re.findall(r"\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*([\d.]+)\s*\|", done.stdout)
                got = {int(i): (s, Decimal(a)) for i, s, a in shown}
                assert got == oracle(["LOAD00000001.csv", "20260301-090000000.csv"]), done.stdout
            if line.startswith("runner status"):  # step 5: three Files committed, none waiting
                assert re.search(r"^orders +3 +0 +0 +0 +\d+[smhd] ago$", done.stdout, re.M), (
                    done.stdout
                )
        everything = oracle(sorted(p.name for p in FILES.glob("*.csv")))
        if part == WALK:
            local = cli.table("{{ ref('orders') }}")
            got = {int(r["order_id"]): (r["status"], Decimal(str(r["amount"]))) for r in local}
            assert got == everything
        elif part == LOCAL:
            local = cli.table("{{ ref('orders') }}")
            got = {int(r["order_id"]): (r["status"], Decimal(str(r["amount"]))) for r in local}
            assert got == everything
            for name, (key, column, want) in formats.items():
                rows = cli.table(f"{{{{ ref('{name}') }}}}")
                got_values = {int(r[key]): value(r[column]) for r in rows}
                assert got_values == want, (name, got_values, want)
            again = subprocess.run(["bash", "-c", "runner run --landing landing"], cwd=cli.root,
                                   env=cli.env, capture_output=True, text=True)  # fmt: skip
            assert again.returncode == 0 and "nothing new" in again.stdout, again.stdout
        else:  # from local disk, then from the bucket into schemas of its own
            assert ran[-1] == "make s3-down", ran
            conn = pg_connect()
            try:
                with conn.cursor() as cur:
                    for schema in (cli.schema, bucket_schema):
                        cur.execute(f'select order_id, status, amount from "{schema}".orders')
                        assert {int(i): (s, a) for i, s, a in cur.fetchall()} == everything
                        for name, (key, column, want) in formats.items():
                            cur.execute(f'select "{key}", "{column}" from "{schema}"."{name}"')
                            got_values = {int(k): value(v) for k, v in cur.fetchall()}
                            assert got_values == want, (schema, name, got_values, want)
                    # each File of the bucket staged and committed once, under its s3:// URI
                    cur.execute(f'select path, state from "{bucket_schema}_audit".files')
                    files = cur.fetchall()
                    landed = [p for p in (cli.root / "landing").rglob("*") if p.is_file()]
                    assert len(files) == len(landed), files
                    assert all(u.startswith("s3://landing/") and s == "COMMITTED"
                               for u, s in files), files  # fmt: skip
            finally:
                conn.close()
    finally:
        if part == POSTGRES:  # the S3 API stopped even when a line failed
            subprocess.run(["bash", "-c", " && ".join(recipe("s3-down"))], cwd=cli.root,
                           env=cli.env, capture_output=True)  # fmt: skip
        drop_pg_schemas(cli.schema, cli.schema + "_audit", bucket_schema, bucket_schema + "_audit")


def test_the_three_parts_run_every_command_of_the_page() -> None:
    """Each command of the page runs in one of the parts; the first entity's walk as a whole."""
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    commands = [[ln for ln in b.splitlines() if ln.strip()] for b in blocks][1:]
    lines = [line for block in commands for line in block]
    covered = {line for part in (WALK, LOCAL, POSTGRES) for line in parts(commands, part)}
    assert covered == set(lines), set(lines) - covered
    walk = parts(commands, WALK)
    assert walk == lines[: len(walk)] and walk[-1].startswith("runner status"), walk
