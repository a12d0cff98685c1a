"""Prometheus metrics (docs/operations.md, Monitoring): what the Audit DB knows, read at each
scrape (Files per entity and state, the age of each entity's oldest File not yet committed,
its last commit, the rows applied per target table), and what a `runner run --watch` process
saw (its batches: count by outcome, duration, Files by what became of them, the last that
succeeded). `runner run --watch --metrics-port N` serves them; `runner metrics` prints the Audit
DB's once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from audit import AuditDB
from runner.status import WAITING, by_entity

if TYPE_CHECKING:
    from runner.invocation import Invocation

NAMESPACE = "cdc"
# seconds: a small File through a warm watch, up to a large batch
BATCH_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
COUNT_KINDS = {
    "rows_inserted": "inserted",
    "rows_updated": "updated",
    "rows_deleted": "deleted",
    "rows_skipped": "stale",
}


class AuditCollector:
    """Metrics read from the Audit DB at each scrape, through an engine of their own opened
    and closed per scrape (the HTTP server answers in threads of its own)."""

    def __init__(self, audit_url: str, audit_schema: str | None) -> None:
        self.audit_url = audit_url
        self.audit_schema = audit_schema

    def describe(self) -> list[Any]:
        return []  # no up-front description: the families come from collect()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        db = AuditDB(self.audit_url, schema=self.audit_schema)
        try:
            files = db.files()
            applied = db.applied_totals()
        finally:
            db.dispose()
        now = datetime.now(UTC).replace(tzinfo=None)
        by_state = GaugeMetricFamily(
            f"{NAMESPACE}_files", "Files the Audit DB knows, by entity and state",
            labels=["entity", "state"],
        )  # fmt: skip
        lag = GaugeMetricFamily(
            f"{NAMESPACE}_oldest_waiting_file_age_seconds",
            "Age of the entity's oldest File not yet committed (registered, staged or being "
            "staged); 0 when none waits",
            labels=["entity"],
        )
        waiting = GaugeMetricFamily(
            f"{NAMESPACE}_waiting_files",
            "Files of the entity not yet committed (registered, staged or being staged)",
            labels=["entity"],
        )
        last = GaugeMetricFamily(
            f"{NAMESPACE}_last_commit_timestamp_seconds",
            "When the entity's last File was committed (Unix time)",
            labels=["entity"],
        )
        rows = CounterMetricFamily(
            f"{NAMESPACE}_rows_applied",
            "Rows of the entity's Files applied to a target table, by what the apply did "
            "(from the Applied File Markers the Audit DB keeps)",
            labels=["entity", "target_table", "kind"],
        )
        for e in by_entity(files):
            for state, n in sorted(e.states.items()):
                by_state.add_metric([e.entity, state], n)
            waiting.add_metric([e.entity], e.count(*WAITING))
            age = (now - e.oldest_waiting).total_seconds() if e.oldest_waiting else 0.0
            lag.add_metric([e.entity], max(age, 0.0))
            if e.last_commit is not None:
                last.add_metric([e.entity], e.last_commit.replace(tzinfo=UTC).timestamp())
        for r in applied:
            for column, kind in COUNT_KINDS.items():
                rows.add_metric([r["entity"], r["target_table"], kind], float(r[column] or 0))
        yield from (by_state, waiting, lag, last, rows)


class WatchMetrics:
    """What one watch process saw, batch by batch, beside the Audit DB's metrics."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.batches = Counter(
            f"{NAMESPACE}_batches", "Batches of this watch, by outcome (ok, failed)",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            f"{NAMESPACE}_batch_duration_seconds",
            "How long a batch took: ingest, dbt build, reconcile",
            buckets=BATCH_BUCKETS, registry=registry,
        )  # fmt: skip
        self.files = Counter(
            f"{NAMESPACE}_batch_files",
            "Files the batches of this watch moved, by entity and what became of them (staged, "
            "committed, quarantined, failed)",
            ["entity", "outcome"], registry=registry,
        )  # fmt: skip
        self.rows_staged = Counter(
            f"{NAMESPACE}_batch_rows_staged",
            "Rows of the Files the batches of this watch staged (every entity)",
            registry=registry,
        )
        self.last_success = Gauge(
            f"{NAMESPACE}_last_successful_batch_timestamp_seconds",
            "When the last batch that succeeded ended (Unix time)",
            registry=registry,
        )

    def observe(self, batch: Any) -> None:
        self.batches.labels("ok" if batch.ok else "failed").inc()
        self.duration.observe(batch.seconds)
        if batch.result is not None:
            self.rows_staged.inc(batch.result.ingest.rows)
        for e in batch.entities:
            for outcome, n in (
                ("staged", e.staged),
                ("committed", e.applied),
                ("quarantined", e.quarantined),
                ("failed", e.failed),
            ):
                if n:
                    self.files.labels(e.entity, outcome).inc(n)
        if batch.ok:
            self.last_success.set(time.time())


def registry_for(inv: Invocation) -> Any:
    """A registry holding the Audit DB's metrics for ``inv``'s project and target."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(AuditCollector(inv.audit_url, inv.audit_schema))
    return registry


def text(inv: Invocation) -> str:
    """The Audit DB's metrics once, in Prometheus' text format (`runner metrics`)."""
    from prometheus_client import generate_latest

    return generate_latest(registry_for(inv)).decode()


def serve(inv: Invocation, port: int, host: str = "127.0.0.1") -> WatchMetrics:
    """Serve the Audit DB's and this watch's metrics on http://host:port/metrics (a thread of
    the process) and return the watch's, for the loop to feed."""
    from prometheus_client import start_http_server

    registry = registry_for(inv)
    watch = WatchMetrics(registry)
    start_http_server(port, addr=host, registry=registry)  # a daemon thread
    return watch
