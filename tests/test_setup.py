"""`make setup` run twice at once (two clones on one machine, or a retry while the first is
still running): the JDBC driver's Debian install takes turns instead of failing on apt's lock."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.project import REPO


def test_two_setups_at_once_take_turns_on_the_driver_install(tmp_path: Path) -> None:
    """The Makefile's `jdbc-driver` step, three at once, in a folder without jars/ and with the
    driver's usual path pointed elsewhere, so that each goes through `apt-get install` (of a
    package already there: nothing changes on the machine). Each must succeed."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("needs root and apt-get: the step installs only where both are available")
    if not Path("/usr/share/java/postgresql.jar").exists():
        pytest.skip("libpostgresql-jdbc-java is not installed here: `make setup` installs it")
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    runs = [
        subprocess.Popen(
            ["make", "-s", "jdbc-driver", "JDBC_JAR=/nonexistent/postgresql.jar"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [r.communicate(timeout=900)[0] for r in runs]
    for run, out in zip(runs, outs, strict=True):
        assert run.returncode == 0, out
        assert "lock" not in out.lower(), out
