"""Debezium JSON lines (format: debezium): envelopes bare and wrapped in schema/payload, staged
as flat rows (after, or before for a delete; envelope fields as declared columns), ordered by
the declared source field, then ts_ms, then the line; envelopes that do not match the
declaration are quarantined with file, line and field. Expectations are written out from the
envelopes below, independently of the runner."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.project import drop_database, ingest_here

from runner.contract import lineage_columns
from runner.project import Project

pytestmark = pytest.mark.spark

COLUMNS = """
        columns:
          - {name: op, data_type: string}
          - {name: lsn, data_type: bigint}
          - {name: event_ms, data_type: bigint}
          - {name: source_table, data_type: string}
          - {name: tx_id, data_type: string}
          - {name: order_id, data_type: bigint}
          - {name: amount, data_type: "decimal(10,2)"}
          - {name: status, data_type: string}
"""
SOURCES = f"""
version: 2
sources:
  - name: cdc_debezium
    schema: "{{{{ target.schema }}}}"
    tables:
      - name: dbz_orders
        identifier: dbz_orders__staged
        meta:
          cdc:
            landing: "dbz_orders/*"
            format: debezium
            keys: [order_id]
            sequence: lsn
            debezium:
              fields: {{op: op, lsn: source.lsn, event_ms: ts_ms, source_table: source.table,
                        tx_id: transaction.id}}
{COLUMNS}
      - name: dbz_wrapped
        identifier: dbz_wrapped__staged
        meta:
          cdc:
            landing: "dbz_wrapped/*"
            format: debezium
            keys: [order_id]
            sequence: lsn
            debezium:
              envelope: payload
              fields: {{op: op, lsn: source.lsn, event_ms: ts_ms, source_table: source.table,
                        tx_id: transaction.id}}
{COLUMNS}
"""


def envelope(
    op: str,
    lsn: int,
    ts: int,
    order_id: int | None,
    amount: str | None = "1.00",
    status: str | None = "new",
    tx: str = "t1",
) -> dict:
    image = {"order_id": order_id, "amount": amount, "status": status}
    return {
        "before": image if op == "d" else None,
        "after": None if op == "d" else image,
        "source": {"connector": "postgresql", "table": "orders", "lsn": lsn},
        "op": op,
        "ts_ms": ts,
        "transaction": {"id": tx, "total_order": 1, "data_collection_order": 1},
    }


def wrapped(env: dict) -> dict:
    return {"schema": {"type": "struct", "name": "shop.public.orders.Envelope"}, "payload": env}


def lines(*records: dict | str) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_debezium_envelopes_are_staged_and_bad_ones_quarantined_with_line_and_field(
    spark, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_SCHEMA", "debezium_test")
    declared = spark_project / "dbt_project" / "models" / "staging" / "test_debezium.yml"
    declared.write_text(SOURCES)
    try:
        project = Project.load(spark_project, target="local")
        landing = tmp_path / "landing"
        orders, wrapped_dir = landing / "dbz_orders", landing / "dbz_wrapped"
        orders.mkdir(parents=True)
        wrapped_dir.mkdir(parents=True)
        good = [
            envelope("r", 100, 5000, 1, "10.00", "new"),  # snapshot read
            wrapped(envelope("c", 110, 5001, 2, "20.50", "new")),  # a wrapped line, same File
            envelope("u", 120, 5002, 1, "11.00", "paid"),
            envelope("d", 130, 5003, 2, "20.50", "new"),  # the key from `before`
            # two events of key 3 with the same lsn and ts_ms: the later line is the later
            envelope("c", 140, 5004, 3, "1.00", "new"),
            envelope("u", 140, 5004, 3, "2.00", "paid"),
            envelope("u", 120, 5002, 1, "11.00", "paid"),  # a redelivered event: dropped
            {"op": "t", "ts_ms": 5005, "source": {"lsn": 150, "table": "orders"}},  # truncate
        ]
        (orders / "good.json").write_text(lines(*good))
        with gzip.open(orders / "more.json.gz", "wt") as fh:
            fh.write(lines(envelope("u", 160, 5006, 1, "12.00", "shipped")))
        bad = {
            "no_after.json": (
                lines(envelope("c", 1, 1, 9), {**envelope("c", 2, 2, 8), "after": None}),
                "line 2, field 'after': missing on an event with op \"c\"",
            ),
            "unknown_op.json": (
                lines({**envelope("c", 1, 1, 9), "op": "x"}),
                "line 1, field 'op': unknown operation code \"x\" (accepted: c, r, u, d, t)",
            ),
            "schema_only.json": (
                lines({"schema": {"type": "struct"}, **envelope("c", 1, 1, 9)}),
                "line 1, field 'payload': missing next to 'schema'",
            ),
            "broken.json": (
                lines(envelope("c", 1, 1, 9), '{"op": "c", "after": {"order_id": '),
                "line 2, not a Debezium envelope",
            ),
            "no_before.json": (
                lines({**envelope("d", 1, 1, 9), "before": None}),
                "line 1, field 'before': missing on a delete (op \"d\")",
            ),
            "bad_amount.json": (
                lines(envelope("c", 1, 1, 9), envelope("u", 2, 2, 9, amount="12.345")),
                "line 2, field 'after.amount': \"12.345\" does not fit decimal(10,2) unchanged",
            ),
            "no_key.json": (
                lines(envelope("u", 1, 1, None)),
                "line 1, field 'after.order_id': NULL in a key",
            ),
            "no_lsn.json": (
                lines({**envelope("u", 1, 1, 9), "source": {"table": "orders"}}),
                "line 1, field 'source.lsn': NULL in a key or sequence",
            ),
        }
        for name, (text, _) in bad.items():
            (orders / name).write_text(text)
        (wrapped_dir / "good.json").write_text(lines(wrapped(envelope("c", 1, 1, 7))))
        (wrapped_dir / "plain.json").write_text(
            lines(wrapped(envelope("c", 1, 1, 7)), envelope("u", 2, 2, 7))
        )

        db = ingest_here(
            project, spark, tmp_path / "audit.db", landing, "dbz_orders", "dbz_wrapped"
        )
        states = {Path(f.path).parent.name + "/" + Path(f.path).name: f for f in db.files()}
        for name, (_, message) in bad.items():
            rec = states["dbz_orders/" + name]
            assert rec.state == "QUARANTINED", name
            assert f"{name}: {message}" in rec.last_error, (name, rec.last_error)
        plain = states["dbz_wrapped/plain.json"]
        assert plain.state == "QUARANTINED"
        assert (
            "plain.json: line 2, field 'payload': missing (meta.cdc.debezium.envelope is payload"
            in (plain.last_error)
        )
        for name in ("dbz_orders/good.json", "dbz_orders/more.json.gz", "dbz_wrapped/good.json"):
            assert states[name].state == "STAGED", (name, states[name].last_error)

        lin = lineage_columns()
        got = sorted(
            (
                r[lin["file_name"]],
                r[lin["row_number"]],
                r[lin["operation"]],
                r[lin["sequence"]],
                r["op"],
                r["lsn"],
                r["event_ms"],
                r["source_table"],
                r["tx_id"],
                r["order_id"],
                r["amount"],
                r["status"],
            )
            for r in spark.sql("select * from debezium_test.dbz_orders__staged").collect()
        )

        def seq(lsn: int, ts: int, tie: int = 0) -> str:
            return f"{lsn:020d}.{ts:015d}.{tie:04d}"

        d = Decimal
        want = sorted(
            [
                (
                    "good.json",
                    1,
                    "I",
                    seq(100, 5000),
                    "r",
                    100,
                    5000,
                    "orders",
                    "t1",
                    1,
                    d("10.00"),
                    "new",
                ),
                (
                    "good.json",
                    2,
                    "I",
                    seq(110, 5001),
                    "c",
                    110,
                    5001,
                    "orders",
                    "t1",
                    2,
                    d("20.50"),
                    "new",
                ),
                (
                    "good.json",
                    3,
                    "U",
                    seq(120, 5002),
                    "u",
                    120,
                    5002,
                    "orders",
                    "t1",
                    1,
                    d("11.00"),
                    "paid",
                ),
                (
                    "good.json",
                    4,
                    "D",
                    seq(130, 5003),
                    "d",
                    130,
                    5003,
                    "orders",
                    "t1",
                    2,
                    d("20.50"),
                    "new",
                ),
                (
                    "good.json",
                    5,
                    "I",
                    seq(140, 5004, 0),
                    "c",
                    140,
                    5004,
                    "orders",
                    "t1",
                    3,
                    d("1.00"),
                    "new",
                ),
                (
                    "good.json",
                    6,
                    "U",
                    seq(140, 5004, 1),
                    "u",
                    140,
                    5004,
                    "orders",
                    "t1",
                    3,
                    d("2.00"),
                    "paid",
                ),
                (
                    "good.json",
                    8,
                    "T",
                    seq(150, 5005),
                    "t",
                    150,
                    5005,
                    "orders",
                    None,
                    None,
                    None,
                    None,
                ),
                (
                    "more.json.gz",
                    1,
                    "U",
                    seq(160, 5006),
                    "u",
                    160,
                    5006,
                    "orders",
                    "t1",
                    1,
                    d("12.00"),
                    "shipped",
                ),
            ]
        )
        assert got == want
        db.dispose()
    finally:
        declared.unlink()


TEXT_SOURCES = """
version: 2
sources:
  - name: cdc_debezium_text
    schema: "{{ target.schema }}"
    tables:
      - name: dbz_text
        identifier: dbz_text__staged
        meta:
          cdc:
            landing: "dbz_text/*"
            format: debezium
            keys: [order_id]
            sequence: lsn
            debezium:
              fields: {op: op, lsn: source.lsn}
              encodings:
                amount: {name: org.apache.kafka.connect.data.Decimal, scale: 2}
                weight: io.debezium.data.VariableScaleDecimal
                price: {name: org.apache.kafka.connect.data.Decimal, scale: 2}
        columns:
          - {name: op, data_type: string}
          - {name: lsn, data_type: bigint}
          - {name: order_id, data_type: bigint}
          - {name: amount, data_type: string}
          - {name: weight, data_type: string}
          - {name: price, data_type: "decimal(10,2)"}
