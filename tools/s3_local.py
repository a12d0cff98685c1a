"""A local S3 API (moto's server, PyPI `moto[server]`) for the S3 landing demo and tests.

    python tools/s3_local.py up        # background, 127.0.0.1:4566; returns once it answers
    python tools/s3_local.py upload    # bucket `landing`, the sample Files as DMS puts them
    python tools/s3_local.py down

State is in memory: stopping it forgets every bucket. It takes any credentials (it checks no
signature); the commands that talk to it need AWS_ENDPOINT_URL=http://127.0.0.1:4566 and some
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (`make demo-s3` sets them). What it does not
reproduce of S3 is in docs/landing.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".cdc" / "s3-local"
DEFAULT_PORT = 4566
BUCKET = "landing"


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def up(port: int) -> int:
    if answers(port):
        print(f"something already answers on 127.0.0.1:{port}; leaving it")
        return 0
    binary = Path(sys.executable).parent / "moto_server"
    if not binary.exists():
        print(f"{binary} is missing: run `make setup`", file=sys.stderr)
        return 2
    STATE.mkdir(parents=True, exist_ok=True)
    log = STATE / f"moto-{port}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while not answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            print(f"the S3 API did not start on port {port}:\n{log.read_text()[-2000:]}")
            return 2
        time.sleep(0.1)
    (STATE / f"moto-{port}.pid").write_text(str(process.pid))
    print(f"local S3 API on http://127.0.0.1:{port} (pid {process.pid}); `make s3-down` stops it")
    return 0


def upload(port: int, landing: Path) -> int:
    """Bucket `landing` with every sample File under its own folder's key (customers/...)."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "local"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
        region_name="us-east-1",
    )
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=BUCKET)
    files = sorted(p for p in landing.rglob("*") if p.is_file())
    for path in files:
        s3.upload_file(str(path), BUCKET, path.relative_to(landing).as_posix())
    print(f"uploaded {len(files)} Files from {landing} to s3://{BUCKET}/")
    return 0


def down(port: int) -> int:
    pidfile = STATE / f"moto-{port}.pid"
    if not pidfile.exists():
        print(f"no S3 API started by `make s3-up` on port {port}")
        return 0
    pid = int(pidfile.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    pidfile.unlink()
    print(f"stopped the local S3 API (pid {pid})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "upload", "down"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--landing", type=Path, default=REPO / "landing")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.port)
    if args.command == "upload":
        return upload(args.port, args.landing)
    return down(args.port)


if __name__ == "__main__":
    sys.exit(main())
