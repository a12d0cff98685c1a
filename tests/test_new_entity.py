"""`runner new-entity NAME --from SAMPLE`: from one sample File of each format (CSV with a
header, JSON lines, Parquet, and Debezium's own output with its schema block) to a successful
`runner run` on local Spark. The four files it writes are used as they are; each table equals a
plain-Python oracle of the landed Files; an existing file is never overwritten."""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from helpers.project import CHANGES_HISTORY, REPO
from helpers.scenario import ROUND_1, write
from helpers.scenario import oracle as dms_oracle

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

DEBEZIUM = REPO / "landing" / "debezium-defaults" / "products"


def _as_json(src: Path, dest: Path) -> Path:
    """The same rows as JSON lines (numbers as JSON numbers, empty fields as null: every line
    names every field, so the File the declaration is made from names them all; a field the
    declaration lacks would quarantine a File)."""
    with open(src, encoding="utf-8", newline="") as handle, open(dest, "w") as out:
        for row in csv.DictReader(handle):
            obj: dict = {k: (v if v != "" else None) for k, v in row.items()}
            obj["customer_id"] = int(obj["customer_id"])
            out.write(json.dumps(obj) + "\n")
    return dest


def _as_parquet(src: Path, dest: Path) -> Path:
    """The same rows as Parquet, typed as DMS writes it (decimals, timestamps)."""
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(src, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    table = pa.table({
        "Op": pa.array([r["Op"] for r in rows]),
        "AR_H_CHANGE_SEQ": pa.array([r["AR_H_CHANGE_SEQ"] for r in rows]),
        "customer_id": pa.array([int(r["customer_id"]) for r in rows], pa.int64()),
        "name": pa.array([r["name"] or None for r in rows]),
        "balance": pa.array([Decimal(r["balance"]) if r["balance"] else None for r in rows],
                            pa.decimal128(12, 2)),
        "updated_at": pa.array([datetime.fromisoformat(r["updated_at"]) if r["updated_at"]
                                else None for r in rows], pa.timestamp("us")),
    })  # fmt: skip
    pq.write_table(table, dest)
    return dest


def _debezium_oracle(files: list[Path]) -> dict[int, str]:
    """id -> name after Debezium's events in log order (deletes remove the key)."""
    events = []
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip() in ("", "null"):
                continue
            p = json.loads(line)["payload"]
            events.append((int(p["source"]["lsn"]), p))
    now: dict[int, str] = {}
    for _, p in sorted(events, key=lambda e: e[0]):
        if p["op"] == "d":
            now.pop(int(p["before"]["id"]), None)
        else:
            now[int(p["after"]["id"])] = p["after"]["name"]
    return now


def test_new_entity_from_each_format_to_a_successful_run(cli_project, tmp_path: Path) -> None:  # noqa: ANN001
    cli = cli_project("local", without=CHANGES_HISTORY)
    samples = tmp_path / "samples"
    csv_files = [write(samples / "csv" / n, rows) for n, rows in ROUND_1.items()]
    landing = cli.root / "landing"
    made = {
        "c_csv": [shutil.copy(f, samples / f"csv_{f.name}") for f in csv_files],
        "c_json": [_as_json(f, samples / f"{f.stem}.json") for f in csv_files],
        "c_parquet": [_as_parquet(f, samples / f"{f.stem}.parquet") for f in csv_files],
        "products": sorted(DEBEZIUM.glob("*.json")),
    }
    for name, files in made.items():
        keys = ["--keys", "id"] if name == "products" else ["--keys", "customer_id"]
        said = cli("runner", "new-entity", name, "--from", str(files[-1]), *keys, "--yes")
        assert "next: land the Files in landing/" in said.stdout, said.stdout
        folder = landing / name
        folder.mkdir(parents=True)
        for f in files:
            name_in = f.name.removeprefix("csv_")
            shutil.copy(f, folder / name_in)
    again = cli("runner", "new-entity", "c_csv", "--from", str(csv_files[0]), "--keys",
                "customer_id", "--yes", ok=(2,))  # fmt: skip
    assert "would overwrite" in again.stderr and "nothing was written" in again.stderr

    cli("runner", "run", "--landing", "landing")
    want = {k: v[0] for k, v in dms_oracle(csv_files).items()}  # customer_id -> name
    for name in ("c_csv", "c_json", "c_parquet"):
        rows = cli.table(f"{{{{ ref('{name}') }}}}")
        assert {int(r["customer_id"]): r["name"] for r in rows} == want, name
    rows = cli.table("{{ ref('products') }}")
    assert {int(r["id"]): r["name"] for r in rows} == _debezium_oracle(made["products"])
    status = json.loads(cli.runner("status", "--json").stdout)
    assert {f["state"] for f in status} == {"COMMITTED"}, status
