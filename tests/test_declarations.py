"""Entity declarations, landing discovery, content hashing and the reserved lineage names."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from helpers.project import REPO, make_project

from runner.contract import PREFIX, lineage_columns
from runner.discover import discover, settle
from runner.entities import load_entities
from runner.errors import ConfigError
from runner.hashing import content_hash
from runner.project import Project


def test_the_sample_entity_is_declared_in_the_dbt_project(tmp_path: Path) -> None:
    project = Project.load(make_project(tmp_path / "repo"), target="local")
    customers = load_entities(project)["customers"]
    assert customers.keys == ("customer_id",)
    assert customers.sequence == "AR_H_CHANGE_SEQ"
    assert customers.operations == {"I": "I", "U": "U", "D": "D"}
    assert customers.column("balance").data_type == "decimal(12,2)"
    assert (customers.staging_schema, customers.staging_table) == ("cdc", "customers__staged")
    assert [c.name for c in customers.columns][:3] == ["Op", "AR_H_CHANGE_SEQ", "customer_id"]


def test_every_problem_in_every_declaration_is_reported_at_once(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    bad = {
        "version": 2,
        "sources": [
            {
                "name": "cdc_staging",
                "tables": [
                    {
                        "name": "orders",
                        "meta": {
                            "cdc": {
                                "landing": "../etc/*",
                                "format": "xml",
                                "keys": ["order_id"],
                                "colour": "red",
                            }
                        },
                        "columns": [
                            {"name": "id", "data_type": "bigint"},
                            {"name": "_cdc_mine", "data_type": "nonsense"},
                        ],
                    },
                    {
                        "name": "refunds",
                        "meta": {
                            "cdc": {"landing": "refunds/*.csv", "keys": ["id"], "sequence": "seq"}
                        },
                        "columns": [{"name": "id", "data_type": "bigint"}],
                    },
                ],
            }
        ],
    }
    bad_file = root / "dbt_project" / "models" / "staging" / "broken.yml"
    bad_file.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    text = str(err.value)
    for expected in (
        "entity 'orders': unknown key meta.cdc.colour",
        "entity 'orders': landing '../etc/*' must be relative",
        "entity 'orders': format 'xml' is not supported",
        "entity 'orders': key column 'order_id' is not among the declared columns",
        "entity 'orders': column '_cdc_mine' uses the reserved prefix",
        "entity 'orders': column '_cdc_mine': data_type 'nonsense'",
        "entity 'orders': meta.cdc.sequence",
        "entity 'refunds': sequence column 'seq' is not among the declared columns",
        "entity 'refunds': operation column 'Op' is not among the declared columns",
    ):
        assert expected in text, f"missing: {expected}\n{text}"
    assert str(bad_file) in text


def test_partial_updates_and_truncates_are_declared_and_checked(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    path = root / "dbt_project" / "models" / "staging" / "cdc_sources.yml"
    doc = yaml.safe_load(path.read_text())
    cdc = doc["sources"][0]["tables"][0]["meta"]["cdc"]
    cdc.update(null_means="unchanged", unchanged_placeholder="__unavailable__")
    cdc["operation"] = {"column": "Op", "values": {"I": "I", "U": "U", "D": "D", "T": "T"}}
    path.write_text(yaml.safe_dump(doc))
    customers = load_entities(Project.load(root, target="local"))["customers"]
    # Default: every column but the key, the sequence and the operation.
    assert customers.unchanged_columns == ("name", "email", "tier", "balance", "updated_at")
    assert customers.unchanged_placeholder == "__unavailable__" and customers.truncates

    cdc.update(null_means="sometimes", unchanged_columns=["customer_id", "nope"])
    cdc["operation"]["values"]["X"] = "Z"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    for expected in (
        "null_means 'sometimes' unknown; accepted: ['value', 'unchanged']",
        "unchanged_columns needs null_means: unchanged",
        "operation.values must map to I, U, D or T (truncate); got ['Z']",
    ):
        assert expected in str(err.value), str(err.value)
    cdc["null_means"] = "unchanged"
    del cdc["operation"]["values"]["X"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    for expected in (
        "unchanged_columns: 'customer_id' is a key, the sequence or the operation column",
        "unchanged_columns: 'nope' is not among the declared columns",
    ):
        assert expected in str(err.value), str(err.value)


def _entity(tmp_path: Path):
    project = Project.load(make_project(tmp_path / "repo"), target="local")
    return load_entities(project)["customers"]


def test_discovery_stays_inside_landing_roots(tmp_path: Path) -> None:
    entity = _entity(tmp_path)
    root = tmp_path / "landing"
    (root / "customers").mkdir(parents=True)
    (root / "customers" / "a.csv").write_text("x")
    (root / "customers" / "notes.txt").write_text("not matched by the glob")
    outside = tmp_path / "secret.csv"
    outside.write_text("must never be read")
    os.symlink(outside, root / "customers" / "sneaky.csv")
    files, notes = discover(entity, [root])
    assert [f.name for f in files] == ["a.csv"]
    assert any("sneaky.csv" in n and "outside" in n for n in notes)


def test_discovery_skips_files_still_being_written(tmp_path: Path) -> None:
    entity = _entity(tmp_path)
    root = tmp_path / "landing"
    (root / "customers").mkdir(parents=True)
    fresh = root / "customers" / "b.csv"
    fresh.write_text("x")
    files, notes = discover(entity, [root], min_age_seconds=60)
    assert files == [] and "minimum age" in notes[0]
    files, _ = discover(entity, [root], min_age_seconds=60, now=fresh.stat().st_mtime + 61)
    assert [f.name for f in files] == ["b.csv"]


def test_settle_skips_files_whose_size_or_mtime_changed_between_two_listings(
    tmp_path: Path,
) -> None:
    entity = _entity(tmp_path)
    root = tmp_path / "landing"
    (root / "customers").mkdir(parents=True)
    done = root / "customers" / "done.csv"
    growing = root / "customers" / "growing.csv"
    done.write_text("x")
    growing.write_text("x")
    files, _ = discover(entity, [root])
    waited: list[float] = []

    def writer_still_busy(seconds: float) -> None:  # the pause between the two listings
        waited.append(seconds)
        with open(growing, "a") as fh:
            fh.write("more rows")

    stable, notes = settle(files, 2.0, sleep=writer_still_busy)
    assert waited == [2.0]
    assert [f.name for f in stable] == ["done.csv"]
    assert "growing.csv" in notes[0] and "changed" in notes[0]


def test_content_hash_is_sha256_of_the_bytes_in_any_chunk_size(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert content_hash(path) == expected
    assert content_hash(path, chunk_size=4096) == expected
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert content_hash(empty) == hashlib.sha256(b"").hexdigest()


def test_lineage_names_come_from_the_one_contract() -> None:
    names = lineage_columns()
    assert list(names)[:9] == [
        "operation",
        "sequence",
        "process_id",
        "file_hash",
        "file_name",
        "row_number",
        "ingested_at",
        "invocation_id",
        "applied_at",
    ], "lineage columns are only ever appended"
    assert all(v.startswith(PREFIX) for v in names.values())
    # No literal copy of a lineage column name anywhere else in the code.
    offenders = []
    for folder in ("runner", "audit", "macros", "dbt_project"):
        for path in (REPO / folder).rglob("*"):
            if {"target", "dbt_packages", "logs"} & set(path.relative_to(REPO).parts):
                continue  # dbt's build output, not code
            if (
                path.is_file()
                and path.suffix in (".py", ".sql", ".yml")
                and path.name != "contract.sql"
            ):
                text = path.read_text(encoding="utf-8")
                offenders += [f"{path}: {n}" for n in names.values() if n in text]
    assert offenders == []


def test_the_audit_db_keeps_the_marker_counts_the_contract_declares() -> None:
    """`runner status` and the run summary show a marker's counts from the Audit DB's copy; its
    columns are the contract's cdc_applied_files counts, no more and no fewer."""
    from audit.store import MARKER_COUNTS
    from runner.contract import state_table

    declared = [c for c in state_table("applied_files").columns if c.startswith("rows_")]
    assert declared, "the contract's markers carry row counts"
    assert sorted(MARKER_COUNTS) == sorted(declared)


