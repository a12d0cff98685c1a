"""BigQuery and Databricks cannot be reached from here. Their apply SQL is rendered by dbt with
the real adapter macros loaded and no connection, every statement is parsed by sqlglot in that
dialect, and the Databricks statements also run on local Spark + Iceberg (only the table format
differs: Delta there, Iceberg here) where they must give the oracle's table. The same renders
show which implementation dbt dispatches to on each adapter, and that without the root project's
`dispatch:` entry dbt would never call the package's overrides."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import sqlglot
import yaml
from helpers.project import drop_database, make_project

from runner.contract import lineage_columns, state_tables

pytestmark = pytest.mark.dbt

COLUMNS = {
    "customer_id": ("INT64", "bigint"),
    "name": ("STRING", "string"),
}


def _columns(dialect: int) -> list[tuple[str, str]]:
    lin = lineage_columns()
    types = {
        "operation": ("STRING", "string"),
        "sequence": ("STRING", "string"),
        "process_id": ("STRING", "string"),
        "file_hash": ("STRING", "string"),
        "file_name": ("STRING", "string"),
        "row_number": ("INT64", "bigint"),
        "ingested_at": ("TIMESTAMP", "timestamp"),
        "invocation_id": ("STRING", "string"),
        "applied_at": ("TIMESTAMP", "timestamp"),
    }
    cols = [(n, t[dialect]) for n, t in COLUMNS.items()]
    return cols + [(lin[k], types[k][dialect]) for k in types]


def _inline(columns: list[tuple[str, str]], wrap: str) -> str:
    cols = ", ".join(f"('{n}', '{t}')" for n, t in columns)
    return (
        "{%- set cols = [] -%}"
        f"{{%- for n, t in [{cols}] -%}}{{%- do cols.append(api.Column.create(n, t)) -%}}"
        "{%- endfor -%}"
        "{%- set tgt = api.Relation.create(database=target.database, schema=target.schema, "
        "identifier='customers') -%}"
        "{%- set src = api.Relation.create(identifier='customers__dbt_tmp') -%}"
        "{%- set stmts = cdc.apply_statements(tgt, src, cols, ['customer_id'], 'customers', "
        "'cdc.customers') -%}" + wrap + "\n-- dispatched: "
        "{{ adapter.dispatch('get_merge_sql', 'dbt').macro.package_name }}."
        "{{ adapter.dispatch('get_merge_sql', 'dbt').macro.name }} "
        "{{ adapter.dispatch('create_table_as', 'dbt').macro.package_name }}."
        "{{ adapter.dispatch('create_table_as', 'dbt').macro.name }}"
    )


@pytest.fixture(scope="module")
def render_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project copy whose profiles name BigQuery and Databricks targets nobody can reach."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from dbt.cli.main import dbtRunner

    root = make_project(tmp_path_factory.mktemp("render"))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    profiles = yaml.safe_load((root / "profiles.yml").read_text())
    outputs = profiles["cdc"]["outputs"]
    outputs["bigquery"] = {
        "type": "bigquery",
        "method": "service-account-json",  # a throwaway key: nothing is ever sent
        "project": "cdc-render-only",
        "dataset": "cdc",
        "threads": 1,
        "keyfile_json": {
            "type": "service_account",
            "project_id": "cdc-render-only",
            "private_key_id": "0",
            "private_key": pem,
            "client_email": "render@cdc-render-only.iam.gserviceaccount.com",
            "client_id": "0",
            "token_uri": "https://oauth2.googleapis.com/token",
        },
    }
    outputs["databricks"] = {
        "type": "databricks",
        "host": "render-only.cloud.databricks.com",
        "http_path": "/sql/1.0/warehouses/render-only",
        "token": "not-a-token",
        "catalog": "spark_catalog",  # the local Spark catalog, so the SQL also runs here
        "schema": "render_dbx",
        "threads": 1,
    }
    (root / "profiles.yml").write_text(yaml.safe_dump(profiles))
    res = dbtRunner().invoke(
        ["deps", "--project-dir", str(root / "dbt_project"), "--profiles-dir", str(root)]
    )
    assert res.success, res.exception
    return root


def _compile(root: Path, target: str, *args: str):  # noqa: ANN202
    """`dbt compile` of the project copy at root, for target, with no connection."""
    from dbt.cli.main import dbtRunner

    return dbtRunner().invoke(
        [
            "compile",
            "--project-dir",
            str(root / "dbt_project"),
            "--profiles-dir",
            str(root),
            "--target",
            target,
            "--no-populate-cache",
            *args,
        ]
    )


def _render(root: Path, target: str, inline: str, *extra: str) -> str:
    res = _compile(root, target, "--inline", inline, *extra)
    assert res.success, res.exception
    return res.result.results[0].node.compiled_code


def _statements(script: str, dialect: str) -> list[sqlglot.Expression]:
    parsed = sqlglot.parse(script, read=dialect, error_level=sqlglot.ErrorLevel.RAISE)
    return [e for e in parsed if e is not None and not isinstance(e, sqlglot.exp.Semicolon)]


def test_bigquery_apply_is_one_transaction_that_parses(render_project: Path) -> None:
    sql = _render(
        render_project, "bigquery", _inline(_columns(0), "{{ cdc.bigquery_script(stmts, tgt) }}")
    )
    kinds = [type(e).__name__ for e in _statements(sql, "bigquery")]
    assert kinds == [
        *["Drop"] * 4,  # the temp tables (files, batch, truncate, dedupe), before and after
        *["Transaction", "Create", "Create", "Merge", "Merge", "Insert", "Commit"],
        *["Drop"] * 4,
    ]
    assert "dispatched: cdc.bigquery__get_merge_sql cdc.bigquery__create_table_as" in sql
    assert "`cdc-render-only`.`cdc`.`cdc_applied_files`" in sql


def test_databricks_apply_parses_and_runs_on_local_spark(render_project: Path, spark) -> None:
    wrap = "{{ stmts | join(';\\n') }};"
    sql = _render(
        render_project,
        "databricks",
        _inline(_columns(1), wrap),
        "--vars",
        "{cdc_file_format: iceberg}",
    )
    assert "dispatched: cdc.databricks__get_merge_sql cdc.databricks__create_table_as" in sql
    statements = _statements(sql.split("\n-- dispatched")[0], "databricks")
    # the markers are a MERGE on Spark destinations (macros: write_markers_sql)
    assert [type(e).__name__ for e in statements] == [
        "Create",
        "Create",
        "Merge",
        "Merge",
        "Merge",
    ]

    # The same text, statement by statement, on local Spark + Iceberg tables.
    lin = lineage_columns()
    st = state_tables()
    drop_database(spark, "render_dbx")
    spark.sql("create database render_dbx")
    types = dict(_columns(1))
    spark.sql(
        "create table render_dbx.customers ("
        + ", ".join(f"`{n}` {t}" for n, t in types.items())
        + ") using iceberg"
    )
    spark.sql(
        "insert into render_dbx.customers values (1, 'old', 'I', 's05', 'p0', 'h0', 'f0', 1, "
        "timestamp'2026-03-01 00:00:00', 'i0', timestamp'2026-03-01 00:00:00'),"
        "(2, 'keep', 'I', 's50', 'p0', 'h0', 'f0', 2, timestamp'2026-03-01 00:00:00', 'i0', "
        "timestamp'2026-03-01 00:00:00')"
    )
    for spec in st.values():
        ddl_types = {
            "staged_rows": "bigint",
            "rows_inserted": "bigint",
            "rows_updated": "bigint",
            "rows_deleted": "bigint",
            "rows_skipped": "bigint",
            "staged_at": "timestamp",
            "applied_at": "timestamp",
            "deleted_at": "timestamp",
            "effective_date": "date",
        }
        cols = ", ".join(f"{c} {ddl_types.get(c, 'string')}" for c in spec["columns"])
        spark.sql(f"create table render_dbx.{spec['identifier']} ({cols}) using iceberg")
    spark.sql(
        f"insert into render_dbx.{st['staged_files']['identifier']} values "
        "('customers', 'h1', 'f1.csv', 'p1', 4, current_timestamp(), null),"
        "('customers', 'h2', 'f2.csv', 'p1', 0, current_timestamp(), null)"
    )
    staged = [  # (key, name, op, seq, row): k1 updated twice, k2 stale, k3 inserted then deleted
        (1, "new", "U", "s10", 1),
        (1, "newer", "U", "s20", 2),
        (2, "stale", "U", "s40", 3),
        (3, "gone", "I", "s11", 4),
    ]
    rows = (
        ", ".join(
            f"({k}, '{n}', '{op}', '{s}', 'p1', 'h1', 'f1.csv', {r}, current_timestamp())"
            for k, n, op, s, r in staged
        )
        + ", (3, null, 'D', 's12', 'p1', 'h1', 'f1.csv', 5, current_timestamp())"
    )
    names = [n for n in types if n not in (lin["invocation_id"], lin["applied_at"])]
    spark.sql(f"select * from values {rows} as t({', '.join(names)})").createOrReplaceTempView(
        "customers__dbt_tmp"
    )
    for stmt in statements:
        spark.sql(stmt.sql("spark"))
    result = {
        r["customer_id"]: (r["name"], r[lin["sequence"]])
        for r in spark.sql("select * from render_dbx.customers").collect()
    }
    assert result == {1: ("newer", "s20"), 2: ("keep", "s50")}
    tomb = spark.sql(
        f"select key_text, sequence_text from render_dbx.{st['tombstones']['identifier']}"
    )
    assert [tuple(r) for r in tomb.collect()] == [("1:3", "s12")]
    markers = {
        r["file_name"]: (
            r["rows_inserted"],
            r["rows_updated"],
            r["rows_deleted"],
            r["rows_skipped"],
        )
        for r in spark.sql(
            f"select * from render_dbx.{st['applied_files']['identifier']}"
        ).collect()
    }
    assert markers == {"f1.csv": (0, 1, 1, 3), "f2.csv": (0, 0, 0, 0)}
    drop_database(spark, "render_dbx")


@pytest.mark.parametrize("target", ["bigquery", "databricks"])
def test_without_the_dispatch_entry_dbt_never_calls_the_overrides(
    render_project: Path, tmp_path: Path, target: str
) -> None:
    root = tmp_path / "no_dispatch"
    shutil.copytree(render_project, root, ignore=shutil.ignore_patterns("target", "logs"))
    conf_file = root / "dbt_project" / "dbt_project.yml"
    conf = yaml.safe_load(conf_file.read_text())
    conf.pop("dispatch")
    conf_file.write_text(yaml.safe_dump(conf))
    found = _render(
        root, target, "{{ adapter.dispatch('get_merge_sql', 'dbt').macro.package_name }}"
    )
    assert found.strip() != "cdc"


DISPATCH = (
    "{% for m in ['build_snapshot_table', 'snapshot_staging_table', 'snapshot_merge_sql',"
    " 'create_columns', 'get_merge_sql', 'create_table_as'] %}"
    "{% set found = adapter.dispatch(m, 'dbt').macro %}"
    "{{ m }}={{ found.package_name }}.{{ found.name }}\n{% endfor %}"
)
EXPECTED_DISPATCH = {
    "bigquery": {
        "build_snapshot_table": "cdc.default__build_snapshot_table",
        "snapshot_staging_table": "cdc.default__snapshot_staging_table",
        "snapshot_merge_sql": "cdc.default__snapshot_merge_sql",
        "get_merge_sql": "cdc.bigquery__get_merge_sql",
        "create_table_as": "cdc.bigquery__create_table_as",
    },
    "databricks": {
        "build_snapshot_table": "cdc.default__build_snapshot_table",
        "snapshot_staging_table": "cdc.default__snapshot_staging_table",
        "snapshot_merge_sql": "cdc.spark__snapshot_merge_sql",
        "create_columns": "cdc.spark__create_columns",
        "get_merge_sql": "cdc.databricks__get_merge_sql",
        "create_table_as": "cdc.databricks__create_table_as",
    },
    "postgres": {
        "build_snapshot_table": "cdc.default__build_snapshot_table",
        "snapshot_staging_table": "cdc.default__snapshot_staging_table",
        "snapshot_merge_sql": "cdc.postgres__snapshot_merge_sql",
        "get_merge_sql": "cdc.postgres__get_merge_sql",
        "create_table_as": "cdc.postgres__create_table_as",
    },
    "local": {
        "build_snapshot_table": "cdc.default__build_snapshot_table",
        "snapshot_staging_table": "cdc.default__snapshot_staging_table",
        "snapshot_merge_sql": "cdc.spark__snapshot_merge_sql",
        "create_columns": "cdc.spark__create_columns",
        "get_merge_sql": "cdc.spark__get_merge_sql",
        "create_table_as": "cdc.spark__create_table_as",
    },
}


@pytest.mark.parametrize(
    "target",
    [
        "bigquery",
        "databricks",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("local", marks=pytest.mark.spark),
    ],
)
def test_dbt_dispatches_to_the_package_on_every_adapter(
    render_project: Path, target: str, request: pytest.FixtureRequest
) -> None:
    """An override dbt never calls is a silent no-op: name what dbt actually calls."""
    if target == "local":
        request.getfixturevalue("spark")  # the session dbt-spark's session method will reuse
    out = _render(render_project, target, DISPATCH)
    found = dict(line.split("=", 1) for line in out.strip().splitlines())
    for macro, implementation in EXPECTED_DISPATCH[target].items():
        assert found[macro] == implementation, (target, macro, found[macro])


SNAPSHOT_SQL = """
{{ config(meta={'cdc': {'process_ids': true}}) }}
{%- set strategy = {
    'unique_key': ['id', 'k2'], 'updated_at': 'updated_at', 'hard_deletes': 'invalidate',
    'scd_id': "md5(cast(id as " ~ dbt.type_string() ~ "))",
    'row_changed': '(snapshotted_data.updated_at < source_data.updated_at)',
} -%}
{%- set tgt = api.Relation.create(database=target.database, schema=target.schema,
                                  identifier='items_history') -%}
{%- set stg = api.Relation.create(identifier='items_history__dbt_tmp') -%}
{%- set src = 'select id, k2, v, updated_at from src' -%}
create table {{ tgt }} as {{ build_snapshot_table(strategy, src) }};
create table {{ stg }} as {{ snapshot_staging_table(strategy, src, tgt) }};
{{ snapshot_merge_sql(tgt, stg, ['id', 'k2', 'v']) }}
"""


@pytest.mark.parametrize("target,dialect", [("bigquery", "bigquery"), ("databricks", "databricks")])
def test_snapshot_sql_renders_and_parses(render_project: Path, target: str, dialect: str) -> None:
    sql = _render(render_project, target, SNAPSHOT_SQL)
    statements = _statements(sql, dialect)
    assert [type(e).__name__ for e in statements] == ["Create", "Create", "Merge"]
    lin = lineage_columns()
    for e in statements[:2]:  # the first-run table and the staging rows carry the four columns
        names = {s.alias_or_name for s in e.expression.find(sqlglot.exp.Select).expressions}
        assert {lin["snapshot_insert_process_id"], lin["snapshot_inserted_at"]} <= names
    update = statements[2].find(sqlglot.exp.Update) or statements[2]
    assert lin["snapshot_update_process_id"] in update.sql(dialect)


NASTY = "it's a \\ test' or 'a'='a"


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("databricks", marks=pytest.mark.spark),
        "bigquery",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_every_literal_the_package_renders_is_escaped_for_its_dialect(
    render_project: Path, target: str, request: pytest.FixtureRequest
) -> None:
    """`cdc.sql_string` reads back as the very value on Spark (run here), in BigQuery's
    dialect (parsed) and on PostgreSQL (run here): a quote or backslash in a name or id from
    configuration or the command line cannot end the literal."""
    literal = _render(
        render_project,
        target,
        "{{ cdc.sql_string(var('v')) }}",
        "--vars",
        yaml.safe_dump({"v": NASTY}),
    )
    literal = literal.split("\n")[0].strip()
    if target == "databricks":
        spark = request.getfixturevalue("spark")
        assert spark.sql(f"select {literal} as v").first()["v"] == NASTY
    elif target == "bigquery":
        parsed = sqlglot.parse_one(f"select {literal} as v", read="bigquery")
        assert parsed.find(sqlglot.exp.Literal).this == NASTY
    else:
        import psycopg2

        request.getfixturevalue("pg_url")
        conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="test")
        try:
            with conn.cursor() as cur:
                cur.execute(f"select {literal}")
                assert cur.fetchone()[0] == NASTY
        finally:
            conn.close()


# --- The apply's steps, one at a time ------------------------------------------------------

STEPS = ["lock", "batch_files", "classify", "merge_target", "merge_tombstones", "insert_markers"]
STEP_TARGETS = {  # target: (sqlglot dialect, the adapter's identifier quote)
    "postgres": ("postgres", '"'),
    "bigquery": ("bigquery", "`"),
    "databricks": ("databricks", "`"),
}


def _steps_inline() -> str:
    cols = ", ".join(f"('{n}', '{t}')" for n, t in _columns(1))
    return (
        "{%- set cols = [] -%}"
        f"{{%- for n, t in [{cols}] -%}}{{%- do cols.append(api.Column.create(n, t)) -%}}"
        "{%- endfor -%}"
        "{%- set tgt = api.Relation.create(database=target.database, schema=target.schema, "
        "identifier='customers') -%}"
        "{%- set src = api.Relation.create(identifier='customers__dbt_tmp') -%}"
        "{%- set ctx = cdc._apply_context(tgt, src, cols, ['Customer_ID'], 'customers', "
        "'cdc.customers') -%}"
        + "".join(
            f"\n-- step: {step}\n{{{{ cdc.apply_{step}_sql(ctx) }}}}\n-- end" for step in STEPS
        )
    )


def _steps(sql: str) -> dict[str, str]:
    out = {}
    for part in sql.split("-- step: ")[1:]:
        name, _, body = part.partition("\n")
        out[name.strip()] = body.rsplit("-- end", 1)[0].strip()
    return out


@pytest.fixture(scope="module")
def rendered_steps(render_project: Path) -> dict[str, dict[str, str]]:
    return {t: _steps(_render(render_project, t, _steps_inline())) for t in STEP_TARGETS}


@pytest.mark.parametrize("target", list(STEP_TARGETS))
@pytest.mark.parametrize("step", STEPS)
def test_each_apply_step_renders_alone_with_every_identifier_quoted(
    rendered_steps: dict[str, dict[str, str]], target: str, step: str
) -> None:
    """Each step, rendered by dbt with the real adapter macros and no connection: one statement
    that parses in the adapter's dialect, with every column name quoted (the key too, spelled
    as the table has it, whatever case unique_key used)."""
    dialect, quote = STEP_TARGETS[target]
    sql = rendered_steps[target][step]
    if step == "lock":  # only PostgreSQL serialises applies with a lock
        assert bool(sql) == (target == "postgres"), sql
        if not sql:
            return
    parsed = sql
    if target == "postgres" and step in ("batch_files", "classify"):
        # sqlglot cannot read `on commit drop`: parse the select that fills the temp table.
        head, _, parsed = sql.partition(" on commit drop as ")
        assert head.startswith("create temporary table "), sql
        parsed = f"create table t as {parsed}"
    statements = _statements(parsed, dialect)
    assert len(statements) == 1, sql
    names = {n for n, _ in _columns(1)}
    for spec in state_tables().values():
        names |= set(spec["columns"])
    for name in names:
        bare = re.findall(rf"(?<![\w`\"]){re.escape(name)}(?![\w`\"])", sql)
        assert not bare, (name, sql)
    kind = type(statements[0]).__name__
    expected = {
        "lock": "Select",
        "batch_files": "Create",
        "classify": "Create",
        "merge_target": "Merge",
        "merge_tombstones": "Merge",
        # Spark destinations write markers with a validated MERGE (write_markers_sql)
        "insert_markers": "Merge" if dialect in ("spark", "databricks") else "Insert",
    }[step]
    assert kind == expected, (kind, sql)
    if step in ("merge_target", "classify"):
        assert f"{quote}customer_id{quote}" in sql and "Customer_ID" not in sql


def test_a_project_overrides_one_step_and_the_others_stay(
    render_project: Path, tmp_path: Path, rendered_steps: dict[str, dict[str, str]]
) -> None:
    """A project replaces one step (here the tombstones MERGE, on PostgreSQL) with a macro of its
    own and a dispatch entry for `cdc`; the apply then runs its step and the package's others."""
    root = tmp_path / "override"
    shutil.copytree(render_project, root, ignore=shutil.ignore_patterns("target", "logs"))
    conf_file = root / "dbt_project" / "dbt_project.yml"
    conf = yaml.safe_load(conf_file.read_text())
    conf["dispatch"].append({"macro_namespace": "cdc", "search_order": [conf["name"], "cdc"]})
    conf_file.write_text(yaml.safe_dump(conf))
    (root / "dbt_project" / "macros" / "my_tombstones.sql").write_text(
        "{% macro postgres__apply_merge_tombstones_sql(ctx) %}"
        "{{ return('select 1 as my_own_tombstones') }}{% endmacro %}"
    )
    steps = _steps(_render(root, "postgres", _steps_inline()))
    assert steps["merge_tombstones"] == "select 1 as my_own_tombstones"
    base = rendered_steps["postgres"]
    for step in STEPS:
        if step != "merge_tombstones":
            assert _normalise(steps[step]) == _normalise(base[step]), step


