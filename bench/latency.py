"""`make bench` part `latency`: what one small new File costs, on a project whose sample entities
are already applied (each side in its own project root, as a user's project after some runs).

(a) one new 100-row customers File by `runner run` as a cold process, against the hand-written
    PySpark MERGE job as a cold process on the same File (bench/handwritten_job.py);
(b) the same kind of File through `runner run --watch`: from the File's landing to its batch's
    line (its marker written and the File committed), the process warm;
(c) a `runner run` with nothing new, as a process;
(d) one new File by a cold `runner run` in a project declaring 10 entities against 1 (the dbt
    nodes built must not grow with unrelated entities).

Used by bench/run.py; on its own: ``python bench/latency.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import processes  # noqa: E402
from processes import timed  # noqa: E402

BIN = Path(sys.executable).parent
HEADER = "Op,AR_H_CHANGE_SEQ,customer_id,name,email,tier,balance,updated_at\n"


def root_for(base: Path, name: str, entities: int = 3) -> Path:
    """A project root with the repository's configuration and a copy of the sample landing
    Files; with ``entities`` 1 only customers, with 10 customers and nine more like it."""
    landing = base / f"{name}_landing"
    shutil.rmtree(landing, ignore_errors=True)
    shutil.copytree(REPO / "landing", landing)
    root = processes.fresh_root(base, name, landing)
    if entities != 3:
        _only_customers(root)
        for i in range(2, entities + 1):
            _clone_customers(root, f"customers_{i}")
    return root


def _only_customers(root: Path) -> None:
    """Leave customers alone in the project: no accounts, no shop group."""
    models = root / "dbt_project" / "models"
    for path in ("shop", "staging/shop.yml", "accounts.sql", "accounts_history.sql",
                 "staging/stg_accounts.sql"):  # fmt: skip
        p = models / path
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    for folder in ("accounts", "shop"):
        shutil.rmtree(root / "landing" / folder, ignore_errors=True)
    sources = models / "staging" / "cdc_sources.yml"
    text = sources.read_text()
    start = text.index("      - name: accounts")
    sources.write_text(text[:start].rstrip() + "\n")


def _clone_customers(root: Path, name: str) -> None:
    """Another entity declared as customers is, with its own landing folder and models."""
    models = root / "dbt_project" / "models"
    sources = models / "staging" / "cdc_sources.yml"
    text = sources.read_text()
    start = text.index("      - name: customers\n")
    end = text.find("\n      - name: ", start + 1)
    entry = text[start:] if end < 0 else text[start : end + 1]
    entry = entry.replace("- name: customers", f"- name: {name}", 1)
    entry = entry.replace("identifier: customers__staged", f"identifier: {name}__staged")
    entry = re.sub(r'"customers/', f'"{name}/', entry)
    sources.write_text(text.rstrip() + "\n" + entry)
    for model in ("staging/stg_customers.sql", "customers.sql"):
        src = (models / model).read_text().replace("'customers'", f"'{name}'")
        src = src.replace("ref('stg_customers')", f"ref('stg_{name}')")
        if model == "customers.sql":  # the config customers.yml gives customers
            src = (
                "{{ config(materialized='incremental', incremental_strategy='merge', "
                "unique_key='customer_id', meta={'cdc': {'apply': true}}) }}\n" + src
            )
        out = model.replace("customers", name)
        (models / out).write_text(src)
    shutil.copytree(root / "landing" / "customers", root / "landing" / name)


def new_file(folder: Path, n: int, rows: int = 100) -> Path:
    """``rows`` updates of existing customers, newer than every sample change."""
    path = folder / f"20991231-{n:09d}.csv"
    lines = [HEADER]
    for i in range(rows):
        seq = f"2099123100000000000{n:08d}{i:08d}"
        lines.append(f"U,{seq},{i + 1},name {n} {i},c{i}@example.com,gold,{n}.{i % 100:02d},"
                     f"2099-12-31 00:00:00\n")  # fmt: skip
    path.write_text("".join(lines))
    return path


def runner_run_cpu(root: Path) -> tuple[float, float, dict]:
    """`runner run --json` as a process: its wall seconds, its CPU seconds (user and system, of
    the process and any child) and its report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, out = timed([str(BIN / "runner"), "run", "--json", "--landing", "landing"], root)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, json.loads(out.strip().splitlines()[-1])


def runner_run(root: Path) -> tuple[float, dict]:
    seconds, _cpu, report = runner_run_cpu(root)
    assert report["ok"], report
    return seconds, report


def handwritten(root: Path, landing: str) -> float:
    cmd = [sys.executable, str(REPO / "bench" / "handwritten_job.py"), "--root", ".",
           "--landing", landing, "--table", "bench.hand"]  # fmt: skip
    return timed(cmd, root)[0]


