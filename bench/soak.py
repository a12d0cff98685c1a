"""`make bench` part `soak`: does run 300 cost what run 1 costs?

One project (customers only, its sample applied) receives one small File at a time through a
warm `runner run --watch`, ``runs`` times, each File a batch of its own. Two sides, run side by
side, each in its own project root: without maintenance, and with runner.yml's `maintain_every`
(retention of the staged rows of COMMITTED Files, file_events, Iceberg snapshots older than 0
days). Reported per side: the batch time at the start (the median of runs 11 to 20: the first
batch starts Spark and parses the dbt project, and the JVM is still compiling for several more)
and at the end (the median of the last ten),
batches that maintained left out of both and timed apart; and at runs 1, 1/3, 2/3 and the last,
the files on disk under the warehouse (data files, snapshot manifests lists, metadata files) of
the staging, target and state tables.

Used by bench/run.py; on its own: ``python bench/soak.py [--runs 300] [--every 50]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import latency  # noqa: E402

#: The batches of the start window: runs 11 to 20, after the JVM's warm-up.
START = slice(10, 20)


def _configure(root: Path, every: int | None) -> None:
    path = root / "runner.yml"
    conf = yaml.safe_load(path.read_text()) or {}
    if every is not None:
        conf["retention"] = {"staged_days": 0, "events_days": 0, "snapshot_days": 0}
        conf["maintain_every"] = every
    path.write_text(yaml.safe_dump(conf))


def on_disk(root: Path) -> dict[str, int]:
    """Files under the warehouse: data files, snapshots (manifest lists), metadata files."""
    warehouse = root / ".cdc" / "local" / "warehouse"
    every = [p for p in warehouse.rglob("*") if p.is_file() and not p.name.endswith(".crc")]
    return {
        "data_files": sum(p.suffix == ".parquet" for p in every),
        "snapshots": sum(p.name.startswith("snap-") for p in every),
        "metadata_files": sum(p.name.endswith(".metadata.json") for p in every),
        "bytes": sum(p.stat().st_size for p in every),
    }


def one_side(base: Path, name: str, runs: int, every: int | None) -> dict:
    root = latency.root_for(base, name, 1)
    _configure(root, every)
    latency.runner_run(root)  # the sample applied
    checkpoints = sorted({1, max(1, runs // 3), max(1, 2 * runs // 3), runs})
    proc = latency.watch_process(root, 0.2)
    assert proc.stdout is not None
    seconds: list[float] = []
    maintained: list[float] = []
    disk: dict[str, dict[str, int]] = {}
    try:
        for i in range(1, runs + 1):
            latency.new_file(root / "landing" / "customers", i, rows=10)
            line = json.loads(proc.stdout.readline())
            assert line["ok"] and line["committed"] == 1, line
            if line.get("maintained"):
                maintained.append(line["seconds"])
                seconds.append(float("nan"))
            else:
                seconds.append(line["seconds"])
            if i in checkpoints:
                disk[str(i)] = on_disk(root)
            if i % 25 == 0:
                print(f"soak {name}: {i}/{runs} batches", file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=600)

    def window(values: list[float]) -> float:
        kept = [v for v in values if v == v]  # without the batches that maintained
        return statistics.median(kept) if kept else float("nan")

    start, end = window(seconds[START]), window(seconds[-10:])
    return {
        "runs": runs,
        "maintain_every": every,
        "start_s": start,
        "end_s": end,
        "end_to_start": end / start,
        "maintenance_s": statistics.median(maintained) if maintained else None,
        "on_disk": disk,
        "batch_s": seconds,
    }


SIDES = ("without_maintenance", "with_maintenance")


def soak(base: Path, runs: int = 300, every: int = 50, sides: tuple[str, ...] = SIDES) -> dict:
    """Both sides (or those of ``sides``) side by side: each its own watch process, started
    together, so both see the same machine from their first batch to their last."""
    plan = {
        "without_maintenance": ("soak_plain", None),
        "with_maintenance": ("soak_maintained", every),
    }
    chosen = [side for side in SIDES if side in sides]
    with ThreadPoolExecutor(max_workers=len(chosen) or 1) as pool:
        futures = {side: pool.submit(one_side, base, plan[side][0], runs, plan[side][1])
                   for side in chosen}  # fmt: skip
        out: dict = {side: future.result() for side, future in futures.items()}
    out["target"] = 1.2  # end_to_start with maintenance
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    args = parser.parse_args()
    result = soak(REPO / "bench" / "work_soak", args.runs, args.every, tuple(args.sides))
    for side in args.sides:
        r = result[side]
        print(side, {k: v for k, v in r.items() if k != "batch_s"})


if __name__ == "__main__":
    main()
