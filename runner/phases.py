"""Wall time per phase of a command, for the run's summary and `make bench`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Seconds spent per named phase, accumulated (a phase entered twice adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def line(self) -> str:
        """``spark 5.1s, hash 0.4s, ...`` in the order the phases first ran."""
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())

    def as_json(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}
