"""The job whose JVM writes the Spark class archive (``class_archive``): run as
``python -m runner.destinations.spark.class_archive_job DEST`` by ``make_archive``."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from runner.destinations.spark.class_archive import java_option
from runner.destinations.spark.session import JVM_OUTPUT_TO_STDERR, installed_iceberg_jar


def main(dest: str) -> None:
    """A small job of each kind the runner's JVM runs: delimited text and JSON read with a
    schema, a window, Parquet, and an Iceberg table created, appended to, merged into, deleted
    from and inspected (the Iceberg jar itself is loaded apart and is not archived; the Spark
    classes it calls are)."""
    work = Path(tempfile.mkdtemp(prefix="cdc-class-archive-"))
    try:
        spark = (
            SparkSession.builder.appName("cdc-class-archive")
            .master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.jars", str(installed_iceberg_jar()))
            .config(
                "spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            )
            .config("spark.sql.catalog.work", "org.apache.iceberg.spark.SparkCatalog")
            .config("spark.sql.catalog.work.type", "hadoop")
            .config("spark.sql.catalog.work.warehouse", str(work / "warehouse"))
            .config("spark.sql.warehouse.dir", str(work / "spark-warehouse"))
            .config(
                "spark.driver.extraJavaOptions",
                f"{JVM_OUTPUT_TO_STDERR} {java_option('-XX:ArchiveClassesAtExit', dest)}",
            )
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        (work / "in.csv").write_text("Op,seq,id,name,amount\nI,1,1,a,1.50\nU,2,1,b,2.25\n")
        (work / "in.json").write_text('{"op":"c","id":2,"name":"c"}\n')
        schema = "Op string, seq string, id int, name string, amount decimal(10,2)"
        csv = spark.read.schema(schema).option("header", True).csv(str(work / "in.csv"))
        spark.read.schema("op string, id int, name string").json(str(work / "in.json")).count()
        csv.createOrReplaceTempView("changes")
        last = spark.sql(
            "SELECT *, row_number() OVER (PARTITION BY id ORDER BY seq DESC) AS n, "
            "sha2(concat_ws('|', id, seq), 256) AS h FROM changes"
        ).where("n = 1")
        last.write.parquet(str(work / "out"))
        last.createOrReplaceTempView("last")
        spark.read.parquet(str(work / "out")).groupBy("id").count().collect()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS work.db")
        spark.sql(
            "CREATE TABLE work.db.t (id int, name string, amount decimal(10,2), seq string) "
            "USING iceberg PARTITIONED BY (id) "
            "TBLPROPERTIES ('write.merge.mode' = 'merge-on-read')"
        )
        csv.select("id", "name", "amount", "seq").writeTo("work.db.t").append()
        spark.sql(
            "MERGE INTO work.db.t t USING (SELECT * FROM last WHERE Op <> 'D') s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.name = s.name "
            "WHEN NOT MATCHED THEN INSERT (id, name, amount, seq) "
            "VALUES (s.id, s.name, s.amount, s.seq)"
        )
        spark.sql("DELETE FROM work.db.t WHERE id = 2")
        spark.sql("SELECT snapshot_id, summary FROM work.db.t.snapshots").collect()
        spark.sql("SELECT * FROM work.db.t ORDER BY id").collect()
        spark.sql("DESCRIBE TABLE EXTENDED work.db.t").collect()
        spark.sql("DROP TABLE work.db.t PURGE")
        # The JVM writes the archive as it exits: stop it and wait for that here, so that the
        # archive is whole when this process ends (the JVM exits when its stdin closes).
        gateway = spark.sparkContext._gateway
        spark.stop()
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(timeout=600)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
