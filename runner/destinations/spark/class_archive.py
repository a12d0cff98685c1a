"""A class-data-sharing archive of Spark's classes, so that a runner's JVM starts warm.

A cold `runner run` spends seconds loading and verifying the same tens of thousands of Spark
classes every time. The JVM can keep them mapped from an archive (CDS): `runner init` (run by
`make setup`) writes one for the installed pyspark and Java, by running a small Spark job of
the kinds staging and the applies run in a JVM started with ``-XX:ArchiveClassesAtExit``; every
session the runner starts after that maps it (``-XX:SharedArchiveFile``). The archive belongs
to the environment (it sits under ``sys.prefix``, or in ``CDC_CLASS_ARCHIVE_DIR``), not to a
project: every checkout using the same environment shares it. A missing or stale archive only
means a slower start: the JVM checks the archive against its own build and class path and runs
without it if they differ (its message about that is switched off).

The job whose JVM writes the archive is ``runner.destinations.spark.class_archive_job``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# The options the runner adds to the driver JVM when an archive is there; a profile that sets
# any CDS option of its own keeps its own.
_OWN_CDS = re.compile(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)|-Xshare:")
# The JVM's "Unable to use shared archive" (an archive of another build), on stdout or stderr.
_SILENT = " ".join(
    f"-Xlog:{tags}=off{out}" for out in ("", ":stderr") for tags in ("cds", "cds+dynamic")
)


def _java_home() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        return Path(home)
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def archive_path() -> Path | None:
    """Where this environment's archive is (or would be): named by pyspark's version and the
    Java build that would run it. None: no Java to run Spark at all."""
    import pyspark

    home = _java_home()
    if home is None:
        return None
    release = home / "release"
    build = release.read_text(errors="replace") if release.exists() else str(home)
    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    key = hashlib.sha256("\n".join([str(home.resolve()), build, *names]).encode()).hexdigest()
    folder = os.environ.get("CDC_CLASS_ARCHIVE_DIR") or Path(sys.prefix) / "share" / "cdc"
    return Path(folder) / f"spark-{pyspark.__version__}-{key[:12]}.jsa"


def java_option(option: str, path: Path | str) -> str:
    """``-X...=path`` as one option in ``spark.driver.extraJavaOptions``, which Spark's launcher
    splits as a shell would: the path in double quotes, its ``"`` and ``\\`` escaped, so that a
    space, a quote or an ``@`` in a checkout's path keeps it whole."""
    text = str(path).replace("\\", "\\\\").replace('"', '\\"')
    return f'{option}="{text}"'


def with_archive(java_options: str) -> str:
    """``java_options`` plus the archive's options when the archive exists: after them, so
    that the JVM's message about an archive it cannot use stays off wherever they send the
    JVM's log."""
    if _OWN_CDS.search(java_options):
        return java_options
    path = archive_path()
    if path is None or not path.is_file():
        return java_options
    return f"{java_options} {java_option('-XX:SharedArchiveFile', path)} {_SILENT}".strip()


def make_archive(
    timeout: float = 900, on_start: Callable[[], None] | None = None
) -> tuple[Path, float] | None:
    """Write this environment's archive unless it is there: (path, seconds it took; 0 when it
    was there). None: no Java. Several setups at once take turns; the archive appears whole
    or not at all. ``on_start`` is called before a write begins (it takes a while)."""
    path = archive_path()
    if path is None:
        return None
    if path.is_file():
        return path, 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".archive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path, 0.0
        if on_start is not None:
            on_start()
        started = time.monotonic()
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", f"{__package__}.class_archive_job", str(partial)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"the Spark class archive could not be written: {last}")
        os.replace(partial, path)
        for stale in path.parent.glob("spark-*.jsa"):
            if stale != path:
                stale.unlink(missing_ok=True)
        return path, time.monotonic() - started
