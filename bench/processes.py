"""Whole processes side by side, as a user runs them: `runner run` and `runner ingest` against
the PySpark job a data engineer would write instead (bench/handwritten_job.py) and the floor
(the same job writing every row once). Each repetition of each side gets a fresh project root
(its own warehouse, metastore and Audit DB), so every process pays its JVM start and a first
run's table creation, as in the issue's measurement. Sides alternate within a repetition.

Used by bench/run.py; on its own:

    python bench/processes.py --rows 1000000 [--repeat 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BIN = Path(sys.executable).parent
DBT_SELECT = ["--select", "+customers", "--exclude", "resource_type:test"]


def fresh_root(base: Path, name: str, landing: Path, heap: bool = False) -> Path:
    """A project root with the repository's configuration, its own state and ``landing``;
    with ``heap``, its Spark processes log executor metrics (``peak_heap``)."""
    from runner.destinations.spark.session import link_iceberg_jar, link_jdbc_driver

    root = base / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    if heap:
        log_executor_metrics(root)
    shutil.copy(REPO / "profiles.example.yml", root / "profiles.yml")
    shutil.copy(REPO / "runner.yml", root / "runner.yml")
    shutil.copytree(
        REPO / "dbt_project",
        root / "dbt_project",
        ignore=shutil.ignore_patterns("target", "logs"),
        symlinks=True,
    )
    packages = root / "dbt_project" / "dbt_packages"
    shutil.rmtree(packages, ignore_errors=True)
    packages.mkdir()
    (packages / "cdc").symlink_to(REPO / "macros")
    (root / "landing").symlink_to(landing)
    link_iceberg_jar(root)
    link_jdbc_driver(root)  # the hand-written job reads the same settings, without the runner
    subprocess.run(
        [str(BIN / "runner"), "drop-catalog", "--yes", "--target", "local"],
        cwd=root, env=env(root), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return root


def env(root: Path) -> dict[str, str]:
    """A root's environment: its own state, its own Spark catalog schema in PostgreSQL (the
    catalog outlives the folder: a root made again starts from a dropped catalog), and, in a
    root that measures the heap (``log_executor_metrics``), its Spark defaults."""
    catalog = "cdc_bench_" + re.sub(r"[^a-z0-9_]", "_", root.name.lower())
    conf = root / "spark-conf"
    return {
        **os.environ,
        "CDC_HOME": str(root),
        "CDC_SCHEMA": "bench",
        "CDC_CATALOG_SCHEMA": catalog,
        **({"SPARK_CONF_DIR": str(conf)} if conf.exists() else {}),
    }


def log_executor_metrics(root: Path) -> None:
    """A spark-defaults.conf (read by every Spark the root's processes start, both sides
    alike) that writes an event log with each stage's and task's peak executor metrics, the
    JVM's memory polled every 100 ms. Only where the heap is measured: the log costs the side
    with more Spark jobs more."""
    conf, events = root / "spark-conf", root / "spark-events"
    conf.mkdir(parents=True)
    events.mkdir(parents=True)
    (conf / "spark-defaults.conf").write_text(
        "spark.eventLog.enabled true\n"
        f"spark.eventLog.dir {events.as_uri()}\n"
        "spark.eventLog.logStageExecutorMetrics true\n"
        "spark.executor.metrics.pollingInterval 100ms\n"
    )


def peak_heap(root: Path) -> int:
    """The highest JVM heap in use (bytes) that Spark's executor metrics recorded in the root's
    event logs: per stage and per task, polled while tasks run (local mode: the driver's JVM)."""
    peak = 0
    for log in (root / "spark-events").iterdir():
        with log.open(encoding="utf-8") as lines:
            for line in lines:
                if '"JVMHeapMemory"' not in line:
                    continue
                event = json.loads(line)
                for field in ("Executor Metrics", "Task Executor Metrics"):
                    peak = max(peak, int(event.get(field, {}).get("JVMHeapMemory", 0)))
    if not peak:
        raise RuntimeError(f"no executor metrics in {root / 'spark-events'}")
    return peak


def timed(cmd: list[str], root: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=root, env=env(root), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, done.stdout


def runner_run(root: Path) -> tuple[float, dict]:
    seconds, out = timed(
        [str(BIN / "runner"), "run", "--json", "--landing", "landing", "--", *DBT_SELECT], root
    )
    report = json.loads(out.strip().splitlines()[-1])
    # Only the current-state model is built (like the baseline), so the Files stay STAGED:
    # COMMITTED waits for the entity's other apply models (its history) to hold their markers.
    assert report["ok"] and report["dbt_ok"] and "model.customers" in report["built"], report
    assert report["ingest"]["failed"] == report["ingest"]["quarantined"] == 0, report
    return seconds, report


def runner_ingest(root: Path) -> float:
    seconds, out = timed([str(BIN / "runner"), "ingest", "--landing", "landing"], root)
    assert " 0 quarantined, 0 failed" in out, out
    return seconds


HANDWRITTEN_JOB = [sys.executable, str(REPO / "bench" / "handwritten_job.py"), "--root", "."]


def handwritten(root: Path, floor: bool = False, landing: str = "landing/customers") -> float:
    """The hand-written job on the Files under ``landing`` (relative to ``root``, or absolute)."""
    table = "bench.floor" if floor else "bench.customers"
    cmd = [*HANDWRITTEN_JOB, "--landing", landing, "--table", table]
    return timed([*cmd, "--floor"] if floor else cmd, root)[0]


def compare(
    landing: Path, work: Path, repeat: int, with_ingest: bool = True, heap_too: bool = False
) -> dict:
    """Medians of ``repeat`` runs of each side on the Files under ``landing``/customers; with
    ``heap_too`` also the peak heap of `runner run` and of the hand-written job (their runs
    then log executor metrics, both sides alike)."""
    sides: dict[str, list[float]] = {"runner_run_s": [], "handwritten_s": [], "floor_s": []}
    if with_ingest:
        sides["runner_ingest_s"] = []
    heap: dict[str, list[float]] = {"runner_run_mib": [], "handwritten_mib": []} if heap_too else {}
    phases: dict[str, list[float]] = {}
    for i in range(repeat):
        root = fresh_root(work, f"run_{i}", landing, heap_too)
        t, report = runner_run(root)
        sides["runner_run_s"].append(t)
        if heap_too:
            heap["runner_run_mib"].append(peak_heap(root) / 2**20)
        for name, seconds in report["phases"].items():
            phases.setdefault(name, []).append(seconds)
        root = fresh_root(work, f"hand_{i}", landing, heap_too)
        sides["handwritten_s"].append(handwritten(root))
        if heap_too:
            heap["handwritten_mib"].append(peak_heap(root) / 2**20)
        sides["floor_s"].append(handwritten(fresh_root(work, f"floor_{i}", landing), floor=True))
        if with_ingest:
            sides["runner_ingest_s"].append(runner_ingest(fresh_root(work, f"ingest_{i}", landing)))
    shutil.rmtree(work, ignore_errors=True)
    out: dict = {k: statistics.median(v) for k, v in sides.items()}
    out["runs"] = {**sides, **heap}
    out["phases_s"] = {k: statistics.median(v) for k, v in phases.items()}
    if heap_too:
        out["peak_heap_mib"] = {k: statistics.median(v) for k, v in heap.items()}
    out["ratio_run_to_handwritten"] = out["runner_run_s"] / out["handwritten_s"]
    if with_ingest:
        out["ratio_ingest_to_floor"] = out["runner_ingest_s"] / out["floor_s"]
    return out


def big_file(source: Path, out_dir: Path, target_mib: int) -> Path:
    """One CSV File of at least ``target_mib`` MiB made of whole copies of the Files under
    ``source``, each copy's keys shifted so every row stays distinct (no duplicates, no
    conflicts)."""
    out = out_dir / "customers" / "LOAD00000001.csv"
    if out.exists():
        return out_dir
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = sorted(source.glob("*.csv"))
    written, copy = 0, 0
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        header_done = False
        while written < target_mib * 1024 * 1024:
            shift = copy * 10_000_000_000
            for part in parts:
                with open(part, newline="", encoding="utf-8") as src:
                    reader = csv.reader(src)
                    header = next(reader)
                    if not header_done:
                        writer.writerow(header)
                        header_done = True
                    key = header.index("customer_id")
                    seq = header.index("AR_H_CHANGE_SEQ")
                    for row in reader:
                        row[key] = str(int(row[key]) + shift)
                        row[seq] = f"{copy:02d}" + row[seq][2:]
                        writer.writerow(row)
            copy += 1
            written = out.stat().st_size
    return out_dir


def split_file(big: Path, out_dir: Path, parts: int) -> Path:
    """The same bytes as ``big`` (its one File) in ``parts`` Files, split at lines."""
    folder = out_dir / "customers"
    if folder.exists():
        return out_dir
    folder.mkdir(parents=True)
    src = big / "customers" / "LOAD00000001.csv"
    size = src.stat().st_size
    with open(src, "rb") as handle:
        header = handle.readline()
        for i in range(parts):
            with open(folder / f"part{i:03d}.csv", "wb") as out:
                out.write(header)
                limit = size * (i + 1) // parts
                while handle.tell() < limit:
                    line = handle.readline()
                    if not line:
                        break
                    out.write(line)
    return out_dir


def one_big_file(data: Path, source: Path, work: Path, mib: int, repeat: int) -> dict:
    """`runner ingest` of one File of ``mib`` MiB against the same bytes in 20 Files."""
    big = big_file(source, data / f"bigfile_{mib}", mib)
    many = split_file(big, data / f"bigfile_{mib}_20", 20)
    one_s, twenty_s = [], []
    for i in range(repeat):
        one_s.append(runner_ingest(fresh_root(work, f"one_{i}", big)))
        twenty_s.append(runner_ingest(fresh_root(work, f"twenty_{i}", many)))
    shutil.rmtree(work, ignore_errors=True)
    one, twenty = statistics.median(one_s), statistics.median(twenty_s)
    size = (big / "customers" / "LOAD00000001.csv").stat().st_size
    return {
        "mib": round(size / 2**20),  # whole copies of the source Files: at least ``mib``
        "one_file_s": one,
        "twenty_files_s": twenty,
        "ratio": one / twenty,
        "target": 1.5,
        "runs": {"one_file_s": one_s, "twenty_files_s": twenty_s},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work_processes")
    args = parser.parse_args()
    from run import generated

    landing = generated(args.work.parent / "work" / "data", args.rows)
    print(json.dumps(compare(landing, args.work, args.repeat), indent=2))


if __name__ == "__main__":
    main()