"""


def test_a_decimal_declared_as_string_keeps_the_value_the_connector_sent(
    spark, spark_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sources.md: a Decimal (base64 of the unscaled value) or VariableScaleDecimal
    ({scale, value}, as JSON text) declared `string` is staged as the connector sent it;
    declared `decimal(p,s)`, decoded. 0x01E2 is 482: 4.82 at scale 2."""
    monkeypatch.setenv("CDC_SCHEMA", "debezium_text_test")
    declared = spark_project / "dbt_project" / "models" / "staging" / "test_debezium_text.yml"
    declared.write_text(TEXT_SOURCES)
    try:
        project = Project.load(spark_project, target="local")
        folder = tmp_path / "landing" / "dbz_text"
        folder.mkdir(parents=True)
        variable = {"scale": 3, "value": "AeI="}
        image = {"order_id": 1, "amount": "AeI=", "weight": variable, "price": "AeI="}
        event = {"before": None, "after": image, "source": {"lsn": 10}, "op": "c", "ts_ms": 1}
        (folder / "one.json").write_text(lines(event))
        db = ingest_here(project, spark, tmp_path / "audit.db", folder.parent, "dbz_text")
        rows = spark.sql(
            "select amount, weight, price from debezium_text_test.dbz_text__staged"
        ).collect()
        assert [(r[0], json.loads(r[1]), r[2]) for r in rows] == [
            ("AeI=", variable, Decimal("4.82"))
        ]
        db.dispose()
    finally:
        declared.unlink()
        drop_database(spark, "debezium_text_test")
