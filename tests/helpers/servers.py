"""Servers a test may stop and start: a PostgreSQL server of the test's own (initdb in a
temporary folder, its own port), so that taking it away mid-run touches nobody else's tests.

PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user Debian's
package creates."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

INSTALL = "PostgreSQL's server binaries are missing: `apt-get install -y postgresql`"


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        raise RuntimeError(INSTALL)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """A PostgreSQL server in a temporary folder on a free port (trust auth, user postgres,
    database test); ``stop()``, ``start()``, ``close()``."""

    def __init__(self, folder: str | None = None) -> None:
        """A new server; with ``folder`` (another process's server's), that one."""
        self.folder = Path(folder or tempfile.mkdtemp(prefix="cdc-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if not runuser:
                raise RuntimeError("as root, `runuser` is needed to run PostgreSQL as postgres")
            self._as = [runuser, "-u", "postgres", "--"]
        if folder:
            self.port = int((self.folder / "port").read_text())
            return
        self.port = _free_port()
        (self.folder / "port").write_text(str(self.port))
        if self._as:
            shutil.chown(self.folder, "postgres", "postgres")
        os.chmod(self.folder, 0o755)
        self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        self.start()
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "test")  # fmt: skip

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """Down at once: every client's connection is cut (``immediate``: as a crash would)."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def cut_connections(self) -> int:
        """Every other client's connection terminated (pg_terminate_backend), as an operator or
        a failover proxy cuts them; the server stays up. How many were cut."""
        import psycopg2

        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "select count(pg_terminate_backend(pid)) from pg_stat_activity"
                    " where pid <> pg_backend_pid() and backend_type = 'client backend'"
                )
                return int(cur.fetchone()[0])
        finally:
            conn.close()

    def answers(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    @property
    def env(self) -> dict[str, str]:
        """The variables that point profiles.yml's targets and the runner at this server."""
        return {
            "CDC_PG_HOST": "127.0.0.1",
            "CDC_PG_PORT": str(self.port),
            "CDC_PG_USER": "postgres",
            "CDC_PG_DATABASE": "test",
            "CDC_TEST_PG_FOLDER": str(self.folder),
        }

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                self.stop()
        deadline = time.monotonic() + 10
        while self.answers() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.folder, ignore_errors=True)


PROMETHEUS_INSTALL = (
    "Prometheus is missing: `make setup` installs Debian's package as root, else "
    "`apt-get install -y prometheus`"
)


@contextlib.contextmanager
def prometheus(folder: Path, scrape_port: int, rules: Path) -> Iterator[str]:
    """A Prometheus server (Debian's package) on a free port of 127.0.0.1, scraping
    127.0.0.1:``scrape_port`` and evaluating ``rules`` every second, its data in ``folder``;
    yields its base URL once it is ready."""
    exe = shutil.which("prometheus")
    if not exe:
        raise RuntimeError(PROMETHEUS_INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        "scrape_configs:\n"
        f"  - {{job_name: cdc, static_configs: [{{targets: ['127.0.0.1:{scrape_port}']}}]}}\n"
    )
    cmd = [exe, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
           f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with _serving("Prometheus", cmd, folder / "prometheus.log", f"{url}/-/ready"):
        yield url


def prometheus_query(url: str, expr: str) -> list[dict]:
    """An instant query's result vector: [{"metric": {...}, "value": [t, "v"]}, ...]."""
    import json
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(
        f"{url}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=10
    ) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def prometheus_alerts(url: str) -> list[dict]:
    """The server's alerts: [{"labels": {...}, "state": "firing"|"pending", ...}]."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=10) as r:
        return list(json.loads(r.read())["data"]["alerts"])


S3_INSTALL = "moto's S3 server is missing: `make setup` (or `.venv/bin/pip install 'moto[server]'`)"


@contextlib.contextmanager
def s3_server(folder: Path, *, check_credentials: bool = False) -> Iterator[str]:
    """A local S3 API (moto's server, `make s3-up` runs the same) on a free port of 127.0.0.1,
    its log in ``folder``; yields its endpoint URL once it answers. With
    ``check_credentials`` it refuses every access key it did not issue (moto's IAM checks)."""
    import sys

    exe = Path(sys.executable).parent / "moto_server"
    if not exe.exists():
        raise RuntimeError(S3_INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if check_credentials else {}))
    cmd = [str(exe), "-H", "127.0.0.1", "-p", str(port)]
    url = f"http://127.0.0.1:{port}"
    with _serving("moto", cmd, folder / "moto.log", f"{url}/moto-api/", env=env):
        yield url


AZURITE_INSTALL = "Azurite is missing: `make setup` (it installs it with npm into .venv/azurite)"
# Azurite's well-known development account (public, in Azure's documentation): not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@contextlib.contextmanager
def azurite(folder: Path) -> Iterator[str]:
    """Azurite's blob service (Azure's storage emulator, from npm) on a free port of 127.0.0.1,
    in memory, its log in ``folder``; yields the connection string of its development account
    once it answers."""
    import sys

    exe = Path(sys.executable).parent.parent / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if not exe.exists():
        raise RuntimeError(AZURITE_INSTALL)
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cmd = [str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(port),
           "--inMemoryPersistence", "--skipApiVersionCheck"]  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    # an unsigned request is refused: any answer means it is up
    with _serving("Azurite", cmd, folder / "azurite.log", f"{endpoint}?comp=list",
                  any_status=True, cwd=folder):  # fmt: skip
        yield (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
        )


def _answers(url: str, *, any_status: bool = False) -> bool:
    """Whether ``url`` answers 200 (or, with ``any_status``, answers at all)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200 or any_status)
    except urllib.error.HTTPError:
        return any_status
    except OSError:
        return False


@contextlib.contextmanager
def _serving(
    what: str,
    cmd: list[str],
    log_path: Path,
    ready_url: str,
    *,
    any_status: bool = False,
    **popen: Any,
) -> Iterator[None]:
    """``cmd`` running, its output in ``log_path``, once ``ready_url`` answers (60 s at most,
    else its log's tail); stopped after."""
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **popen)
    try:
        deadline = time.monotonic() + 60
        while not _answers(ready_url, any_status=any_status):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
