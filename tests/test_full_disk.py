"""A full disk under the warehouse (issue "Faults beyond a killed runner"): the local target's
warehouse folder of the test's schema is a small tmpfs mounted by the test (root is needed for
the mount; without it the test says so and is skipped); the commands run in this process. A
File too big for the space left fails its run with one line that says the disk is full and
where; nothing of it is visible in the target. Once there is room (the tmpfs remounted larger)
it stages; then the disk fills up between staging and the apply: the run says so, the target is
as it was. The run after space is freed applies both Files once: the table equals the
plain-Python oracle's with one marker per File, and no attempt counted against a File (a full
disk is not its fault).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.project import CHANGES_HISTORY, audit_rows
from helpers.scenario import ROUND_1, CurrentOracle, change, declare, write

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

CUSTOMERS = "{{ ref('customers') }}"


@pytest.fixture
def small_disk(tmp_path: Path):  # noqa: ANN201
    """A function mounting a tmpfs of a size at a folder; every mount is undone after."""
    mounted: list[Path] = []

    def mount(folder: Path, size: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        options = f"size={size}" if folder not in mounted else f"remount,size={size}"
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("mounting a small tmpfs needs root and mount(8)")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        if folder not in mounted:
            mounted.append(folder)

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_warehouse_fails_the_run_cleanly_and_the_run_after_space_is_freed_finishes(
    spark,  # noqa: ANN001
    cli_project,  # noqa: ANN001
    small_disk,  # noqa: ANN001
) -> None:
    # In this process, on the worker's SparkSession: its catalog puts the schema's tables in a
    # folder of whichever project's warehouse it was first opened with, so the small disk is
    # mounted at that folder, the schema made first to ask the catalog where it is.
    cli = cli_project("local", without=CHANGES_HISTORY)
    declare(cli.root)
    spark.sql(f"create namespace if not exists {cli.schema}")
    described = spark.sql(f"describe namespace {cli.schema}").collect()
    warehouse = Path(next(r[1] for r in described if r[0] == "Location").removeprefix("file:"))
    small_disk(warehouse, "3m")
    folder = cli.root / "landing" / "customers"
    now = CurrentOracle()

    def read(relation: str) -> dict[int, tuple]:
        """Key -> (name, email, tier): the current rows, through `dbt show`."""
        rows = cli.table(relation)
        return {int(r["customer_id"]): (r["name"], r["email"], r["tier"]) for r in rows}

    def expected() -> dict[int, tuple]:
        return {k: v[:3] for k, v in now.table().items()}

    def markers() -> list[str]:
        rows = cli.table("{{ source('cdc_state', 'applied_files') }}")
        return sorted(r["file_name"] for r in rows)

    first = [write(folder / n, rows) for n, rows in ROUND_1.items()]
    cli.runner("run", "--landing", str(folder.parent))
    now.apply(first)
    assert read(CUSTOMERS) == expected()

    # About 14 MB of values that do not compress (random hex): more than the disk has left.
    big = write(
        folder / "20260301-120000000.csv",
        [change("U", n, 1 + n % 6, os.urandom(4000).hex()) for n in range(100, 950)],
    )
    failed = cli.runner("run", "--landing", str(folder.parent), ok=(1, 2))
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    said = " ".join(errors) + failed.stdout
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    assert "no space left on device" in said.lower(), (failed.stdout[-2000:], failed.stderr[-3000:])
    assert f"under {warehouse}/" in said, said  # where: the staging table's folder in it
    assert read(CUSTOMERS) == expected()  # nothing of the big File visible
    states = dict(audit_rows(cli, "select path, state from files"))
    assert states[str(big)] != "COMMITTED" and states[str(big)] != "QUARANTINED", states

    # Space freed, the big File stages, with one more; then the disk fills up between staging
    # and the apply: the apply fails, the target is as it was.
    small_disk(warehouse, "200m")
    last = write(folder / "20260301-130000000.csv", [change("U", 955 + k, k, "z") for k in (1, 2)])
    cli.runner("ingest", "--landing", str(folder.parent))
    free = shutil.disk_usage(warehouse).free
    with open(warehouse / "filler", "wb") as handle:
        handle.truncate(0)
        handle.write(b"\0" * max(free - 32 * 1024, 0))
    failed = cli.runner("run", "--landing", str(folder.parent), ok=(1, 2))
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, failed.stderr[-3000:]
    # `dbt build failed: customers: no space left on device under <warehouse>; Files not
    # applied stay STAGED: free space under <warehouse>, then run the same command again
    # (dbt's log: ...)`:
    # dbt's error names no file, so the line names the running SparkSession's warehouse (in a
    # `runner run` process, the project's own, which holds the folder above).
    session = spark.sparkContext.getConf().get("spark.sql.catalog.spark_catalog.warehouse")
    assert f"customers: no space left on device under {session};" in errors[0], errors
    assert "Files not applied stay STAGED: free space under" in errors[0], errors
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    (warehouse / "filler").unlink()  # space freed
    assert read(CUSTOMERS) == expected()
    states = dict(audit_rows(cli, "select path, state from files"))
    assert (states[str(big)], states[str(last)]) == ("STAGED", "STAGED"), states

    cli.runner("run", "--landing", str(folder.parent))
    now.apply([big, last])
    assert read(CUSTOMERS) == expected()
    assert markers() == sorted(p.name for p in [*first, big, last])
    attempts = audit_rows(cli, "select path, state, attempts from files")
    assert {Path(p).name: (s, a) for p, s, a in attempts} == {
        p.name: ("COMMITTED", 1) for p in [*first, big, last]
    }  # the full disk was not the Files' fault
