"""`pip install .` gives a runner that works from any directory: nothing it reads lies outside
the installed package (the dbt package and its contract travel inside it, runner/dbt_package).

The new environment is fresh for the runner itself (built from the source tree as a wheel,
not editable, with no path back to the checkout); its dependencies (PySpark, dbt, ...) are
lent from the test environment through a path entry, because downloading them again would
take minutes and prove nothing about this package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from helpers.project import EXAMPLE_FILES, REPO, make_project, new_catalog_schema

pytestmark = pytest.mark.spark


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    return _process(*args, cwd=cwd, env=env).stdout


def _process(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_pip_install_then_runner_works_from_any_directory(tmp_path: Path) -> None:
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(
        _run(
            py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
        ).strip()
    )
    (site / "lent_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        py,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        str(REPO),
        cwd=tmp_path,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CDC_PROJECT_DIR")}
    env["CDC_CATALOG_SCHEMA"] = new_catalog_schema()
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    where = _run(
        py,
        "-c",
        "import runner.contract as c; print(c.__file__); print(c.CONTRACT_FILE)",
        cwd=elsewhere,
        env=env,
    ).split()
    assert all(p.startswith(str(site)) for p in where), (where, site)
    assert not Path(where[1]).is_symlink() and Path(where[1]).is_file()

    assert "ingest" in _run(env_dir / "bin" / "runner", "--help", cwd=elsewhere, env=env)

    project = make_project(tmp_path / "project")  # without the shop group: its Files stay out
    shutil.copytree(
        REPO / "landing", project / "landing", ignore=shutil.ignore_patterns("shop", *EXAMPLE_FILES)
    )
    ingest = _process(
        env_dir / "bin" / "runner", "ingest", "--project-dir", project, cwd=elsewhere, env=env
    )
    landed = sum(1 for f in (project / "landing").rglob("*") if f.is_file())
    assert f"{landed} staged" in ingest.stdout and "0 quarantined" in ingest.stdout, ingest.stdout
    # Spark stays quiet (its log settings ship in the package): no WARN lines, no stage bars.
    spark_lines = [
        line
        for line in ingest.stderr.splitlines()
        if line.strip() and " runner." not in line  # the runner's own log lines
    ]
    assert spark_lines == [], ingest.stderr
    files = json.loads(
        _run(
            env_dir / "bin" / "runner",
            "status",
            "--project-dir",
            project,
            "--json",
            cwd=elsewhere,
            env=env,
        )
    )
    assert sorted(f["state"] for f in files) == ["STAGED"] * landed, files
