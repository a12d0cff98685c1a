"""Key and row hashes of snapshot-mode rows: computed once, by Spark, while a File is staged,
and kept with the row (the contract's lineage columns key_hash and row_hash), so the apply
compares two short columns instead of whole rows, on every destination alike.

The algorithm (fixed; a change would make every stored hash differ from new ones):

1. Each column's typed value becomes text:
   - string, varchar, char: the value itself;
   - tinyint, smallint, int, bigint: decimal digits, ``-`` for negatives;
   - decimal(p,s): plain notation with exactly ``s`` digits after the point (``10.50``);
   - float, double: Java's ``Double.toString`` (``1.5``, ``1.0E10``), as Spark casts it;
   - boolean: ``true`` or ``false``;
   - date: ``yyyy-MM-dd``; timestamp: ``yyyy-MM-dd HH:mm:ss.SSSSSS`` in UTC;
   - binary: upper-case hexadecimal.
2. Each value is encoded as ``<length>:<text>`` (length in characters), NULL as ``~``; so no
   value can be mistaken for another or for a NULL, whatever characters it holds.
3. The encodings are joined with ``|`` in order: the key columns in the order of
   ``meta.cdc.keys`` for the key hash, the compared columns in declared order for the row hash.
4. The hash is SHA-256 of the UTF-8 bytes, as 64 lower-case hexadecimal characters.

Example: a key (42, 'a|b') hashes ``sha256("2:42|3:a|b")``; a row (NULL, '') hashes
``sha256("~|0:")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

NULL = "~"
SEPARATOR = "|"


def _text(column: Column, data_type: str) -> Column:
    """The value as the text step 1 describes."""
    from pyspark.sql import functions as F

    t = data_type.strip().lower()
    if t == "date":
        return F.date_format(column, "yyyy-MM-dd")
    if t == "timestamp":  # an instant: rendered in UTC whatever the session's time zone
        utc = F.to_utc_timestamp(column, F.current_timezone())
        return F.date_format(utc, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if t == "timestamp_ntz":
        return F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    if t == "binary":
        return F.hex(column)
    # Integers, booleans, doubles; decimals: Spark casts them to plain notation with exactly
    # the scale's digits (spark.sql.legacy.castDecimalToString... is not set by the runner).
    return column.cast("string")


def hash_of(columns: list[tuple[str, str]]) -> Column:
    """SHA-256 (hex) of the encoded values of ``columns``, (name, declared type) in order."""
    from pyspark.sql import functions as F

    parts = []
    for name, data_type in columns:
        text = _text(F.col(name), data_type)
        parts.append(
            F.when(F.col(name).isNull(), F.lit(NULL)).otherwise(
                F.concat(F.length(text).cast("string"), F.lit(":"), text)
            )
        )
    return F.sha2(F.concat_ws(SEPARATOR, *parts), 256)
