"""`make bench`: the framework against what a user would otherwise do, as ratios in one run.

Everything runs in this one process with one local SparkSession (the JVM start is paid once,
by neither side), on data from `runner generate`'s generator, in a scratch project under
bench/work/. Each figure is the median of --repeat runs. Results: bench/results/latest.json
and a table on stdout.

    python bench/run.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "work"
sys.path.insert(0, str(REPO))

import report  # noqa: E402

from audit import AuditDB  # noqa: E402
from runner.destinations import destination_for  # noqa: E402
from runner.destinations.spark.session import link_iceberg_jar  # noqa: E402
from runner.entities import load_entities  # noqa: E402
from runner.ids import new_process_id  # noqa: E402
from runner.ingest import ingest  # noqa: E402
from runner.invocation import Invocation  # noqa: E402
from runner.project import Project  # noqa: E402
from runner.run import dbt_build  # noqa: E402
from runner.samples.generate import GenerateSpec, generate_entity  # noqa: E402

STOCK_MODEL = """
-- What a user would write with dbt's stock incremental merge: unique_key, the last change per
-- key of the new rows, no deletes, no tombstones, no markers.
{%- set ingested = cdc.lineage_columns()['ingested_at'] %}
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='customer_id') }}
select customer_id, name, email, tier, balance, updated_at, {{ ingested }}
from (
    select s.*, row_number() over (partition by customer_id order by AR_H_CHANGE_SEQ desc) as rn
    from {{ ref('stg_customers') }} as s
    {% if is_incremental() %}
    where {{ ingested }} > (select max({{ ingested }}) from {{ this }})
    {% endif %}
) as ranked
where rn = 1 and Op <> 'D'
"""


def generated(data: Path, rows: int) -> Path:
    """A landing folder with ``rows`` DMS changes of customers in 20 Files (a full load of a
    third of the keys, then updates, deletes and inserts), generated once and reused."""
    folder = data / f"proc_{rows}" / "customers"
    if not folder.exists():
        project = Project.load(REPO, target="local")
        entity = load_entities(project)["customers"]
        spec = GenerateSpec(initial=rows // 3, incremental=rows - rows // 3, files=19, seed=11)
        generate_entity(entity, folder, spec)
    return folder.parent


def project_root() -> Path:
    """A scratch copy of the repository's configuration, with its own warehouse."""
    WORK.mkdir(parents=True, exist_ok=True)
    for old in WORK.iterdir():  # keep data/: the generator is deterministic, so it is reused
        if old.name != "data":
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    shutil.copy(REPO / "profiles.example.yml", WORK / "profiles.yml")
    shutil.copy(REPO / "runner.yml", WORK / "runner.yml")
    shutil.copytree(
        REPO / "dbt_project",
        WORK / "dbt_project",
        ignore=shutil.ignore_patterns("target", "logs", "dbt_packages"),
    )
    shutil.copytree(REPO / "macros", WORK / "macros")
    link_iceberg_jar(WORK)
    # Its own Spark catalog in PostgreSQL, which outlives the folder: dropped with it.
    os.environ["CDC_CATALOG_SCHEMA"] = "cdc_bench_session"
    subprocess.run(
        [str(Path(sys.executable).parent / "runner"), "drop-catalog", "--yes", "--target", "local"],
        cwd=WORK, env={**os.environ, "CDC_HOME": str(WORK)}, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    from dbt.cli.main import dbtRunner

    res = dbtRunner().invoke(
        ["deps", "--project-dir", str(WORK / "dbt_project"), "--profiles-dir", str(WORK), "--quiet"]
    )
    assert res.success, res.exception
    return WORK


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_of(
    repeat: int, setup: Callable[[int], object], run: Callable[[object], object]
) -> float:
    times = []
    for i in range(repeat):
        state = setup(i)
        times.append(timed(lambda s=state: run(s)))
    return statistics.median(times)


class Bench:
    def __init__(self, repeat: int, quick: bool) -> None:
        self.repeat = repeat
        self.quick = quick
        self.root = project_root()
        os.environ["CDC_SCHEMA"] = "bench"
        self.project = Project.load(self.root, target="local")
        self.spark = destination_for(self.project).spark_session(app_name="cdc-bench")
        self.spark.sparkContext.setLogLevel("ERROR")
        self.entity = load_entities(self.project)["customers"]
        self.data = self.root / "data"
        self.n = 0

    def files(self, name: str, rows: int, files: int) -> Path:
        folder = self.data / name / "customers"
        if not folder.exists():
            spec = GenerateSpec(
                initial=max(rows // 10, 1),
                incremental=rows - max(rows // 10, 1),
                files=max(files - 1, 1),
                seed=11,
            )
            generate_entity(self.entity, folder, spec)
        return folder.parent

    def fresh(self, tag: str) -> tuple[Project, AuditDB]:
        """A new schema and Audit DB, so every repetition starts from nothing."""
        self.n += 1
        os.environ["CDC_SCHEMA"] = f"bench_{tag}_{self.n}"
        project = Project.load(self.root, target="local")
        db = AuditDB(f"sqlite:///{self.root / f'audit_{self.n}.db'}")
        db.upgrade()
        return project, db

    def ingest(self, project: Project, db: AuditDB, landing: Path) -> int:
        pid = new_process_id()
        db.start_run(pid, "ingest", "local")
        result = ingest(Invocation.of(project, db, self.spark), pid, landing=[str(landing)])
        assert result.quarantined == 0 and result.failed == 0
        return result.rows

    # 1. end to end against a plain Spark job that writes the Files once
    def end_to_end(self, rows: int) -> dict:
        landing = self.files(f"e2e_{rows}", rows, 20)

        def ours(_: int) -> tuple[Project, AuditDB]:
            return self.fresh("e2e")

        parts: dict[str, list[float]] = {"ingest_s": [], "dbt_build_s": []}

        def run_ours(state) -> None:  # type: ignore[no-untyped-def]
            project, db = state
            parts["ingest_s"].append(timed(lambda: self.ingest(project, db, landing)))
            start = time.perf_counter()
            ok, err = dbt_build(project, new_process_id(), ["--select", "+customers", "--quiet"])
            parts["dbt_build_s"].append(time.perf_counter() - start)
            assert ok, err

        def run_floor(schema) -> None:  # type: ignore[no-untyped-def]
            from pyspark.sql import types as T

            cols = [T.StructField(c.name, T.StringType()) for c in self.entity.columns]
            df = (
                self.spark.read.schema(T.StructType(cols))
                .option("header", True)
                .option("multiLine", True)
                .option("escape", '"')
                .csv(str(landing / "customers"))
            )
            self.spark.sql(f"create database if not exists {schema}")
            df.writeTo(f"{schema}.floor").using("iceberg").createOrReplace()

        t_ours = median_of(self.repeat, ours, run_ours)
        t_floor = median_of(self.repeat, lambda i: f"bench_floor_{i}", run_floor)
        return {
            "rows": rows,
            "runner_run_s": t_ours,
            "plain_spark_s": t_floor,
            "rows_per_s": rows / t_ours,
            "ratio": t_ours / t_floor,
            "target": 2.5,
            **{k: statistics.median(v) for k, v in parts.items()},
        }

    # 2. the apply against dbt's stock incremental merge, on the same staged changes
    def apply_files(self, rows: int) -> tuple[Path, Path]:
        """The landing folders of the apply comparisons: the full load, and the change Files."""
        every = self.files(f"apply_{rows}", rows, 10) / "customers"
        load, changes = self.data / f"apply_load_{rows}", self.data / f"apply_changes_{rows}"
        for folder, keep in ((load, True), (changes, False)):
            if not folder.exists():
                (folder / "customers").mkdir(parents=True)
                for f in every.iterdir():
                    if (f.name == "LOAD00000001.csv") == keep:
                        shutil.copy(f, folder / "customers" / f.name)
        return load, changes

    def apply_vs_stock(self, rows: int) -> dict:
        load, changes = self.apply_files(rows)
        model = self.root / "dbt_project" / "models" / "customers_stock.sql"
        model.write_text(STOCK_MODEL)
        build = ["--exclude", "resource_type:test", "--quiet"]

        def setup(_: int) -> Project:
            """Both tables hold the full load; the change Files are staged, not applied."""
            project, db = self.fresh("apply")
            self.ingest(project, db, load)
            ok, err = dbt_build(
                project, "bench", ["--select", "+customers +customers_stock", *build]
            )
            assert ok, err
            self.ingest(project, db, changes)
            return project

        def ours(project) -> None:  # type: ignore[no-untyped-def]
            ok, err = dbt_build(project, "bench", ["--select", "+customers", *build])
            assert ok, err

        def stock(project) -> None:  # type: ignore[no-untyped-def]
            ok, err = dbt_build(project, "bench", ["--select", "+customers_stock", *build])
            assert ok, err

        t_ours = median_of(self.repeat, setup, ours)
        t_stock = median_of(self.repeat, setup, stock)
        model.unlink()
        return {
            "rows": rows,
            "cdc_apply_s": t_ours,
            "stock_merge_s": t_stock,
            "ratio": t_ours / t_stock,
            "target": report.TARGETS["apply_vs_stock_merge_spark"],
            "note": "incremental build of the change Files after the full load, both models",
        }

    # 2b. on PostgreSQL: the apply against a hand-written INSERT ... ON CONFLICT plus DELETE,
    # after a first load (the same Files as on Spark), and as the daily run (a day of changes
    # into a table that holds every key)
    def apply_vs_handwritten_postgres(self, rows: int) -> dict:
        from steady_state import steady_files

        load, changes = self.apply_files(rows)
        t_ours, t_hand = self._postgres_pair(load, changes)
        keys, day = (50_000, 5_000) if self.quick else (1_000_000, 100_000)
        full, (files,) = steady_files(self.data, keys, day, 1)
        d_ours, d_hand = self._postgres_pair(
            self._folder("pg_full", [full]), self._folder("pg_day", files)
        )
        return {
            "rows": rows,
            "cdc_apply_s": t_ours,
            "handwritten_s": t_hand,
            "ratio": t_ours / t_hand,
            "target": report.TARGETS["apply_vs_handwritten_postgres"],
            "note": "incremental apply of the change Files after the full load",
            "daily": {
                "keys": keys,
                "changes": day,
                "cdc_apply_s": d_ours,
                "handwritten_s": d_hand,
                "ratio": d_ours / d_hand,
                "target": report.TARGETS["postgres_daily"],
            },
        }

    def _folder(self, name: str, files: list[Path]) -> Path:
        """A landing folder of ``files`` (hard links), for an entity's folder of its own."""
        folder = self.data / name / "customers"
        shutil.rmtree(folder.parent, ignore_errors=True)
        folder.mkdir(parents=True)
        for f in files:
            os.link(f, folder / f.name)
        return folder.parent

    def _postgres_pair(self, load: Path, changes: Path) -> tuple[float, float]:
        """Medians of the apply of ``changes`` after ``load``: ours, the hand-written one."""
        from runner.destinations.postgres import connect

        build = ["--select", "+customers", "--exclude", "resource_type:test", "--quiet"]
        business = [c.name.lower() for c in self.entity.columns]
        out_cols = ["customer_id", "name", "email", "tier", "balance", "updated_at"]

        def setup(_: int) -> tuple[Project, list[str]]:
            """customers and customers_hand hold the full load; the changes are staged."""
            self.n += 1
            os.environ["CDC_SCHEMA"] = f"bench_pg_{os.getpid()}_{self.n}"
            project = Project.load(self.root, target="postgres")
            db = AuditDB(f"sqlite:///{self.root / f'audit_{self.n}.db'}")
            db.upgrade()
            self.ingest(project, db, load)
            ok, err = dbt_build(project, "bench", build)
            assert ok, err
            schema = project.target["schema"]
            conn = connect(project.target)
            with conn, conn.cursor() as cur:
                cur.execute(
                    f'create table "{schema}".customers_hand as '
                    f'select {", ".join(out_cols)} from "{schema}".customers'
                )
                cur.execute(f'alter table "{schema}".customers_hand add primary key (customer_id)')
                cur.execute(f'analyze "{schema}".customers_hand')
                cur.execute(f'select file_hash from "{schema}".cdc_staged_files')
                loaded = [r[0] for r in cur.fetchall()]
            conn.close()
            self.ingest(project, db, changes)
            return project, loaded

        def ours(state) -> None:  # type: ignore[no-untyped-def]
            project, _ = state
            ok, err = dbt_build(project, "bench", build)
            assert ok, err

        def hand(state) -> None:  # type: ignore[no-untyped-def]
            project, loaded = state
            schema = project.target["schema"]
            staged = f'"{schema}".customers__staged'
            last = (
                f"select distinct on (customer_id) {', '.join(business)} from {staged} "
                f"where _cdc_file_hash <> all(%s) order by customer_id, ar_h_change_seq desc"
            )
            sets = ", ".join(f"{c} = excluded.{c}" for c in out_cols[1:])
            conn = connect(project.target)
            with conn, conn.cursor() as cur:
                cur.execute(f"create temp table last_change on commit drop as {last}", (loaded,))
                cur.execute(
                    f'insert into "{schema}".customers_hand ({", ".join(out_cols)}) '
                    f"select {', '.join(out_cols)} from last_change where op <> 'D' "
                    f"on conflict (customer_id) do update set {sets}"
                )
                cur.execute(
                    f'delete from "{schema}".customers_hand h using last_change d '
                    "where d.op = 'D' and h.customer_id = d.customer_id"
                )
            conn.close()

        return median_of(self.repeat, setup, ours), median_of(self.repeat, setup, hand)

    # 3. many small Files against one big File: staging time
    def many_small_files(self) -> dict:
        small_n, big_rows = (200, 20_000) if self.quick else (1000, 100_000)
        small = self.data / "small" / "customers"
        big = self.data / "big" / "customers"
        if not small.exists():
            generate_entity(
                self.entity,
                small,
                GenerateSpec(
                    initial=big_rows // small_n,
                    incremental=big_rows - big_rows // small_n,
                    files=small_n - 1,
                    seed=5,
                ),
            )
        if not big.exists():
            generate_entity(
                self.entity, big, GenerateSpec(initial=big_rows, incremental=0, files=1, seed=5)
            )
            for extra in big.iterdir():
                if extra.name != "LOAD00000001.csv":
                    extra.unlink()

        def setup(_: int) -> tuple[Project, AuditDB]:
            return self.fresh("files")

        t_small = median_of(self.repeat, setup, lambda s: self.ingest(*s, small.parent))
        t_big = median_of(self.repeat, setup, lambda s: self.ingest(*s, big.parent))
        return {
            "small_files": small_n,
            "rows": big_rows,
            "small_s": t_small,
            "one_file_s": t_big,
            "ratio": t_small / t_big,
            "target": report.TARGETS["many_small_files"],
        }

    # 4. growth: time per row
    def growth(self) -> dict:
        sizes = [20_000, 100_000] if self.quick else [100_000, 1_000_000, 5_000_000, 10_000_000]
        out: dict = {}
        for rows in sizes:
            landing = self.files(f"growth_{rows}", rows, 20)
            reps = self.repeat if rows <= 1_000_000 else 1

            def run(state, landing: Path = landing) -> None:  # type: ignore[no-untyped-def]
                project, db = state
                self.ingest(project, db, landing)
                ok, err = dbt_build(
                    project,
                    "bench",
                    ["--select", "+customers", "--exclude", "resource_type:test", "--quiet"],
                )
                assert ok, err

            t = median_of(reps, lambda i: self.fresh("growth"), run)
            out[str(rows)] = {"seconds": t, "us_per_row": t / rows * 1e6, "repeats": reps}
        first, last = out[str(sizes[-2])], out[str(sizes[-1])]
        out["ratio_last_to_previous"] = last["us_per_row"] / first["us_per_row"]
        out["compared"] = [sizes[-1], sizes[-2]]
        out["target"] = 1.5
        return out


PARTS = (
    "whole_process",
    "steady_state",
    "one_big_file",
    "end_to_end",
    "apply_vs_stock_merge_spark",
    "apply_vs_handwritten_postgres",
    "many_small_files",
    "growth",
    "snapshot_vs_dbt_snapshot",
    "snapshot_hash_vs_full_row",
    "memory",
    "latency",
    "soak",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="Small sizes, to try the harness.")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="Run only these parts; the others are kept from --out (a partial run is merged).",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help="Row counts of the whole-process comparison (default 300000 1000000 10000000 "
        "20000000; the largest of the defaults is run once).",
    )
    parser.add_argument("--mib", type=int, help="Size of the one big File (default 2048).")
    parser.add_argument(
        "--steady",
        nargs="+",
        metavar="KEYS:CHANGES",
        help="The steady_state part's tables and daily batches (default 20000000:1000000 "
        "20000000:100000).",
    )
    parser.add_argument(
        "--soak-sides",
        nargs="+",
        choices=("without_maintenance", "with_maintenance"),
        default=["without_maintenance", "with_maintenance"],
        help="The soak part's sides to run (a side not run keeps its earlier result).",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "latest.json")
    parser.add_argument(
        "--readme",
        type=Path,
        default=REPO / "docs" / "performance.md",
        help="The page whose results table is rewritten (not with --quick).",
    )
    args = parser.parse_args()
    import processes
    import snapshot

    sizes = args.sizes or (
        [50_000] if args.quick else [300_000, 1_000_000, 10_000_000, report.LARGEST, report.HUGE]
    )
    rows = 50_000 if args.quick else 300_000
    mib = args.mib or (64 if args.quick else 2048)
    partial = set(args.parts) != set(PARTS)
    results: dict = {}
    if partial and args.out.exists():
        results = json.loads(args.out.read_text())
    results.update({"repeat": args.repeat, "quick": args.quick, "cpus": os.cpu_count()})
    measured = results.setdefault("measured_on", {})
    today = time.strftime("%Y-%m-%d")
    started = time.perf_counter()
    data = WORK / "data"
    work = WORK.parent / "work_processes"

    def done(name: str, t0: float, key: str | None = None) -> None:
        measured[key or name] = today
        value = results[name] if key is None else results[name][key]
        print(f"{key or name}: {json.dumps(value)} ({time.perf_counter() - t0:.0f}s)", flush=True)

    if "whole_process" in args.parts:
        for size in sizes:
            t0 = time.perf_counter()
            repeat = 1 if size >= report.LARGEST else args.repeat  # one run is enough there
            heap_too = size >= report.LARGEST  # the heap's target is at those sizes
            point = processes.compare(generated(data, size), work, repeat, heap_too=heap_too)
            point["repeats"] = repeat
            point["target_run_to_handwritten"] = report.TARGETS["run_to_handwritten"]
            point["target_ingest_to_floor"] = report.TARGETS["ingest_to_floor"]
            results.setdefault("whole_process", {})[str(size)] = point
            done("whole_process", t0, str(size))
    if "steady_state" in args.parts:
        import steady_state

        batches = [(200_000, 20_000)] if args.quick else [(20_000_000, 1_000_000),
                                                          (20_000_000, 100_000)]  # fmt: skip
        if args.steady:
            batches = [(int(k), int(c)) for k, c in (s.split(":") for s in args.steady)]
        for keys, changes in batches:
            t0 = time.perf_counter()
            label = f"{keys}_{changes}"
            results.setdefault("steady_state", {})[label] = steady_state.steady_state(
                data, WORK.parent / "work_steady", keys, changes, 2 if args.quick else 3
            )
            done("steady_state", t0, label)
    if "one_big_file" in args.parts:
        t0 = time.perf_counter()
        results["one_big_file"] = processes.one_big_file(
            data,
            generated(data, min(sizes[-1], report.LARGEST)) / "customers",
            work,
            mib,
            args.repeat,
        )
        done("one_big_file", t0)
    warm = PARTS[PARTS.index("end_to_end") : PARTS.index("memory")]  # one warm session
    in_process = [p for p in warm if p in args.parts]
    if in_process:
        bench = Bench(args.repeat, args.quick)
        steps: dict[str, Callable[[], dict]] = {
            "end_to_end": lambda: bench.end_to_end(rows),
            "apply_vs_stock_merge_spark": lambda: bench.apply_vs_stock(rows),
            "apply_vs_handwritten_postgres": lambda: bench.apply_vs_handwritten_postgres(rows),
            "many_small_files": bench.many_small_files,
            "growth": bench.growth,
            "snapshot_vs_dbt_snapshot": lambda: snapshot.snapshot_vs_dbt_snapshot(
                bench, 5_000 if args.quick else 300_000, 3 if args.quick else 5
            ),
            "snapshot_hash_vs_full_row": lambda: snapshot.snapshot_hash_vs_full_row(
                bench, 5_000 if args.quick else 100_000, (10, 100)
            ),
        }
        for name in in_process:
            t0 = time.perf_counter()
            results[name] = steps[name]()
            done(name, t0)
    if "memory" in args.parts:
        t0 = time.perf_counter()
        results.update(memory(args.quick, args.repeat))
        measured["hash_memory"] = measured["ingest_memory"] = today
        print(f"memory: {time.perf_counter() - t0:.0f}s", flush=True)
    if "latency" in args.parts:
        import latency

        t0 = time.perf_counter()
        results["latency"] = latency.latency(WORK.parent / "work_latency", args.repeat)
        done("latency", t0)
    if "soak" in args.parts:
        import soak

        t0 = time.perf_counter()
        fresh = soak.soak(
            WORK.parent / "work_soak",
            30 if args.quick else 300,
            10 if args.quick else 50,
            tuple(args.soak_sides),
        )
        results["soak"] = {**results.get("soak", {}), **fresh}
        done("soak", t0)
    results["total_s"] = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten {args.out}")
    table = report.table(results)
    print(report.plain(results))
    if not args.quick and args.readme.exists():
        report.write_readme(args.readme, table)
        print(f"table written to {args.readme}")


def memory(quick: bool, repeat: int) -> dict:
    """Peak RSS of hashing and of `runner ingest` on about 1 GiB, each in its own process."""
    import subprocess

    if not (WORK / "dbt_project").exists():
        project_root()
    mem = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "hash_memory.py"),
            "--size-mib",
            "256" if quick else "1024",
            "--repeat",
            str(repeat),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    # Its own project root: the embedded metastore admits one JVM.
    mem_root = WORK.parent / "work_memory"
    shutil.rmtree(mem_root, ignore_errors=True)
    shutil.copytree(
        WORK,
        mem_root,
        symlinks=True,
        ignore=shutil.ignore_patterns(".cdc", "data", "audit_*", "target", "logs"),
    )
    stage = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "stage_memory.py"),
            "--root",
            str(mem_root),
            "--data",
            str(WORK / "data"),
            "--size-mib",
            "128" if quick else "1024",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return {"hash_memory": json.loads(mem.stdout), "ingest_memory": json.loads(stage.stdout)}


if __name__ == "__main__":
    main()
