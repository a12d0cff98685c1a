"""The PySpark job a data engineer would write instead of the framework: the baseline of
`make bench`'s whole-process comparison.

Read the Files with the declared schema, keep the last change per key by sequence, apply them
with one Iceberg MERGE (deletes included). No audit, no markers, no late-File safety, no
validation beyond the cast. ``--floor`` instead writes every row once (the least any staging
can do). It uses the Spark settings of the project's target (the same catalog, memory and
cores as `runner run`), so the two differ only in what they do.

    python bench/handwritten_job.py --root DIR --landing DIR/customers --table bench.hand
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="project root (its profile)")
    parser.add_argument("--landing", help="folder of the entity's CSV Files")
    parser.add_argument("--table", required=True, help="schema.table to merge into")
    parser.add_argument("--floor", action="store_true", help="write every row once instead")
    parser.add_argument(
        "--digest",
        action="store_true",
        help="print the table's rows and a hash of its business columns as JSON instead",
    )
    args = parser.parse_args()
    if args.landing is None and not args.digest:
        parser.error("--landing is needed, except with --digest")

    from runner.destinations import destination_for
    from runner.destinations.spark.catalog import ensure_schema
    from runner.entities import load_entities
    from runner.project import Project

    project = Project.load(args.root, target="local")
    entity = load_entities(project)["customers"]
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    conf = destination_for(project).spark_conf()
    ensure_schema(conf)  # the catalog's schema in PostgreSQL, as a deployment has it
    builder = SparkSession.builder.appName("handwritten")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    if args.digest:  # the same rows, whichever side wrote the table (its own columns aside)
        business = [c.name for c in entity.columns if c.name not in ("Op", entity.sequence)]
        text = ", ".join(f"cast(`{c}` as string)" for c in business)
        row = spark.sql(
            f"select count(*) as n, sum(cast(xxhash64({text}) as decimal(38, 0))) as h "
            f"from {args.table}"
        ).first()
        print(json.dumps({"rows": int(row["n"]), "hash": str(row["h"])}))
        return
    schema = ", ".join(f"`{c.name}` {c.data_type}" for c in entity.columns)
    df = spark.read.schema(schema).option("header", True).option("escape", '"').csv(args.landing)
    db = args.table.split(".")[0]
    spark.sql(f"create database if not exists {db}")
    if args.floor:
        df.writeTo(args.table).using("iceberg").createOrReplace()
        return
    key, seq = entity.keys[0], entity.sequence
    last = (
        df.withColumn("rn", F.row_number().over(Window.partitionBy(key).orderBy(F.desc(seq))))
        .where("rn = 1")
        .drop("rn")
    )
    last.createOrReplaceTempView("last_change")
    cols = [c.name for c in entity.columns if c.name not in ("Op", seq)]
    spark.sql(
        f"create table if not exists {args.table} ("
        + ", ".join(f"`{c.name}` {c.data_type}" for c in entity.columns if c.name in cols)
        + ") using iceberg"
    )
    spark.sql(
        f"merge into {args.table} t using last_change s on t.{key} = s.{key} "
        "when matched and s.Op = 'D' then delete "
        f"when matched then update set {', '.join(f't.{c} = s.{c}' for c in cols)} "
        f"when not matched and s.Op <> 'D' then insert ({', '.join(cols)}) "
        f"values ({', '.join(f's.{c}' for c in cols)})"
    )


if __name__ == "__main__":
    main()
