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


def test_each_checkout_gets_a_catalog_schema_of_its_own(tmp_path: Path) -> None:
    """`runner init` (make setup) writes profiles.yml with a catalog schema default derived
    from the checkout's folder: two clones on one PostgreSQL server never share tables."""
    import yaml

    from runner.cli.setup import DEFAULT_CATALOG, own_catalog

    example = (REPO / "profiles.example.yml").read_text()
    assert example.count(DEFAULT_CATALOG) == 2  # the local and the cluster target
    schemas = []
    for clone in ("a", "b c"):
        text = own_catalog(example, tmp_path / clone)
        assert DEFAULT_CATALOG not in text
        outputs = yaml.safe_load(text)["cdc"]["outputs"]
        uri = outputs["local"]["server_side_parameters"]["spark.sql.catalog.spark_catalog.uri"]
        schemas.append(uri.split("currentSchema=")[1])
    assert schemas[0] != schemas[1] and all(s.count("cdc_catalog_") == 1 for s in schemas)
    assert own_catalog(example, tmp_path / "a") == own_catalog(example, tmp_path / "a")
