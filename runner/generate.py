"""Deterministic AWS DMS-style CSV Files for the sample `customers` entity.

Used for the shipped example landing folder, the tests and the benchmarks: a full load
(``LOAD00000001.csv``, all ``Op=I``) then change Files named by time, with updates, deletes and
re-inserts, several changes per key per File, and rows out of sequence order inside a File.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

HEADER = ["Op", "AR_H_CHANGE_SEQ", "customer_id", "name", "email", "tier", "balance", "updated_at"]
FIRST = ["Ana", "Björn", "Zoë", "José", "Łukasz", "Siân", "Nguyễn", "O'Brien", "Renée", "Çağla"]
LAST = ["Smith, Jr.", "Müller", 'García "Gigi"', "Øvergård", "Dvořák", "Lee", "Ng", "Żak"]
TIERS = ["bronze", "silver", "gold", None]


@dataclass
class Change:
    op: str
    seq: str
    customer_id: int
    name: str | None
    email: str | None
    tier: str | None
    balance: Decimal | None
    updated_at: datetime | None

    def row(self) -> list[str]:
        def fmt(v: object) -> str:
            if v is None:
                return ""
            if isinstance(v, datetime):
                return v.strftime("%Y-%m-%d %H:%M:%S.%f")
            return str(v)

        return [
            self.op,
            self.seq,
            str(self.customer_id),
            fmt(self.name),
            fmt(self.email),
            fmt(self.tier),
            fmt(self.balance),
            fmt(self.updated_at),
        ]


def sequence(at: datetime, counter: int) -> str:
    """A 35-character DMS-like change sequence: timestamp then a zero-padded counter."""
    return f"{at:%Y%m%d%H%M%S}{counter:021d}"


def _person(rng: random.Random, cid: int, at: datetime) -> dict[str, object]:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    return {
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{cid}@example.com" if rng.random() > 0.05 else None,
        "tier": rng.choice(TIERS),
        "balance": Decimal(rng.randint(-50_000, 5_000_000)) / 100,
        "updated_at": at + timedelta(microseconds=rng.randint(0, 999_999)),
    }


def write_file(path: Path, changes: list[Change]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        for change in changes:
            writer.writerow(change.row())


def generate_customers(
    out_dir: Path,
    *,
    initial: int = 120,
    files: int = 4,
    changes_per_file: int = 40,
    seed: int = 7,
    start: datetime = datetime(2026, 3, 1, 8, 0, 0),
) -> list[Path]:
    """Write a full load and ``files`` change Files; returns the paths in landing order."""
    rng = random.Random(seed)
    counter = 0
    alive: set[int] = set()
    deleted: set[int] = set()
    written = []
    load = []
    for cid in range(1, initial + 1):
        counter += 1
        load.append(Change("I", sequence(start, counter), cid, **_person(rng, cid, start)))  # type: ignore[arg-type]
        alive.add(cid)
    path = out_dir / "LOAD00000001.csv"
    write_file(path, load)
    written.append(path)
    next_id = initial + 1
    at = start
    for _ in range(files):
        at += timedelta(minutes=5, milliseconds=rng.randint(0, 999))
        changes = []
        for _ in range(changes_per_file):
            counter += 1
            roll = rng.random()
            if roll < 0.15 and deleted:  # re-insert a deleted key
                cid = rng.choice(sorted(deleted))
                deleted.discard(cid)
                alive.add(cid)
                op = "I"
            elif roll < 0.30 or not alive:  # a new key
                cid, next_id = next_id, next_id + 1
                alive.add(cid)
                op = "I"
            elif roll < 0.45:
                cid = rng.choice(sorted(alive))
                alive.discard(cid)
                deleted.add(cid)
                changes.append(
                    Change("D", sequence(at, counter), cid, None, None, None, None, None)
                )
                continue
            else:
                cid = rng.choice(sorted(alive))
                op = "U"
            changes.append(Change(op, sequence(at, counter), cid, **_person(rng, cid, at)))  # type: ignore[arg-type]
        rng.shuffle(changes)  # DMS may write rows out of sequence order within a File
        path = out_dir / f"{at:%Y%m%d-%H%M%S}{at.microsecond // 1000:03d}.csv"
        write_file(path, changes)
        written.append(path)
    return written
