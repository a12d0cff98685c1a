"""Progress of long work: a live display on a terminal, plain key=value log lines otherwise.

`runner ingest` reports Files hashed (and bytes) and Files staged (and rows) per entity.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bars

log = logging.getLogger("runner.progress")


class Progress:
    """Does nothing; the library default."""

    def start(self, phase: str, entity: str, total: int) -> None:
        pass

    def advance(self, phase: str, entity: str, files: int = 1, **amounts: int) -> None:
        pass

    def close(self) -> None:
        pass


class LogProgress(Progress):
    """One log line per phase start and end, and at most one every ``every`` seconds between."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.state: dict[tuple[str, str], dict[str, Any]] = {}

    def start(self, phase: str, entity: str, total: int) -> None:
        self.state[(phase, entity)] = {"total": total, "files": 0, "last": time.monotonic()}
        log.info("progress phase=%s entity=%s files=0/%d", phase, entity, total)

    def advance(self, phase: str, entity: str, files: int = 1, **amounts: int) -> None:
        st = self.state.setdefault((phase, entity), {"total": 0, "files": 0, "last": 0.0})
        st["files"] += files
        for k, v in amounts.items():
            st[k] = st.get(k, 0) + v
        now = time.monotonic()
        if st["files"] >= st["total"] or now - st["last"] >= self.every:
            st["last"] = now
            extra = "".join(f" {k}={st[k]}" for k in sorted(amounts))
            log.info(
                "progress phase=%s entity=%s files=%d/%d%s",
                phase,
                entity,
                st["files"],
                st["total"],
                extra,
            )


class RichProgress(Progress):
    """A live bar per phase and entity on the terminal (stderr)."""

    def __init__(self) -> None:

        self.bars = Bars(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.tasks: dict[tuple[str, str], Any] = {}
        self.amounts: dict[tuple[str, str], dict[str, int]] = {}
        self.bars.start()

    def start(self, phase: str, entity: str, total: int) -> None:
        key = (phase, entity)
        self.tasks[key] = self.bars.add_task(f"{phase} {entity}", total=total, detail="")
        self.amounts[key] = {}

    def advance(self, phase: str, entity: str, files: int = 1, **amounts: int) -> None:
        key = (phase, entity)
        if key not in self.tasks:
            self.start(phase, entity, files)
        got = self.amounts[key]
        for k, v in amounts.items():
            got[k] = got.get(k, 0) + v
        detail = " ".join(f"{v:,} {k}" for k, v in got.items())
        self.bars.update(self.tasks[key], advance=files, detail=detail)

    def close(self) -> None:
        self.bars.stop()  # idempotent


def for_terminal() -> Progress:
    """Rich bars when stderr is a terminal, log lines otherwise."""
    return RichProgress() if sys.stderr.isatty() else LogProgress()