def cold_file(base: Path, repeat: int) -> dict:
    """(a) and (c): one new 100-row File, cold `runner run` vs the cold hand-written job; then
    a `runner run` with nothing new."""
    root = root_for(base, "cold")
    runner_run(root)  # the sample applied
    hand_dir = root / "hand" / "customers"
    hand_dir.mkdir(parents=True)
    for f in (root / "landing" / "customers").iterdir():
        shutil.copy(f, hand_dir / f.name)
    handwritten(root, "hand/customers")  # the hand-written job's table, the sample merged
    runs, hands, noops, noop_cpus, built = [], [], [], [], []
    for i in range(repeat):
        new = new_file(root / "landing" / "customers", i + 1)
        seconds, report = runner_run(root)
        assert report["ingest"]["staged"] == 1, report
        runs.append(seconds)
        built.append(len(report["built"]))
        one = root / f"hand_{i}" / "customers"
        one.mkdir(parents=True)
        shutil.copy(new, one / new.name)
        hands.append(handwritten(root, f"hand_{i}/customers"))
        seconds, cpu, report = runner_run_cpu(root)
        assert report["nothing_new"], report
        noops.append(seconds)
        noop_cpus.append(cpu)
    run_s, hand_s = statistics.median(runs), statistics.median(hands)
    return {
        "runner_run_s": run_s,
        "handwritten_s": hand_s,
        "ratio": run_s / hand_s,
        "target": 1.5,
        "dbt_nodes": statistics.median(built),
        "noop_s": statistics.median(noops),
        "noop_target_s": 1.5,
        "noop_cpu_s": statistics.median(noop_cpus),
        "noop_cpu_target_s": 1.0,
        "runs": {
            "runner_run_s": runs,
            "handwritten_s": hands,
            "noop_s": noops,
            "noop_cpu_s": noop_cpus,
        },
    }


def watch_process(root: Path, interval: float | None = None) -> subprocess.Popen[str]:
    """`runner run --watch --json` in ``root`` (its default interval unless ``interval``): one
    JSON line per batch on its stdout."""
    every = [] if interval is None else ["--interval", str(interval)]
    return subprocess.Popen(
        [str(BIN / "runner"), "run", "--watch", *every, "--json", "--landing", "landing"],
        cwd=root, env=processes.env(root), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip


def watched(base: Path, repeat: int) -> dict:
    """(b): landing to committed through a warm `runner run --watch`: one File, then ten
    landing together."""
    root = root_for(base, "watch")
    runner_run(root)
    proc = watch_process(root)
    assert proc.stdout is not None
    latencies: list[float] = []
    ten: list[float] = []
    parts: dict[str, list[float]] = {}
    try:
        for i in range(repeat + 1):  # the first File warms the process: Spark, dbt's parse
            landed = time.perf_counter()
            new_file(root / "landing" / "customers", i + 1)
            line = json.loads(proc.stdout.readline())
            assert line["ok"] and line["committed"] == 1, line
            if i:
                latency = time.perf_counter() - landed
                latencies.append(latency)
                # where it went: before the batch began (the File seen, settled), the run's
                # phases, each dbt node's own time, and what the batch did after its run
                spent = {"detect": max(latency - line["seconds"], 0.0)}
                spent.update(line["phases"])
                spent.update({f"dbt {n}": s for n, s in line["nodes"].items()})
                run = sum(line["phases"].values())
                spent["after the run (maintenance, report)"] = max(line["seconds"] - run, 0.0)
                for name, seconds in spent.items():
                    parts.setdefault(name, []).append(seconds)
        # ten 100-row Files landing together: from the first written to the batch line that
        # commits the last of them (the watch may take them in more than one batch)
        for i in range(repeat):
            landed = time.perf_counter()
            for k in range(10):
                new_file(root / "landing" / "customers", 1000 + i * 10 + k)
            committed = 0
            while committed < 10:
                line = json.loads(proc.stdout.readline())
                assert line["ok"], line
                committed += line["committed"]
            ten.append(time.perf_counter() - landed)
    finally:
        proc.terminate()
        proc.wait(timeout=600)
    return {
        "landing_to_marker_s": statistics.median(latencies),
        "target_s": 3.0,
        "ten_files_s": statistics.median(ten),
        "ten_files_target_s": 5.0,
        "ten_files_runs": ten,
        "runs": latencies,
        # medians; dbt's nodes run 4 at a time, so theirs overlap and sum to more than dbt_nodes
        "phases_s": {name: statistics.median(v) for name, v in parts.items()},
    }


def entities_10_vs_1(base: Path, repeat: int) -> dict:
    """(d): one new customers File, cold `runner run`, 10 declared entities against 1."""
    sides: dict[str, list[float]] = {"one_s": [], "ten_s": []}
    nodes: dict[str, list[int]] = {"one": [], "ten": []}
    roots = {"one": root_for(base, "one_entity", 1), "ten": root_for(base, "ten_entities", 10)}
    for root in roots.values():
        runner_run(root)
    for i in range(repeat):
        for side, root in roots.items():
            new_file(root / "landing" / "customers", i + 1)
            seconds, report = runner_run(root)
            sides[f"{side}_s"].append(seconds)
            nodes[side].append(len(report["built"]))
    one, ten = statistics.median(sides["one_s"]), statistics.median(sides["ten_s"])
    return {
        "one_entity_s": one,
        "ten_entities_s": ten,
        "ratio": ten / one,
        "target": 1.1,
        "dbt_nodes": {k: statistics.median(v) for k, v in nodes.items()},
        "runs": sides,
    }


def latency(work: Path, repeat: int) -> dict:
    out = {}
    parts = (("cold_file", cold_file), ("watch", watched), ("entities", entities_10_vs_1))
    for name, part in parts:
        out[name] = part(work, repeat)
        print(f"latency {name}: {json.dumps(out[name])}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(latency(REPO / "bench" / "work_latency", args.repeat), indent=2))


if __name__ == "__main__":
    main()
