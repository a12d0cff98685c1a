"""Debezium's encoded values decoded to the text of the declared type, before the cast.

Kafka Connect and Debezium write some types as encodings a plain cast cannot read: a decimal
(``decimal.handling.mode=precise``, the default) as the base64 of its unscaled value's
big-endian two's complement with the scale in the schema; dates as days and times and
timestamps as counts of milli-, micro- or nanoseconds since the epoch or midnight
(``time.precision.mode=adaptive``, the default). Each value's logical type comes from its
line's schema (``schema.fields[].name``/``parameters.scale``, when the converter wrote
schemas) or else from the entity's ``meta.cdc.debezium.encodings``.

A decoded value is exact text (``-123.45``, ``2026-03-01 08:05:00.123456789``,
``08:05:00.5``), so the usual cast and its exactness check follow: a value the declared type
cannot hold unchanged (more fraction digits than the scale, nanoseconds in a timestamp) is
reported with its line and field, never rounded. A decimal declared as ``string`` is not
decoded: it keeps the text the connector sent (base64, or ``{scale, value}`` as JSON). A
value that is not a valid encoding is reported the same way (``problems``). Every function here
builds Spark SQL expressions; no Python runs per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.entities import INTEGER_TYPES, Entity

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
# logical type -> units per second of its count
TIMES = {
    "io.debezium.time.Time": 1000,
    "org.apache.kafka.connect.data.Time": 1000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
}
TIMESTAMPS = {
    "io.debezium.time.Timestamp": 1000,
    "org.apache.kafka.connect.data.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
# The schema of a line's ``schema`` object, as far as decoding reads it: the envelope's
# fields, and for ``before``/``after`` their fields' logical names and parameters.
SCHEMA_DDL = (
    "fields array<struct<field: string, fields: array<struct<field: string, name: string, "
    "parameters: map<string, string>>>>>"
)
SCHEMA = "__schema_fields"


def line_schema(schema_text: Column) -> Column:
    """A wrapped line's row image types: field name -> {name: its logical type, scale}, from
    the schema of ``after`` (or ``before``: Debezium gives both the same); NULL on a bare
    line."""
    from pyspark.sql import functions as F

    sides = F.from_json(schema_text, SCHEMA_DDL)["fields"]

    def side(name: str) -> Column:
        return F.filter(sides, lambda f: f["field"] == F.lit(name))[0]["fields"]

    fields = F.filter(F.coalesce(side("after"), side("before")), lambda g: g["field"].isNotNull())
    return F.map_from_entries(
        F.transform(
            fields,
            lambda g: F.struct(
                g["field"].alias("key"),
                F.struct(
                    g["name"].alias("name"), g["parameters"]["scale"].cast("int").alias("scale")
                ).alias("value"),
            ),
        )
    )


def decode_columns(
    df: DataFrame, entity: Entity, values: dict[str, Column], wrapped: bool
) -> tuple[DataFrame, dict[str, Column], list[Column]]:
    """``df`` with the decoding of ``values`` (column -> its raw row image value) added, in
    a few projections (each intermediate value computed once, not repeated in the next
    expression); returns (df, column -> its decoded text, the problems: why a value cannot be
    decoded, or NULL). ``wrapped``: lines may carry a schema (so every column may be
    encoded); without it, only the columns of ``meta.cdc.debezium.encodings`` are."""
    from pyspark.sql import functions as F

    out: dict[str, Column] = {}
    problems: list[Column] = []
    coded = [c for c in values if wrapped or c in entity.debezium_encodings]
    for c in values:
        if c not in coded:
            out[c] = values[c]
    if not coded:
        return df, out, problems

    def col(i: int, part: str) -> str:
        return f"__decode{i}_{part}"

    step: dict[str, Column] = {}
    for i, c in enumerate(coded):
        declared = entity.debezium_encodings.get(c)
        name: Column = F.lit(declared[0] if declared else None).cast("string")
        scale: Column = F.lit(declared[1] if declared else None).cast("int")
        if wrapped:
            found = F.try_element_at(F.col(SCHEMA), F.lit(c))
            name = F.coalesce(found["name"], name)
            scale = F.coalesce(found["scale"], scale)
        step[col(i, "v")] = values[c]
        step[col(i, "n")] = name
        step[col(i, "s")] = scale
    df = df.withColumns(step)
    step = {}
    for i, _ in enumerate(coded):
        v, n, s = F.col(col(i, "v")), F.col(col(i, "n")), F.col(col(i, "s"))
        variable = n == F.lit(VARIABLE_DECIMAL)
        b64 = F.when(variable, F.get_json_object(v, "$.value")).otherwise(v)
        step[col(i, "s")] = F.when(variable, F.get_json_object(v, "$.scale").cast("int")).otherwise(
            s
        )
        step[col(i, "h")] = F.when(
            n.isin(DECIMAL, VARIABLE_DECIMAL),
            F.hex(F.call_function("try_to_binary", b64, F.lit("base64"))),
        )
        step[col(i, "u")] = _count(v)
        step[col(i, "tu")] = F.try_element_at(_units(TIMES), n)
        step[col(i, "su")] = F.try_element_at(_units(TIMESTAMPS), n)
    df = df.withColumns(step)
    step = {}
    for i, _ in enumerate(coded):
        h = F.col(col(i, "h"))
        step[col(i, "neg")] = F.substring(h, 1, 1).isin("8", "9", "A", "B", "C", "D", "E", "F")
    df = df.withColumns(step)
    step = {}
    for i, _ in enumerate(coded):
        h, neg = F.col(col(i, "h")), F.col(col(i, "neg"))
        # Two's complement: a negative value is -(NOT bits + 1); NOT is one hex digit at a time.
        flipped = F.when(neg, F.translate(h, "0123456789ABCDEF", "FEDCBA9876543210"))
        step[col(i, "m")] = _hex_to_decimal(flipped.otherwise(h))
    df = df.withColumns(step)
    step = {}
    for i, _ in enumerate(coded):
        m, neg = F.col(col(i, "m")), F.col(col(i, "neg"))
        step[col(i, "x")] = F.when(neg, -(m + F.lit(1))).otherwise(m)
    df = df.withColumns(step)
    step = {}
    for i, _ in enumerate(coded):
        x, s = F.col(col(i, "x")), F.col(col(i, "s"))
        digits = F.abs(x).cast("string")
        step[col(i, "p")] = F.call_function(
            "lpad", digits, F.greatest(F.length(digits), s + F.lit(1)), F.lit("0")
        )
    df = df.withColumns(step)
    step = {}
    for i, c in enumerate(coded):
        v, n, s, h = (F.col(col(i, k)) for k in ("v", "n", "s", "h"))
        x, p, u = F.col(col(i, "x")), F.col(col(i, "p")), F.col(col(i, "u"))
        point = F.length(p) - s
        number = F.concat(
            F.when(x < F.lit(0), F.lit("-")).otherwise(F.lit("")),
            F.when(s == F.lit(0), p).otherwise(
                F.concat(
                    F.call_function("substr", p, F.lit(1), point),
                    F.lit("."),
                    F.call_function("substr", p, point + F.lit(1)),
                )
            ),
        )
        valid = (F.length(h) > 0) & (s >= 0) & x.isNotNull()
        declared_type = entity.column(c).data_type.strip().lower()
        # a decimal declared as text keeps what the connector sent (base64, {scale, value})
        as_sent = declared_type == "string" or declared_type.startswith(("varchar", "char"))
        text = F.when(n.isin(DECIMAL, VARIABLE_DECIMAL), v if as_sent else F.when(valid, number))
        if declared_type not in INTEGER_TYPES:  # an integer keeps the count
            time_unit, stamp_unit = F.col(col(i, "tu")), F.col(col(i, "su"))
            text = text.when(n.isin(*DATES), _date_text(u))
            text = text.when(time_unit.isNotNull(), _time_text(u, time_unit))
            text = text.when(stamp_unit.isNotNull(), _timestamp_text(u, stamp_unit))
        step[col(i, "t")] = text.otherwise(v)
    df = df.withColumns(step)
    for i, c in enumerate(coded):
        v, n, s, t = (F.col(col(i, k)) for k in ("v", "n", "s", "t"))
        out[c] = t
        problems.append(
            F.when(
                v.isNotNull() & t.isNull(),
                F.concat(
                    F.lit(f"field 'after.{c}': "),
                    F.concat(F.lit('"'), F.substring(v, 1, 60), F.lit('"')),
                    F.lit(" is not a valid "),
                    n,
                    F.when(
                        n == F.lit(DECIMAL),
                        F.concat(F.lit(" (scale "), s.cast("string"), F.lit(")")),
                    ).otherwise(F.lit("")),
                ),
            )
        )
    return df, out, problems


def _hex_to_decimal(hexed: Column) -> Column:
    """An unsigned hexadecimal string as decimal(38,0), 14 digits (56 bits) at a time (NULL
    beyond 38 digits)."""
    from pyspark.sql import functions as F

    width = F.ceil(F.length(hexed) / F.lit(14)).cast("int")
    padded = F.call_function("lpad", hexed, width * F.lit(14), F.lit("0"))
    return F.aggregate(
        F.sequence(F.lit(0), width - F.lit(1)),
        F.lit(0).cast("decimal(38,0)"),
        lambda acc, i: (
            acc * F.lit(72057594037927936).cast("decimal(38,0)")
            + F.conv(
                F.call_function("substr", padded, i * F.lit(14) + F.lit(1), F.lit(14)), 16, 10
            ).cast("decimal(38,0)")
        ).cast("decimal(38,0)"),
    )


def _div(count: Column, per_second: Column) -> Column:
    """Whole seconds of a count, exactly (decimal division: a double loses nanoseconds)."""
    from pyspark.sql import functions as F

    return F.floor(count.cast("decimal(20,0)") / per_second.cast("decimal(20,0)")).cast("bigint")


def _units(units: dict[str, int]) -> Column:
    """A literal map: logical type -> units per second."""
    from pyspark.sql import functions as F

    return F.create_map(*[F.lit(x) for kv in units.items() for x in kv])


def _count(value: Column) -> Column:
    """An integer count (days, units since the epoch or midnight), or NULL when not one."""
    from pyspark.sql import functions as F

    return F.when(F.trim(value).rlike(r"^-?[0-9]{1,19}$"), F.trim(value).cast("bigint"))


def _date_text(days: Column) -> Column:
    """A count of days since the epoch as yyyy-MM-dd."""
    from pyspark.sql import functions as F

    return F.date_format(
        F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int")), "yyyy-MM-dd"
    )


def _clock(seconds_of_day: Column) -> Column:
    """HH:mm:ss of a number of seconds since midnight (0 to 86399)."""
    from pyspark.sql import functions as F

    def two(x: Column) -> Column:
        return F.lpad(x.cast("string"), 2, "0")

    return F.concat_ws(
        ":",
        two(F.floor(seconds_of_day / 3600)),
        two(F.floor(F.pmod(seconds_of_day, F.lit(3600)) / 60)),
        two(F.pmod(seconds_of_day, F.lit(60))),
    )


def _fraction(units: Column, per_second: Column) -> Column:
    """The fraction of a second of a count, as digits (3 for ms, 6 for us, 9 for ns)."""
    from pyspark.sql import functions as F

    digits = F.length(per_second.cast("string")) - F.lit(1)
    return F.call_function("lpad", F.pmod(units, per_second).cast("string"), digits, F.lit("0"))


def _time_text(units: Column, per_second: Column) -> Column:
    """A time of day (a count of units since midnight) as HH:mm:ss.fraction."""
    from pyspark.sql import functions as F

    seconds = _div(units, per_second)
    ok = units.isNotNull() & (units >= 0) & (seconds < 86400)
    return F.when(ok, F.concat(_clock(seconds), F.lit("."), _fraction(units, per_second)))


def _timestamp_text(units: Column, per_second: Column) -> Column:
    """A count of units since the epoch (UTC) as yyyy-MM-dd HH:mm:ss.fraction, computed
    without the session's time zone."""
    from pyspark.sql import functions as F

    seconds = _div(units, per_second)
    days = F.floor(seconds / F.lit(86400))
    day = F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int"))
    text = F.concat(
        F.date_format(day, "yyyy-MM-dd"),
        F.lit(" "),
        _clock(F.pmod(seconds, F.lit(86400))),
        F.lit("."),
        _fraction(units, per_second),
    )
    return F.when(units.isNotNull(), text)
