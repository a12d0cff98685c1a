"""`runner metrics` (the Audit DB's Prometheus metrics, as a process) and the alert rules
shipped in docs/monitoring/ (`promtool check rules`, `promtool test rules`). A real Prometheus
scraping a watch: tests/test_watch.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from helpers.project import REPO, make_project
from helpers.servers import PROMETHEUS_INSTALL

from audit import AuditDB, utcnow
from audit.models import files as files_t
from runner.ids import new_process_id

MONITORING = REPO / "docs" / "monitoring"
RUNNER = str(Path(sys.executable).parent / "runner")


def test_the_alert_rules_load_and_fire_on_their_test_series() -> None:
    promtool = shutil.which("promtool")
    assert promtool, PROMETHEUS_INSTALL
    for args in (["check", "rules", "cdc-alerts.yml"], ["test", "rules", "cdc-alerts.test.yml"]):
        done = subprocess.run(
            [promtool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_runner_metrics_counts_files_per_state_and_the_oldest_waiting(tmp_path: Path) -> None:
    """Two entities: customers with a File committed, one staged an hour ago and one
    quarantined; accounts with one committed. Prometheus' own parser reads the output."""
    from prometheus_client.parser import text_string_to_metric_families

    root = make_project(tmp_path / "repo")
    db = AuditDB(f"sqlite:///{root / '.cdc' / 'local' / 'audit.db'}")
    db.upgrade()
    pid = new_process_id()
    db.start_run(pid, "test", "local")

    def file(entity: str, name: str) -> int:
        registered = db.register_file(
            entity=entity, path=f"/l/{entity}/{name}", size=1, mtime=utcnow(),
            content_hash=(entity + name).ljust(64, "0")[:64], process_id=pid,
        )  # fmt: skip
        db.claim(registered.file.id, pid)
        return registered.file.id

    committed = [file("customers", "a.csv"), file("accounts", "a.csv")]
    for file_id in committed:
        db.mark_staged(file_id, pid, pid)
        db.mark_committed(file_id, pid)
    waiting = file("customers", "b.csv")
    db.mark_staged(waiting, pid, pid)
    db.quarantine(file("customers", "c.csv"), pid, "line 2, column 3: not a number")
    with db.engine.begin() as conn:  # b.csv was registered an hour ago
        conn.execute(
            files_t.update()
            .where(files_t.c.id == waiting)
            .values(created_at=utcnow() - timedelta(hours=1))
        )
    db.dispose()

    out = subprocess.run([RUNNER, "metrics"], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(out.stdout)
        for s in family.samples
    }
    files = {k[1]: v for k, v in samples.items() if k[0] == "cdc_files"}
    assert files == {
        (("entity", "accounts"), ("state", "COMMITTED")): 1,
        (("entity", "customers"), ("state", "COMMITTED")): 1,
        (("entity", "customers"), ("state", "QUARANTINED")): 1,
        (("entity", "customers"), ("state", "STAGED")): 1,
    }
    lag = {
        k[1][0][1]: v for k, v in samples.items() if k[0] == "cdc_oldest_waiting_file_age_seconds"
    }
    assert lag["accounts"] == 0 and 3600 <= lag["customers"] < 3600 + 60, lag
    assert {k[1][0][1] for k in samples if k[0] == "cdc_last_commit_timestamp_seconds"} == {
        "accounts",
        "customers",
    }


def test_metrics_port_is_for_the_watch(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo")
    out = subprocess.run(
        [RUNNER, "run", "--metrics-port", "9"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "--metrics-port is for --watch" in out.stderr, out.stderr


def test_a_watch_counts_its_batches_their_files_rows_and_durations() -> None:
    """WatchMetrics fed two batches as the watch loop feeds them (one that staged and applied 5
    Files of 280 rows in 2.5 s, one that quarantined a File in 0.5 s)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from runner.ingest import IngestResult
    from runner.metrics import WatchMetrics
    from runner.run import RunResult
    from runner.summary import EntitySummary
    from runner.watch import Batch

    registry = CollectorRegistry()
    watch = WatchMetrics(registry)
    good = RunResult(ingest=IngestResult(staged=5, rows=280), dbt_ok=True, dbt_error=None)
    bad = RunResult(ingest=IngestResult(quarantined=1), dbt_ok=True, dbt_error=None)
    watch.observe(
        Batch("p1", good, seconds=2.5, entities=[EntitySummary("customers", 5, applied=5)])
    )
    watch.observe(
        Batch("p2", bad, seconds=0.5, entities=[EntitySummary("customers", quarantined=1)])
    )
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("cdc_batches_total", (("outcome", "ok"),))] == 1
    assert samples[("cdc_batches_total", (("outcome", "failed"),))] == 1
    assert samples[("cdc_batch_rows_staged_total", ())] == 280
    files = {k[1]: v for k, v in samples.items() if k[0] == "cdc_batch_files_total"}
    assert files == {
        (("entity", "customers"), ("outcome", "staged")): 5,
        (("entity", "customers"), ("outcome", "committed")): 5,
        (("entity", "customers"), ("outcome", "quarantined")): 1,
    }
    assert samples[("cdc_batch_duration_seconds_count", ())] == 2
    assert samples[("cdc_batch_duration_seconds_sum", ())] == 3.0
    assert samples[("cdc_batch_duration_seconds_bucket", (("le", "1.0"),))] == 1
    assert samples[("cdc_last_successful_batch_timestamp_seconds", ())] > 0
