"""`runner run --watch` between polls: a File written under a local landing folder ends the wait
at once (watchdog, inotify here), a signal ends it too, and roots that cannot be watched (object
storage, a folder not there yet) are left to polling."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from runner.fs import RemoteFile
from runner.watch import Changes, Stop

# The wait asked for: far longer than any test may take, so only a wake can end it in time.
LONG = 60.0


def waited(stop: Stop, action: threading.Timer) -> float:
    action.start()
    started = time.monotonic()
    stop.wait(LONG)
    action.join()
    return time.monotonic() - started


def test_a_file_landing_in_a_watched_folder_or_a_signal_ends_the_wait(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    (landing / "customers" / "2026" / "11").mkdir(parents=True)
    stop = Stop()
    roots = [landing, RemoteFile("s3://landing/dms"), tmp_path / "not-there-yet"]
    changes = Changes(roots, stop.wake).start()
    try:
        assert changes.watched == [landing]
        # A File in a date folder below the root, as DMS writes them.
        new_file = landing / "customers" / "2026" / "11" / "20261129-120000000.csv"
        woken = waited(stop, threading.Timer(0.3, new_file.write_text, ["Op,id\nI,1\n"]))
        assert woken < LONG / 10, woken
        assert not stop.is_set()
        # Nothing written: a wait ends by SIGTERM's handler.
        stop_now = threading.Timer(0.3, stop._signalled, [signal.SIGTERM, None])
        assert waited(stop, stop_now) < LONG / 10
        assert stop.is_set()
    finally:
        changes.close()
