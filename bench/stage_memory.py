"""Peak memory (RSS) of `runner ingest` hashing and staging about 1 GiB of CSV.

Runs the real CLI as a child process on generated Files and samples the resident memory of the
runner's Python process and of the Spark JVM it starts (their sum is what the machine sees),
every 0.2 s; reports the peaks. The Python process only hashes, registers and drives Spark; the
JVM does the staging within its configured heap (spark.driver.memory).

    python bench/stage_memory.py --root bench/work [--size-mib 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except FileNotFoundError:
            continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="A project root (bench/work).")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--data", type=Path, help="Where the generated Files go (root/data).")
    args = parser.parse_args()
    from runner.entities import load_entities
    from runner.project import Project
    from runner.samples.generate import GenerateSpec, generate_entity

    landing = ((args.data or args.root / "data") / f"memory_{args.size_mib}").resolve()
    folder = landing / "customers"
    if not folder.exists():
        project = Project.load(args.root, target="local")
        entity = load_entities(project)["customers"]
        rows = args.size_mib * 1024 * 1024 // 128  # about 128 bytes per generated row
        generate_entity(
            entity,
            folder,
            GenerateSpec(initial=rows // 10, incremental=rows - rows // 10, files=16),
        )
    size = sum(p.stat().st_size for p in folder.iterdir())
    env = dict(
        os.environ,
        CDC_SCHEMA="bench_memory",
        PATH=f"{Path(sys.executable).parent}:" + os.environ["PATH"],
    )
    audit = args.root / "audit_memory.db"
    audit.unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "runner"),
            "--project-dir",
            str(args.root),
            "--audit-url",
            f"sqlite:///{audit}",
            "ingest",
            "--landing",
            str(landing),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    peak_py = peak_jvm = peak_sum = 0.0
    while proc.poll() is None:
        py = rss_mib(proc.pid)
        jvm = sum(rss_mib(c) for c in children(proc.pid))
        peak_py, peak_jvm, peak_sum = max(peak_py, py), max(peak_jvm, jvm), max(peak_sum, py + jvm)
        time.sleep(0.2)
    print(
        json.dumps(
            {
                "input_mib": round(size / 2**20, 1),
                "exit_code": proc.returncode,
                "seconds": round(time.perf_counter() - started, 1),
                "peak_rss_mib": {
                    "runner_python": round(peak_py, 1),
                    "spark_jvm": round(peak_jvm, 1),
                    "together": round(peak_sum, 1),
                },
                "target_mib": 300,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
