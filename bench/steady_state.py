"""`make bench`'s steady_state part: the run users pay every day, a batch of changes into a table
that already holds every key, as whole processes.

Each side first applies the same full load of ``keys`` rows (untimed). Then, day after day, a
batch of ``changes`` DMS changes in 10 Files (70% updates of existing keys, 15% deletes, 15%
inserts) lands and is applied, timed: `runner run` (the current-state model, as the
whole-process comparison builds it) with the day's Files beside every earlier File in its
landing root, against the hand-written job MERGEing the day's Files into its own table. The
figure per side is the median over the days; after the last day both tables must hold the same
rows (``handwritten_job.py --digest``).

    python bench/steady_state.py --keys 2000000 --changes 200000 [--days 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from processes import HANDWRITTEN_JOB, fresh_root, handwritten, runner_run, timed  # noqa: E402

FILES_PER_DAY = 10


def steady_files(data: Path, keys: int, changes: int, days: int) -> tuple[Path, list[list[Path]]]:
    """The full load and each day's change Files (generated once and reused)."""
    from runner.entities import load_entities
    from runner.project import Project
    from runner.samples.generate import GenerateSpec, generate_entity

    folder = data / f"steady_{keys}_{changes}_{days}" / "customers"
    if not folder.exists():
        entity = load_entities(Project.load(REPO, target="local"))["customers"]
        spec = GenerateSpec(
            initial=keys,
            incremental=changes * days,
            files=FILES_PER_DAY * days,
            delete_share=0.15,
            update_share=0.70,
            seed=13,
        )
        partial = folder.with_name("customers.partial")
        shutil.rmtree(partial, ignore_errors=True)
        generate_entity(entity, partial, spec)
        partial.rename(folder)
    load = folder / "LOAD00000001.csv"
    changed = sorted(p for p in folder.glob("*.csv") if p != load)
    return load, [changed[d * FILES_PER_DAY : (d + 1) * FILES_PER_DAY] for d in range(days)]


def _land(files: list[Path], folder: Path) -> Path:
    """``files`` hard-linked into ``folder``/customers (a landing as a transfer leaves it)."""
    target = folder / "customers"
    target.mkdir(parents=True, exist_ok=True)
    for f in files:
        link = target / f.name
        if not link.exists():
            os.link(f, link)
    return folder


def _digest(root: Path, table: str) -> dict:
    out = timed([*HANDWRITTEN_JOB, "--table", table, "--digest"], root)[1]
    return json.loads(out.strip().splitlines()[-1])


def steady_state(data: Path, work: Path, keys: int, changes: int, days: int) -> dict:
    load, batches = steady_files(data, keys, changes, days)
    shutil.rmtree(work, ignore_errors=True)
    runner_landing = _land([load], work / "runner_landing")
    runner_root = fresh_root(work, "runner", runner_landing)
    hand_root = fresh_root(work, "hand", _land([load], work / "hand_load"))
    first = {"runner_run_s": runner_run(runner_root)[0]}
    first["handwritten_s"] = handwritten(hand_root)
    sides: dict[str, list[float]] = {"runner_run_s": [], "handwritten_s": []}
    phases: dict[str, list[float]] = {}
    for day, files in enumerate(batches):
        _land(files, runner_landing)  # beside every earlier File, in the same root
        seconds, report = runner_run(runner_root)
        sides["runner_run_s"].append(seconds)
        for name, value in report["phases"].items():
            phases.setdefault(name, []).append(value)
        sides["handwritten_s"].append(
            handwritten(hand_root, landing=str(_land(files, work / f"hand_day{day}") / "customers"))
        )
        print(f"day {day}: runner {seconds:.1f} s, hand {sides['handwritten_s'][-1]:.1f} s",
              flush=True)  # fmt: skip
    ours, theirs = _digest(runner_root, "bench.customers"), _digest(hand_root, "bench.customers")
    if ours != theirs:
        raise AssertionError(f"the tables differ: runner {ours}, hand-written {theirs}")
    shutil.rmtree(work, ignore_errors=True)
    out: dict = {k: statistics.median(v) for k, v in sides.items()}
    out.update(
        keys=keys,
        changes=changes,
        days=days,
        rows_after=ours["rows"],
        ratio_run_to_handwritten=out["runner_run_s"] / out["handwritten_s"],
        target=1.0,
        first_load_s=first,
        runs=sides,
        phases_s={k: statistics.median(v) for k, v in phases.items()},
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=20_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work_steady")
    args = parser.parse_args()
    result = steady_state(
        REPO / "bench" / "work" / "data", args.work, args.keys, args.changes, args.days
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