def _normalise(sql: str) -> str:
    """A step's SQL without the invocation id and times, which differ between two renders."""
    sql = re.sub(r"'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'", "'<id>'", sql)
    return " ".join(sql.split())


# --- Apply models are declared, and a declaration that cannot work is a compiler error ------

SELECT = (
    "select customer_id, {{ cdc.lineage_select() }} from {{ cdc.unapplied(ref('stg_customers')) }}"
)
BAD_APPLY_MODELS = {
    "not declared": ("{{ config(materialized='incremental') }}", "is not an apply model"),
    "not incremental": (
        "{{ config(materialized='table', meta={'cdc': {'apply': true}}) }}",
        "must be materialized incremental",
    ),
    "no merge": (
        "{{ config(materialized='incremental', unique_key='customer_id', "
        "meta={'cdc': {'apply': true}}) }}",
        "needs incremental_strategy: merge",
    ),
    "no key": (
        "{{ config(materialized='incremental', incremental_strategy='merge', "
        "meta={'cdc': {'apply': true}}) }}",
        "needs unique_key",
    ),
    "not a flag": (
        "{{ config(materialized='incremental', incremental_strategy='merge', "
        "unique_key='customer_id', meta={'cdc': {'apply': 'yes'}}) }}",
        "meta.cdc.apply must be true or false",
    ),
}


@pytest.mark.postgres
@pytest.mark.parametrize("case", list(BAD_APPLY_MODELS))
def test_an_apply_model_that_lacks_what_it_needs_is_a_compiler_error(
    render_project: Path, tmp_path: Path, case: str
) -> None:
    root = tmp_path / "bad"
    shutil.copytree(render_project, root, ignore=shutil.ignore_patterns("target", "logs"))
    config, message = BAD_APPLY_MODELS[case]
    (root / "dbt_project" / "models" / "bad_apply.sql").write_text(f"{config}\n{SELECT}\n")
    res = _compile(root, "postgres", "--select", "bad_apply")
    assert not res.success
    errors = [r.message for r in (res.result.results if res.result else [])] + [str(res.exception)]
    assert any(message in str(e) and "bad_apply" in str(e) for e in errors), errors
