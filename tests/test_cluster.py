"""The runner and `dbt build` on a Spark standalone cluster (issue "Operate and scale").

A master and one worker are started from pyspark's own files (`bin/spark-class
org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker`), the project's `cluster`
target points at the master, and `runner run` (ingest, then `dbt build` in the same
SparkSession) applies generated customers Files. The table must equal the oracle's, and the
master must have run the runner's application on its worker (its JSON status lists it as
completed, with cores from the worker).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.oracles import customers_oracle as oracle
from helpers.oracles import shown_customers
from helpers.project import CATALOG_SCHEMAS, CHANGES_HISTORY, TEST_JAVA_OPTIONS

from runner.samples.generate import generate_customers

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, url: str, ui: str) -> None:
        self.url = url
        self.ui = ui

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as resp:
            return json.loads(resp.read())


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 2 GiB) on 127.0.0.1, for this module."""
    import pyspark

    home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("cluster")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    env["SPARK_DAEMON_JAVA_OPTS"] = TEST_JAVA_OPTIONS  # the master's and worker's JVMs
    env.pop("SPARK_MASTER_HOST", None)
    procs = []

    def start(name: str, *args: str) -> None:
        log = open(logs / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    url = f"spark://127.0.0.1:{port}"
    cluster = Cluster(url, f"http://127.0.0.1:{ui}")
    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
        )  # fmt: skip
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--cores", "1", "--memory", "2g", "--webui-port", str(worker_ui),
            "--work-dir", str(logs / "work"),
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            try:
                if any(w["state"] == "ALIVE" for w in cluster.state()["workers"]):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs_text = "\n".join(f.read_text()[-2000:] for f in logs.glob("*.log"))
                pytest.fail(f"the standalone cluster did not come up:\n{logs_text}")
            time.sleep(1)
        yield cluster
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)


def test_runner_and_dbt_build_on_a_standalone_cluster(
    cli_project,  # noqa: ANN001
    spark_cluster: Cluster,
    request: pytest.FixtureRequest,
) -> None:
    cli = cli_project("cluster", without=CHANGES_HISTORY, processes=True)
    cli.env["CDC_SPARK_MASTER"] = spark_cluster.url
    cli.catalog_schema = cli.env["CDC_CATALOG_SCHEMA"] + "_cluster"  # the cluster target's
    CATALOG_SCHEMAS.append(cli.catalog_schema)
    # The table is read back here, by the worker's own session, from the folder the cluster
    # wrote (dbt build ran on the cluster in the runner's application).
    cli.spark = lambda: request.getfixturevalue("spark")
    landing = cli.root / "landing" / "customers"
    files = generate_customers(landing, initial=600, files=5, changes_per_file=200)

    out = cli.runner("run", "--landing", "landing", "--json")
    result = json.loads(out.stdout)
    assert result["ok"] and result["ingest"]["staged"] == len(files), result
    assert result["entities"][0]["applied"] == len(files), result

    assert shown_customers(cli.table("{{ ref('customers') }}")) == oracle(files)

    # The master ran the runner's application (ingest and dbt in one SparkSession) on its
    # worker: it is listed, finished, with the worker's core.
    apps = spark_cluster.state()["completedapps"]
    runner_apps = [a for a in apps if a["name"] == "cdc-runner"]
    assert runner_apps and all(a["cores"] >= 1 for a in runner_apps), apps