@pytest.mark.dbt
@pytest.mark.postgres
def test_dbt_renders_the_same_lineage_names(tmp_path: Path, pg_url: str) -> None:
    from dbt.cli.main import dbtRunner

    root = make_project(tmp_path / "repo")
    proj = root / "dbt_project"
    assert dbtRunner().invoke(["deps", "--project-dir", str(proj)]).success
    result = dbtRunner().invoke(
        [
            "compile",
            "--project-dir",
            str(proj),
            "--profiles-dir",
            str(root),
            "--target",
            "postgres",
            "--inline",
            "{{ tojson(cdc.lineage_columns()) }}",
            "--quiet",
        ]
    )
    assert result.success, result.exception
    compiled = result.result.results[0].node.compiled_code
    assert yaml.safe_load(compiled) == lineage_columns()


def test_generate_is_deterministic_for_a_seed_and_follows_the_shares(tmp_path: Path) -> None:
    import csv

    from runner.samples.generate import GenerateSpec, generate_entity

    entity = _entity(tmp_path)
    spec = GenerateSpec(initial=200, incremental=1000, files=4, delete_share=0.2, update_share=0.4)
    first = generate_entity(entity, tmp_path / "a", spec)
    again = generate_entity(entity, tmp_path / "b", spec)
    other = generate_entity(entity, tmp_path / "c", GenerateSpec(**{**spec.__dict__, "seed": 8}))
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert [p.read_bytes() for p in first] != [p.read_bytes() for p in other]
    ops: dict[str, int] = {}
    seqs = []
    for path in first[1:]:
        with open(path, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                ops[row["Op"]] = ops.get(row["Op"], 0) + 1
                seqs.append(row["AR_H_CHANGE_SEQ"])
    assert sum(ops.values()) == 1000 and len(first) == 5
    assert 150 <= ops["D"] <= 250 and 330 <= ops["U"] <= 470  # 20% and 40%, give or take
    assert len(set(seqs)) == len(seqs) and all(len(s) == 35 for s in seqs)


def test_a_synthetic_entity_declaration_is_valid_and_matches_its_files(tmp_path: Path) -> None:
    from runner.samples.generate import (
        GenerateSpec,
        generate_entity,
        synthetic_declaration,
        synthetic_entity,
    )
    from runner.staging.validate import read_header

    root = make_project(tmp_path / "repo")
    decl = synthetic_declaration("orders", key_columns=2, value_columns=7)
    extra = root / "dbt_project" / "models" / "staging" / "synthetic.yml"
    extra.write_text(yaml.safe_dump({"version": 2, "sources": [{"name": "syn", "tables": [decl]}]}))
    declared = load_entities(Project.load(root, target="local"))["orders"]
    assert declared.keys == ("k1", "k2") and len(declared.columns) == 2 + 2 + 7
    files = generate_entity(
        synthetic_entity("orders", 2, 7), tmp_path / "orders", GenerateSpec(200, 300, 3)
    )
    for path in files:
        header, problem = read_header(path, declared)
        assert problem is None and header == [c.name for c in declared.columns]


def test_real_source_settings_are_read_and_their_mistakes_reported(tmp_path: Path) -> None:
    """The examples users copy (docs/examples) load as declared; DMS's full-load Files are
    read without Op, headerless Files by the declared order; wrong shapes are each reported."""
    from runner.staging.read import dms_file_order
    from runner.staging.validate import read_header

    root = make_project(tmp_path / "repo")
    models = root / "dbt_project" / "models"
    for example in ("dms_defaults", "debezium_defaults"):
        for path in (REPO / "docs" / "examples" / example).iterdir():
            (models / path.name).write_text(path.read_text())
    entities = load_entities(Project.load(root, target="local"))
    dms, products = entities["dms_customers"], entities["products"]
    assert (dms.csv_header, dms.file_order, dms.sequence, dms.sequence_type) == (
        False, "dms", "", "string"
    )  # fmt: skip
    assert (dms.op_missing_means, dms.op_missing_files) == ("I", ("LOAD*",))
    assert products.debezium_encodings == {}  # read from each line's schema

    folder = tmp_path / "files"
    folder.mkdir()
    load, change = folder / "LOAD00000001.csv", folder / "20260301-080500658.csv"
    headed = folder / "LOAD0000000A.csv"
    load.write_text("1,Ann,gold,1.00,2026-03-01 00:00:00\n")
    change.write_text("Op,customer_id,name,tier,balance,updated_at\n")
    assert read_header(load, dms) == (
        ["customer_id", "name", "tier", "balance", "updated_at"],
        None,
    )
    columns, problem = read_header(change, dms)
    assert columns is None and "line 1: a header row, but meta.cdc.csv.header is false" in problem
    with_header = dataclasses.replace(dms, csv_header=True)
    headed.write_text("customer_id,name,tier,balance,updated_at\n")
    assert read_header(headed, with_header)[0] == [
        "customer_id",
        "name",
        "tier",
        "balance",
        "updated_at",
    ]
    # addColumnName=true: only the Files named like a full load may lack Op
    no_op = _written(
        folder / "20260301-090000000.csv", "customer_id,name,tier,balance,updated_at\n"
    )
    problem = read_header(no_op, with_header)[1]
    assert problem is not None and "column 'Op': declared column missing from the header" in problem
    # DMS's order of Files: the full load (hexadecimal counters), then changes by time.
    names = ["20260302-000000001.csv", "LOAD0000000A.csv", "LOAD00000009.csv",
             "20260301-235959999.parquet", "LOAD_2_00000001.csv"]  # fmt: skip
    assert sorted(names, key=lambda n: dms_file_order(n) or "") == [
        "LOAD00000009.csv", "LOAD0000000A.csv", "LOAD_2_00000001.csv",
        "20260301-235959999.parquet", "20260302-000000001.csv",
    ]  # fmt: skip
    assert dms_file_order("customers-extra.csv") is None

    table = yaml.safe_load((REPO / "docs/examples/dms_defaults/dms_customers.yml").read_text())
    cdc = table["sources"][0]["tables"][0]["meta"]["cdc"]
    cdc.update(
        sequence={"file_order": "svn", "ties": "line"},
        operation={"column": "Op", "missing_means": "X", "files": ["a/LOAD*"]},
        csv={"header": "no", "quote": "'"},
    )
    (models / "dms_customers.yml").write_text(yaml.safe_dump(table))
    (models / "products.yml").unlink()
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    for expected in (
        "file_order orders by the File and line alone",
        "file_order 'svn' unknown; accepted: ['dms']",
        "operation.missing_means 'X' is not one of the operation codes (I, U, D)",
        "operation.files must be a file name pattern",
        "csv.header must be true or false, got 'no'",
        "unknown key meta.cdc.csv.quote",
    ):
        assert expected in str(err.value), (expected, str(err.value))


def test_a_sequence_of_several_columns_is_read_in_order_and_its_mistakes_reported(
    tmp_path: Path,
) -> None:
    """docs/examples/debezium_mysql: binlog file, position and row, in that order, each one a
    column that must be present; a column twice or undeclared, a type that cannot be ordered
    (in JSON Files too)."""
    root = make_project(tmp_path / "repo")
    models = root / "dbt_project" / "models"
    example = REPO / "docs" / "examples" / "debezium_mysql" / "mysql_customers.yml"
    (models / example.name).write_text(example.read_text())
    mysql = load_entities(Project.load(root, target="local"))["mysql_customers"]
    assert mysql.sequence_columns == ("binlog_file", "binlog_pos", "binlog_row")
    assert mysql.sequence_type == "string" and mysql.required_columns >= {"binlog_row", "id"}

    doc = yaml.safe_load(example.read_text())
    cdc = doc["sources"][0]["tables"][0]["meta"]["cdc"]
    doc["sources"][0]["tables"][0]["columns"][3]["data_type"] = "double"  # binlog_row
    cdc["sequence"] = ["binlog_file", "binlog_pos", "binlog_pos", "gtid", "binlog_row"]
    (models / example.name).write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    for expected in (
        "sequence column 'binlog_row' must be an integer or a string",
        "meta.cdc.sequence ['binlog_file', 'binlog_pos', 'binlog_pos', 'gtid', 'binlog_row']: "
        "a column twice",
        "sequence column 'gtid' is not among the declared columns",
    ):
        assert expected in str(err.value), (expected, str(err.value))
    cdc.update(format="json", sequence=["binlog_pos", "binlog_row"])
    cdc.pop("debezium")
    (models / example.name).write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    assert (
        "sequence column 'binlog_row': in a sequence of several columns each is an integer, a "
        "decimal, a date, a timestamp or a string, not double"
    ) in str(err.value), str(err.value)


def test_a_reload_is_told_from_the_first_full_load_by_the_batches_staged_before(
    tmp_path: Path,
) -> None:
    """docs/examples/dms_defaults (`reloads: true`): LOAD Files are a reload only after a
    change File was staged; a reload's later batches continue its epoch until a change File is
    staged in a later batch. A reload sorts after the change Files staged before it and before
    the next one, as text and with punctuation ignored (a collation such as en_US)."""
    import re

    from runner.staging import reloads
    from runner.staging.read import dms_file_order

    root = make_project(tmp_path / "repo")
    models = root / "dbt_project" / "models"
    for path in (REPO / "docs" / "examples" / "dms_defaults").iterdir():
        (models / path.name).write_text(path.read_text())
    dms = load_entities(Project.load(root, target="local"))["dms_customers"]
    assert dms.reload_files == ("LOAD*",)
    load1, load2, c1, c2 = ("LOAD00000001.csv", "LOAD00000002.csv",
                            "20260301-080000000.csv", "20260301-100000000.csv")  # fmt: skip
    places = {n: dms_file_order(n) or "" for n in (load1, load2, c1, c2)}

    def plan(earlier: list[list[str]], batch: list[str]) -> reloads.ReloadPlan:
        return reloads.plan(dms, earlier, list(enumerate(batch)), places)

    assert plan([], [load1, c1]).reload_ids == set()  # the first full load
    assert plan([[load1], [load2]], [c1]).reload_ids == set()
    start = plan([[load1, c1]], [load1, load2])
    assert (start.starts, start.reload_ids) == (True, {0, 1})
    assert (
        start.truncate == places[c1] + ".R" and start.places[0] == places[c1] + ".R" + places[load1]
    )
    for earlier in ([[load1, c1], [load1]], [[load1, c1], [load1, c2]]):
        more = plan(earlier, [load2])  # the same reload: no second truncate, the same place
        assert (more.starts, more.reload_ids, more.places[0]) == (False, {0}, start.places[1])
    again = plan([[load1, c1], [load1], [c2]], [load2])  # a change staged since: a new reload
    assert again.starts and again.truncate == places[c2] + ".R"
    staged = [places[c1] + ".000000000007", start.truncate or "",
              start.places[0] + ".000000000001", start.places[1] + ".000000000001",
              places[c2] + ".000000000001"]  # fmt: skip
    assert sorted(staged) == staged
    assert sorted(staged, key=lambda s: re.sub(r"[^0-9A-Za-z]", "", s)) == staged
    assert reloads.batches(
        [("b", datetime(2026, 3, 2), "p2"), ("a", datetime(2026, 3, 1), "p1"),
         ("c", datetime(2026, 3, 2), "p2"), ("d", None, None)]
    ) == [["a"], ["b", "c"]]  # fmt: skip

    table = yaml.safe_load((REPO / "docs/examples/dms_defaults/dms_customers.yml").read_text())
    cdc = table["sources"][0]["tables"][0]["meta"]["cdc"]
    cdc.update(sequence="updated_at", reloads={"files": "a/LOAD*"})
    (models / "dms_customers.yml").write_text(yaml.safe_dump(table))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    for expected in (
        "meta.cdc.reloads must be true (DMS's full-load Files, LOAD*) or {files:",
        "meta.cdc.reloads needs sequence {file_order: dms} or {column: <commit time>, ties: line}",
    ):
        assert expected in str(err.value), (expected, str(err.value))


def test_new_entity_proposes_the_position_each_debezium_connector_writes(tmp_path: Path) -> None:
    """From a MySQL connector's event: binlog file, position and row (the example's sequence);
    from SQL Server's: commit LSN, change LSN, event serial number. Both declarations load."""
    import json

    from runner.scaffold import propose

    sources = {
        "mysql": {"connector": "mysql", "file": "mysql-bin.000003", "pos": 154, "row": 0},
        "sqlserver": {"connector": "sqlserver", "change_lsn": "00000027:00000758:0003",
                      "commit_lsn": "00000027:00000758:0005", "event_serial_no": 1},
    }  # fmt: skip
    wanted = {
        "mysql": ("binlog_file", "binlog_pos", "binlog_row"),
        "sqlserver": ("commit_lsn", "change_lsn", "event_serial_no"),
    }
    root = make_project(tmp_path / "repo")
    for connector, source in sources.items():
        line = {"before": None, "after": {"id": 1, "email": "a@x.org"}, "source": source,
                "op": "c", "ts_ms": 1}  # fmt: skip
        sample = _written(tmp_path / f"{connector}.json", json.dumps(line) + "\n")
        proposal = propose(f"{connector}_customers", sample, keys=["id"])
        for path, text in proposal.files(root / "dbt_project").items():
            path.write_text(text)
        entity = load_entities(Project.load(root, target="local"))[f"{connector}_customers"]
        assert entity.sequence_columns == wanted[connector], proposal.source_yaml()
        assert {entity.debezium_fields[c] for c in wanted[connector]} == {
            f"source.{f}" for f in source if f != "connector"
        }
    example = REPO / "docs" / "examples" / "debezium_mysql" / "mysql_customers.yml"
    doc = yaml.safe_load(example.read_text())
    table = doc["sources"][0]["tables"][0]
    assert table["meta"]["cdc"]["sequence"] == list(wanted["mysql"])
    # debezium: {preset: mysql} declares the same: columns, fields and sequence
    (root / "dbt_project" / "models" / "staging" / "mysql_customers.yml").unlink()
    (root / "dbt_project" / "models" / example.name).write_text(example.read_text())
    explicit = load_entities(Project.load(root, target="local"))["mysql_customers"]
    table["meta"]["cdc"].pop("sequence")
    table["meta"]["cdc"]["debezium"] = {"preset": "mysql"}
    table["columns"] = [c for c in table["columns"] if c["name"] in ("id", "first_name", "email")]
    (root / "dbt_project" / "models" / example.name).write_text(yaml.safe_dump(doc))
    preset = load_entities(Project.load(root, target="local"))["mysql_customers"]
    assert preset.sequence_columns == explicit.sequence_columns
    assert preset.debezium_fields == explicit.debezium_fields
    assert set(preset.columns) == set(explicit.columns)
    table["meta"]["cdc"]["debezium"] = {"preset": "oracle"}
    (root / "dbt_project" / "models" / example.name).write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as err:
        load_entities(Project.load(root, target="local"))
    assert "debezium.preset 'oracle' unknown; accepted: ['mysql', 'sqlserver']" in str(err.value)
    assert "1 problem(s)" in str(err.value), str(err.value)  # not what the preset would declare


def test_new_entity_answered_no_writes_nothing_and_exits_0(tmp_path: Path) -> None:
    """`runner new-entity` asks before writing; "n" is the user's answer, not an error."""
    from click.testing import CliRunner

    from runner.cli import main

    root = make_project(tmp_path / "repo")
    sample = _written(tmp_path / "things.csv", "Op,seq,id,name\nI,1,1,a\n")
    before = sorted(p for p in (root / "dbt_project").rglob("*"))
    args = ["new-entity", "things", "--from", str(sample), "--keys", "id", "--sequence", "seq"]
    said = CliRunner().invoke(main, [*args, "--project-dir", str(root)], input="n\n")
    assert said.exit_code == 0, said.output
    assert said.output.rstrip().endswith("nothing written"), said.output
    assert sorted(p for p in (root / "dbt_project").rglob("*")) == before


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_invalid_utf8_is_reported_with_its_field_wherever_it_is(
    tmp_path: Path, suffix: str
) -> None:
    """The quarantine reason of a bad byte names its line, column and field, on the first data
    line, a few lines in and far into the File (the header is read apart from the rest)."""
    import gzip

    from runner.staging.validate import scan_text_file

    customers = load_entities(Project.load(REPO, target="local"))["customers"]
    header = b"Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\n"

    def good(n: int) -> bytes:
        return f"U,{n:035d},{n},Ann,a@example.com,gold,1.00,2026-03-01\n".encode()

    for before, field in ((0, "name"), (1, "name"), (400, "name"), (2, "email")):
        bad = (
            f"U,{9:035d},9,Zo\xff,a@example.com,gold,1.00,2026-03-01\n"
            if field == "name"
            else f"U,{9:035d},9,Zoe,a\xffb@example.com,gold,1.00,2026-03-01\n"
        ).encode("latin-1")
        body = header + b"".join(good(n) for n in range(1, before + 1)) + bad + good(10)
        path = tmp_path / f"bad_{before}_{field}{suffix}"
        path.write_bytes(gzip.compress(body) if suffix.endswith(".gz") else body)
        problem = scan_text_file(path, customers).problem
        line = before + 2
        column = len(bad.split(b"\xff")[0]) + 1
        assert problem is not None and problem.startswith(
            f"{path.name}: line {line}, column {column} (field '{field}'): not valid UTF-8"
        ), problem


def test_a_newline_inside_quotes_is_found_across_chunks_as_a_reader_of_each_byte_finds_it() -> None:
    """Whether a CSV record spans lines (then its Files are read unsplit), decided chunk by chunk
    from quote positions, equals a byte-by-byte reader's answer, wherever the chunks are cut."""
    import random

    from runner.staging.validate import _newline_in_quotes

    def oracle(text: bytes) -> bool:
        inside = False
        for byte in text:
            if byte == ord('"'):
                inside = not inside
            elif byte == ord("\n") and inside:
                return True
        return False

    rnd = random.Random(7)
    for _ in range(3000):
        text = bytes(rnd.choice(b'ab,"\n') for _ in range(rnd.randint(0, 40)))
        cuts = sorted(rnd.sample(range(len(text) + 1), min(3, len(text) + 1)))
        spans, parity = False, 0
        for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
            found, parity = _newline_in_quotes(text[start:end], parity)
            spans = spans or found
        assert spans == oracle(text), (text, cuts)
        assert parity == text.count(b'"') % 2, text
