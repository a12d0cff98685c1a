"""A run's heartbeat: a daemon thread that renews the run's sign of life and its Files' leases.

While a run works (hashing, a long Spark job, dbt), the thread renews every ``interval``
seconds, so its leases can be short: a run that died is noticed by the next one within one
lease (at once when the dead process was on the same host, see ``audit.process_alive``).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from audit import AuditDB

log = logging.getLogger("runner.heartbeat")


class Heartbeat:
    def __init__(self, db: AuditDB, process_id: str, interval: float | None = None) -> None:
        self.db = db
        self.process_id = process_id
        self.interval = interval if interval is not None else max(1.0, db.lease_seconds / 4)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"cdc-heartbeat-{process_id}", daemon=True
        )
        self.failures = 0

    def beat(self) -> int:
        return self.db.heartbeat(self.process_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
                self.failures = 0
            except Exception as exc:  # the Audit DB is unreachable for now: keep trying
                self.failures += 1
                log.warning("heartbeat of %s failed (%s): %s", self.process_id, self.failures, exc)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
