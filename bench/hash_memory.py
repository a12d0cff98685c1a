"""Peak memory (RSS) of hashing a large File with the runner's streamed SHA-256.

Each measurement runs in a fresh Python process and reports its peak RSS (ru_maxrss) after
importing the runner and hashing; the baseline is the same process importing the runner and
hashing nothing, so the difference is what hashing costs. A whole-file read
(``hashlib.sha256(path.read_bytes())``) is measured next to it for scale.

    python bench/hash_memory.py [--size-mib 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import hashlib, resource, sys
from pathlib import Path
from runner.hashing import content_hash
mode, path = sys.argv[1], Path(sys.argv[2])
if mode == "streamed":
    content_hash(path)
elif mode == "whole":
    hashlib.sha256(path.read_bytes()).hexdigest()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
"""


def peak_mib(mode: str, path: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(path)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip()) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("CDC_BENCH_TMP")) as tmp:
        path = Path(tmp) / "big.csv"
        chunk = os.urandom(1 << 20)
        with open(path, "wb") as fh:
            for _ in range(args.size_mib):
                fh.write(chunk)
        result = {}
        for mode in ("baseline", "streamed", "whole"):
            result[mode] = statistics.median(peak_mib(mode, path) for _ in range(args.repeat))
        report = {
            "file_mib": args.size_mib,
            "peak_rss_mib": {k: round(v, 1) for k, v in result.items()},
            "hashing_cost_mib": round(result["streamed"] - result["baseline"], 1),
            "whole_file_read_cost_mib": round(result["whole"] - result["baseline"], 1),
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
