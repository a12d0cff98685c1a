"""The local BigQuery emulator (PyPI `bqemulator`) the bigquery target is verified on.

    python tools/bq_emulator.py install   # its own venv (.venv-bq), once (`make setup` does it)
    python tools/bq_emulator.py up        # background, 127.0.0.1:19050; returns once it answers
    python tools/bq_emulator.py down

It lives in its own virtual environment because it pins sqlglot and duckdb versions the
project's own environment does not use. Its DuckDB extensions are installed from wheels into a
private HOME (it would download them at start, and there is no network for that). State is in
memory: stopping it forgets every dataset. What it does not reproduce of BigQuery is listed in
docs/destinations.md ("Verified where").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-bq"
STATE = REPO / ".cdc" / "bq-emulator"
PACKAGES = [
    "bqemulator==1.4.0",
    "duckdb==1.5.5",
    "duckdb-extension-spatial==1.5.5",
    "duckdb-extension-avro==1.5.5",
    "numpy",  # needed at start, not declared by bqemulator 1.4.0
]
DEFAULT_PORT = 19050
PROJECT = "cdc-local"
INSTALL_EXTENSIONS = """
import duckdb, importlib.resources as r
for e in ("spatial", "avro"):
    f = r.files(f"duckdb_extension_{e}") / "extensions" / f"v{duckdb.__version__}"
    duckdb.connect().execute(f"INSTALL '{f / (e + '.duckdb_extension')}'")
"""


def _home(state: Path) -> Path:
    return state / "home"


def install(venv: Path = VENV, state: Path = STATE) -> None:
    """Create the emulator's venv and put its DuckDB extensions where it looks for them."""
    marker = venv / ".installed"
    if marker.exists() and (_home(state) / ".duckdb").exists():
        return
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", *PACKAGES],
        check=True,
    )
    _home(state).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(_home(state)))
    subprocess.run([str(venv / "bin" / "python"), "-c", INSTALL_EXTENSIONS], check=True, env=env)
    marker.touch()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Emulator:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start(
    port: int | None = None,
    *,
    venv: Path = VENV,
    state: Path = STATE,
    log: Path | None = None,
    timeout: float = 60.0,
    data_dir: Path | None = None,
) -> Emulator:
    """Start the emulator on 127.0.0.1:``port`` (a free one if None); return once it answers.
    With ``data_dir`` its state is kept there (DuckDB file): a restart on it finds it again."""
    binary = venv / "bin" / "bqemulator"
    if not binary.exists():
        raise RuntimeError(
            f"{binary} is missing: run `make setup` (or `python tools/bq_emulator.py install`)"
        )
    port = port or free_port()
    log = log or state / f"emulator-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(_home(state)))
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                str(binary),
                "start",
                "--rest-host",
                "127.0.0.1",
                "--rest-port",
                str(port),
                "--grpc-host",
                "127.0.0.1",
                "--grpc-port",
                str(free_port()),
                "--project",
                PROJECT,
                "--log-level",
                "warning",
                *(["--persistent", "--data-dir", str(data_dir)] if data_dir else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    emulator = Emulator(process, port)
    deadline = time.monotonic() + timeout
    while not answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            emulator.stop()
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the BigQuery emulator did not start on port {port}:\n{tail}")
        time.sleep(0.1)
    return emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install", "up", "down"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    pidfile = STATE / f"emulator-{args.port}.pid"
    if args.command == "install":
        install()
        print(f"BigQuery emulator installed in {VENV}")
        return 0
    if args.command == "up":
        if answers(args.port):
            print(f"something already answers on 127.0.0.1:{args.port}; leaving it")
            return 0
        emulator = start(args.port)
        pidfile.write_text(str(emulator.process.pid))
        print(
            f"BigQuery emulator on {emulator.endpoint} (pid {emulator.process.pid}); "
            "`make bq-down` stops it"
        )
        return 0
    if not pidfile.exists():
        print(f"no emulator started by `make bq-up` on port {args.port}")
        return 0
    pid = int(pidfile.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    pidfile.unlink()
    print(f"stopped the BigQuery emulator (pid {pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
