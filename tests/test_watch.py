"""`runner run --watch` as a user starts it, on local Spark, PostgreSQL and the BigQuery
emulator: one process that applies Files landing over several polls, each exactly once; a bad
File among them is quarantined and the loop goes on; SIGTERM in the middle of a batch lets it
finish and stops the process. On PostgreSQL a real Prometheus server scrapes the watch's
metrics: what it stores equals the Audit DB, and the quarantine alert fires. The same command
without --watch afterwards gives the oracle's table, with one Applied File Marker per File."""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.oracles import HEADER, customers_oracle, shown_customers
from helpers.project import CHANGES_HISTORY, REPO, bigquery_rows
from helpers.servers import _free_port, prometheus, prometheus_alerts, prometheus_query

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.postgres]

ALERTS = REPO / "docs" / "monitoring" / "cdc-alerts.yml"
INSERTED = 'cdc_rows_applied_total{kind="inserted"}'


def _states(cli) -> dict[str, str]:  # noqa: ANN001
    """File name -> state, from `runner status --json`."""
    out = json.loads(cli.runner("status", "--json").stdout)
    return {Path(f["path"]).name: f["state"] for f in out}


def _until(cli, proc, want: dict[str, str], timeout: float = 300) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = _states(cli)
        if all(states.get(name) == state for name, state in want.items()):
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"watch exited {proc.returncode}\n{out}\n{err}")
        time.sleep(0.5)
    raise AssertionError(f"not reached in {timeout:.0f} s: {want}; now {_states(cli)}")


def _scraped_as_the_audit_db_says(cli, url: str) -> None:  # noqa: ANN001
    """What Prometheus stored from the watch's metrics equals the Audit DB (`runner status
    --json`): Files per entity and state, rows applied per target table; the watch counted the
    quarantined File; the quarantine alert (docs/monitoring/cdc-alerts.yml) fires."""
    files = json.loads(cli.runner("status", "--json").stdout)
    states = Counter((f["entity"], f["state"]) for f in files)
    inserted = Counter()
    for f in files:
        for m in f["markers"]:
            inserted[m["target_table"]] += m["rows_inserted"]

    def scraped(expr: str, *labels: str) -> dict[tuple[str, ...], int]:
        return {
            tuple(r["metric"].get(k, "") for k in labels): int(float(r["value"][1]))
            for r in prometheus_query(url, expr)
        }

    deadline = time.monotonic() + 60
    while True:
        got = (
            scraped("cdc_files", "entity", "state"),
            scraped(f"sum by (target_table) ({INSERTED})", "target_table"),
            scraped('cdc_batch_files_total{outcome="quarantined"}', "entity"),
            {(a["labels"]["alertname"], a["labels"]["entity"], a["state"])
             for a in prometheus_alerts(url)},
        )  # fmt: skip
        want = (
            dict(states),
            {(t,): n for t, n in inserted.items()},
            {("customers",): 1},
            {("CdcFileQuarantined", "customers", "firing")},
        )
        if got == want:
            return
        assert time.monotonic() < deadline, (got, want)
        time.sleep(0.5)


@pytest.mark.parametrize(
    "target", ["local", "postgres", pytest.param("bigquery", marks=pytest.mark.bigquery)]
)
def test_watch_applies_files_landing_over_several_polls_once_and_stops_on_sigterm(
    cli_project,  # noqa: ANN001
    target: str,
) -> None:
    cli = cli_project(target, without=CHANGES_HISTORY)
    landing = cli.root / "landing" / "customers"
    landing.mkdir(parents=True)
    files = sorted((REPO / "landing" / "customers").iterdir())
    load, first, second = files[-1], files[0], files[1]  # LOAD00000001 sorts last by name
    assert load.name.startswith("LOAD")
    bad = "20260301-080700000.csv"

    # On PostgreSQL, the watch also serves its metrics to a real Prometheus server.
    metrics_port = _free_port() if target == "postgres" else None
    served = ("--metrics-port", str(metrics_port)) if metrics_port else ()
    proc = cli.start(
        "runner", "run", "--watch", "--interval", "0.5", "--json",
        "--landing", "landing", "--target", target, *served,
    )  # fmt: skip
    try:
        shutil.copy(load, landing / load.name)
        _until(cli, proc, {load.name: "COMMITTED"})
        shutil.copy(first, landing / first.name)
        (landing / bad).write_text(HEADER + "I,20260301080700000000000000000000001,x,a,b,c,1,2\n")
        _until(cli, proc, {first.name: "COMMITTED", bad: "QUARANTINED"})
        if metrics_port:
            with prometheus(cli.root / "prometheus", metrics_port, ALERTS) as url:
                _scraped_as_the_audit_db_says(cli, url)
        shutil.copy(second, landing / second.name)
        deadline = time.monotonic() + 120
        while second.name not in _states(cli):  # its batch has begun: registered, not applied
            assert time.monotonic() < deadline and proc.poll() is None, "no batch for the File"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, f"exit {proc.returncode} (a batch quarantined a File)\n{err}"
    assert "SIGTERM: stopping after the current batch" in err, err
    batches = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(batches) >= 3, out
    assert sum(b["staged"] for b in batches) == 3, batches
    assert sum(b["quarantined"] for b in batches) == 1, batches
    assert all(b["error"] is None for b in batches), batches
    assert batches[-1]["staged"] == 1 and batches[-1]["committed"] == 1, batches[-1]

    done = [load, first, second]
    again = json.loads(cli.runner("run", "--json", "--landing", "landing").stdout)
    assert again["ingest"]["staged"] == 0 and again["ok"], again
    states = _states(cli)
    assert {n: states[n] for n in (f.name for f in done)} == dict.fromkeys(
        (f.name for f in done), "COMMITTED"
    ), states
    if target == "bigquery":  # read with the client: quicker than `dbt show` there
        current = bigquery_rows(cli, "customers")
        markers = bigquery_rows(cli, "cdc_applied_files")
    else:
        current = cli.table("{{ ref('customers') }}")
        markers = cli.table("{{ source('cdc_state', 'applied_files') }}")
    assert shown_customers(current) == customers_oracle(done)
    per_file = Counter(m["file_name"].rsplit("/", 1)[-1] for m in markers)
    assert per_file == Counter({f.name: 1 for f in done}), per_file
