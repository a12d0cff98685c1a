"""Deterministic AWS DMS-style CSV Files for the sample `customers` entity.

Used for the shipped example landing folder, the tests and the benchmarks: a full load
(``LOAD00000001.csv``, all ``Op=I``) then change Files named by time, with updates, deletes and
re-inserts, several changes per key per File, and rows out of sequence order inside a File.
"""

from __future__ import annotations

import csv
import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from runner.entities import DMS_OPERATIONS, Column, EffectiveDate, Entity

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


# -- any declared entity ---------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateSpec:
    """What to write: after the synthetic CDC data generator in the design notes."""

    initial: int = 1000  # rows of the full load (all inserts)
    incremental: int = 1000  # change rows after it, over `files` Files
    files: int = 10
    delete_share: float = 0.2  # of the change rows; deleted keys are later re-inserted too
    update_share: float = 0.4  # the rest are inserts of new keys
    seed: int = 7


def _value(rng: random.Random, data_type: str, n: int) -> str:
    t = data_type.lower()
    if t.startswith("decimal"):
        scale = int(t.split(",")[1].rstrip(") ")) if "," in t else 0
        cents = rng.randint(-(10**6), 10**8)
        return f"{Decimal(cents).scaleb(-scale):f}" if scale else str(cents)
    if t in ("bigint", "int", "integer", "smallint", "tinyint"):
        return str(rng.randint(0, 30000))
    if t in ("double", "float"):
        return repr(round(rng.uniform(-1e6, 1e6), 4))
    if t == "boolean":
        return rng.choice(["true", "false"])
    if t == "date":
        return (datetime(2026, 1, 1) + timedelta(days=rng.randint(0, 365))).strftime("%Y-%m-%d")
    if t.startswith("timestamp"):
        at = datetime(2026, 1, 1) + timedelta(microseconds=rng.randint(0, 10**13))
        return at.strftime("%Y-%m-%d %H:%M:%S.%f")
    word = rng.choice(FIRST) + " " + rng.choice(LAST)
    return f"{word} {n}" if rng.random() > 0.05 else ""


def _key(data_type: str, n: int, i: int) -> str:
    t = data_type.lower()
    if t in ("bigint", "int", "integer") or t.startswith("decimal"):
        return str(n if i == 0 else n % 1000 + i)
    return f"k{n}-{i}"


def generate_entity(entity: Any, out_dir: Path, spec: GenerateSpec) -> list[Path]:
    """DMS-style CSV Files for a declared entity: a full load, then change Files.

    Deterministic for a seed. Keys are numbered; a change deletes, updates or inserts a key by
    the given shares, re-inserting deleted keys now and then; rows inside a File are shuffled.
    """
    rng = random.Random(spec.seed)
    columns = [c.name for c in entity.columns]
    types = {c.name: c.data_type for c in entity.columns}
    codes: dict[str, str] = {}
    for code, op in entity.operations.items():
        codes.setdefault(op, code)
    seq_type = types[entity.sequence].lower()
    counter = 0
    at = datetime(2026, 3, 1, 8, 0, 0)

    def seq() -> str:
        nonlocal counter
        counter += 1
        return sequence(at, counter) if seq_type == "string" else str(counter)

    def row(op: str, n: int) -> list[str]:
        values = {}
        for i, key in enumerate(entity.keys):
            values[key] = _key(types[key], n, i)
        for c in columns:
            if c == entity.operation_column:
                values[c] = codes[op]
            elif c == entity.sequence:
                values[c] = seq()
            elif c not in values:
                values[c] = "" if op == "D" else _value(rng, types[c], n)
        return [values[c] for c in columns]

    def write(path: Path, rows: Iterable[list[str]]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            w = csv.writer(handle, lineterminator="\n")
            w.writerow(columns)
            w.writerows(rows)
        return path

    alive = list(range(1, spec.initial + 1))
    alive_set = set(alive)
    deleted: list[int] = []
    # streamed: a full load of tens of millions of rows is never held in memory
    written = [write(out_dir / "LOAD00000001.csv", (row("I", n) for n in alive))]
    next_key = spec.initial + 1
    per_file = [
        spec.incremental // spec.files + (i < spec.incremental % spec.files)
        for i in range(spec.files)
    ]
    for count in per_file:
        at += timedelta(minutes=5)
        rows = []
        for _ in range(count):
            roll = rng.random()
            if roll < spec.delete_share and alive:
                i = rng.randrange(len(alive))
                alive[i], alive[-1] = alive[-1], alive[i]  # O(1): order of `alive` is free
                n = alive.pop()
                alive_set.discard(n)
                deleted.append(n)
                rows.append(row("D", n))
            elif roll < spec.delete_share + spec.update_share and alive:
                rows.append(row("U", alive[rng.randrange(len(alive))]))
            else:
                if deleted and rng.random() < 0.1:
                    i = rng.randrange(len(deleted))
                    deleted[i], deleted[-1] = deleted[-1], deleted[i]
                    n = deleted.pop()
                else:
                    n, next_key = next_key, next_key + 1
                alive.append(n)
                alive_set.add(n)
                rows.append(row("I", n))
        rng.shuffle(rows)
        written.append(write(out_dir / f"{at:%Y%m%d-%H%M%S}000.csv", rows))
    return written


VALUE_TYPES = ("string", "decimal(12,2)", "timestamp", "bigint", "string", "double")


def synthetic_declaration(name: str, key_columns: int, value_columns: int) -> dict[str, Any]:
    """A source-table declaration (the YAML of dbt_project/models/staging) for an entity of
    ``key_columns`` bigint keys and ``value_columns`` non-key columns of mixed types."""
    keys = [f"k{i + 1}" for i in range(key_columns)]
    columns = [
        {"name": "Op", "data_type": "string"},
        {"name": "AR_H_CHANGE_SEQ", "data_type": "string"},
    ]
    columns += [{"name": k, "data_type": "bigint"} for k in keys]
    columns += [
        {"name": f"c{i + 1}", "data_type": VALUE_TYPES[i % len(VALUE_TYPES)]}
        for i in range(value_columns)
    ]
    return {
        "name": name,
        "identifier": f"{name}__staged",
        "meta": {
            "cdc": {
                "mode": "cdc",
                "landing": f"{name}/*.csv",
                "format": "csv",
                "keys": keys,
                "sequence": "AR_H_CHANGE_SEQ",
                "operation": {"column": "Op", "preset": "dms"},
            }
        },
        "columns": columns,
    }


def synthetic_entity(name: str, key_columns: int, value_columns: int) -> Any:
    """The Entity of ``synthetic_declaration``, to generate Files before it is declared."""
    decl = synthetic_declaration(name, key_columns, value_columns)
    cdc = decl["meta"]["cdc"]
    return Entity(
        name=name,
        source="synthetic",
        declared_in=Path("."),
        mode="cdc",
        landing=(cdc["landing"],),
        format="csv",
        keys=tuple(cdc["keys"]),
        sequence=cdc["sequence"],
        operation_column="Op",
        operations=dict(DMS_OPERATIONS),
        columns=tuple(Column(c["name"], c["data_type"]) for c in decl["columns"]),
        staging_schema="cdc",
        staging_table=decl["identifier"],
    )


# -- snapshot extracts (mode: snapshot) -------------------------------------------------------


@dataclass(frozen=True)
class SnapshotSpec:
    """Daily full extracts, after the synthetic CDC data generator in the design notes: day 1
    holds ``initial`` keys; each later day deletes ``delete_share`` of the previous day's keys,
    updates ``update_share`` (new values in the compared columns), leaves the rest unchanged,
    and adds new keys until the extract holds ``incremental`` rows."""

    initial: int = 1000
    incremental: int = 1000
    days: int = 3
    delete_share: float = 0.2
    update_share: float = 0.4
    seed: int = 7
    start: datetime = datetime(2026, 3, 1)


def snapshot_file_name(entity: Any, day: datetime) -> str:
    """``<entity>_<yyyy-mm-dd>.csv``: what the sample's ``file_pattern`` reads."""
    return f"{entity.name}_{day:%Y-%m-%d}.csv"


def generate_snapshots(entity: Any, out_dir: Path, spec: SnapshotSpec) -> list[Path]:
    """One full extract per day for a snapshot entity; deterministic for a seed. Rows of an
    extract are in random order. A declared effective-date column holds the day."""
    rng = random.Random(spec.seed)
    columns = [c.name for c in entity.columns]
    types = {c.name: c.data_type for c in entity.columns}
    eff = entity.effective_date.column if entity.effective_date else None
    compare = set(entity.compare)

    def values(
        n: int, day: datetime, old: dict[str, str] | None = None, update: bool = False
    ) -> dict[str, str]:
        """A new row, or ``old`` on a later day: the columns not compared (operational ones,
        such as an extract time) change every day, the compared ones on an update."""
        row = dict(old) if old else {}
        for i, key in enumerate(entity.keys):
            row[key] = _snapshot_key(rng, types[key], n, i) if old is None else old[key]
        for c in columns:
            if c == eff:
                row[c] = f"{day:%Y-%m-%d}"
            elif c not in entity.keys and (old is None or update or c not in compare):
                row[c] = _value(rng, types[c], n)
        return row

    rows: dict[int, dict[str, str]] = {}
    next_key = 1
    written = []
    for d in range(spec.days):
        day = spec.start + timedelta(days=d)
        if d == 0:
            for _ in range(spec.initial):
                rows[next_key] = values(next_key, day)
                next_key += 1
        else:
            for n in list(rows):
                roll = rng.random()
                if roll < spec.delete_share:
                    del rows[n]
                else:
                    update = roll < spec.delete_share + spec.update_share
                    rows[n] = values(n, day, rows[n], update)
            while len(rows) < spec.incremental:
                rows[next_key] = values(next_key, day)
                next_key += 1
        order = list(rows)
        rng.shuffle(order)
        path = out_dir / snapshot_file_name(entity, day)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            w = csv.writer(handle, lineterminator="\n")
            w.writerow(columns)
            w.writerows([rows[n][c] for c in columns] for n in order)
        written.append(path)
    return written


def _snapshot_key(rng: random.Random, data_type: str, n: int, i: int) -> str:
    """A key part: numbered for numeric types, a UUID (as the design notes' generator) else."""
    t = data_type.lower()
    if t in ("bigint", "int", "integer") or t.startswith("decimal"):
        return str(n * 100 + i)
    return str(uuid.UUID(int=rng.getrandbits(128)))


def synthetic_snapshot_declaration(name: str, key_columns: int, value_columns: int) -> dict:
    """A snapshot entity of ``key_columns`` UUID keys and ``value_columns`` non-key columns
    (the design notes' generator), with full daily extracts named by their date."""
    keys = [f"k{i + 1}" for i in range(key_columns)]
    columns = [{"name": k, "data_type": "string"} for k in keys]
    columns += [
        {"name": f"c{i + 1}", "data_type": VALUE_TYPES[i % len(VALUE_TYPES)]}
        for i in range(value_columns)
    ]
    return {
        "name": name,
        "identifier": f"{name}__staged",
        "meta": {
            "cdc": {
                "mode": "snapshot",
                "snapshot_kind": "full",
                "landing": f"{name}/*.csv",
                "format": "csv",
                "keys": keys,
                "effective_date": {"file_pattern": r"(\d{4}-\d{2}-\d{2})"},
            }
        },
        "columns": columns,
    }


def synthetic_snapshot_entity(name: str, key_columns: int, value_columns: int) -> Any:
    """The Entity of ``synthetic_snapshot_declaration``."""
    decl = synthetic_snapshot_declaration(name, key_columns, value_columns)
    cdc = decl["meta"]["cdc"]
    cols = tuple(Column(c["name"], c["data_type"]) for c in decl["columns"])
    return Entity(
        name=name,
        source="synthetic",
        declared_in=Path("."),
        mode="snapshot",
        landing=(cdc["landing"],),
        format="csv",
        keys=tuple(cdc["keys"]),
        sequence="",
        operation_column="",
        operations={},
        columns=cols,
        staging_schema="cdc",
        staging_table=decl["identifier"],
        snapshot_kind="full",
        compare=tuple(c.name for c in cols if c.name not in cdc["keys"]),
        effective_date=EffectiveDate(file_pattern=cdc["effective_date"]["file_pattern"]),
    )


@dataclass
class GroupSpec:
    transactions: int = 40
    files: int = 4  # Files per member, and of transaction metadata
    late: int = 1  # the last transactions whose END is written apart (outside the globs)
    seed: int = 7


def _folder(landing_root: Path, entity: Any) -> Path:
    """The landing folder of an entity: its first glob's directory part."""
    parts = Path(entity.landing[0]).parts
    fixed = [p for p in parts[:-1] if not any(ch in p for ch in "*?[")]
    return landing_root.joinpath(*fixed)


def generate_group(
    group: Any, entities: dict[str, Any], landing_root: Path, spec: GroupSpec
) -> list[Path]:
    """Debezium JSON lines for a transaction group and its metadata, deterministic for a seed.

    Each transaction changes the first member (a new key, or an update of one) and a few rows
    of the others (new rows, whose column named like the first member's key points at it;
    updates; deletes). Events are in lsn order; each member's events, and the BEGIN/END
    records, are cut into ``spec.files`` Files, so transactions are spread over Files. The END
    records of the last ``spec.late`` transactions go to ``late/`` next to the metadata Files,
    which the declared glob does not match: those transactions wait (move the File in to
    release them)."""
    rng = random.Random(spec.seed)
    members = list(group.members)
    parent = entities[members[0]]
    fk = parent.keys[0]
    live: dict[str, list[int]] = {m: [] for m in members}
    next_key = {m: 1 for m in members}
    events: dict[str, list[dict[str, Any]]] = {m: [] for m in members}
    meta: list[dict[str, Any]] = []
    lsn, base = 1000, 1_770_000_000_000

    def image(entity: Any, key: int, parent_key: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c in entity.columns:
            if c.name in entity.debezium_fields:
                continue
            if c.name == entity.keys[0]:
                out[c.name] = key
            elif c.name == fk and entity is not parent:
                out[c.name] = parent_key
            else:
                raw = _value(rng, c.data_type, key)
                integer = c.data_type in ("bigint", "int", "integer", "smallint", "tinyint")
                out[c.name] = None if raw == "" else int(raw) if integer else raw
        return out

    def envelope(entity: Any, op: str, row: dict[str, Any], tx: str, ts: int, order: dict) -> dict:
        nonlocal lsn
        lsn += 8
        order[entity.name] = order.get(entity.name, 0) + 1
        total = sum(order.values())
        return {
            "before": row if op in ("u", "d") else None,
            "after": None if op == "d" else row,
            "source": {
                "connector": "postgresql",
                "db": "shop",
                "schema": "public",
                "table": group.members[entity.name].split(".")[-1],
                "lsn": lsn,
                "ts_ms": ts,
                "txId": int(tx.split(":")[0]),
            },
            "op": op,
            "ts_ms": ts,
            "transaction": {
                "id": tx,
                "total_order": total,
                "data_collection_order": order[entity.name],
            },
        }

    for t in range(spec.transactions):
        start = base + t * 1000
        tx = f"{5000 + t}:{lsn + 8}"
        order: dict[str, int] = {}
        meta.append(
            {
                "status": "BEGIN",
                "id": tx,
                "ts_ms": start,
                "event_count": None,
                "data_collections": None,
            }
        )
        ts = start
        if live[parent.name] and rng.random() < 0.3:
            key = rng.choice(live[parent.name])
            op = "u"
        else:
            key, op = next_key[parent.name], "c"
            next_key[parent.name] += 1
            live[parent.name].append(key)
        ts += 1
        events[parent.name].append(envelope(parent, op, image(parent, key, key), tx, ts, order))
        for name in members[1:]:
            child = entities[name]
            for _ in range(rng.randint(1, 3)):
                ts += 1
                roll = rng.random()
                if live[name] and roll < 0.15:
                    k = live[name].pop(rng.randrange(len(live[name])))
                    row = image(child, k, key)
                    events[name].append(envelope(child, "d", row, tx, ts, order))
                elif live[name] and roll < 0.35:
                    k = rng.choice(live[name])
                    events[name].append(envelope(child, "u", image(child, k, key), tx, ts, order))
                else:
                    k = next_key[name]
                    next_key[name] += 1
                    live[name].append(k)
                    events[name].append(envelope(child, "c", image(child, k, key), tx, ts, order))
        meta.append(
            {
                "status": "END",
                "id": tx,
                "ts_ms": ts + 1,
                "event_count": sum(order.values()),
                "data_collections": [
                    {"data_collection": group.members[m], "event_count": n}
                    for m, n in order.items()
                ],
            }
        )

    def write(path: Path, records: list[dict[str, Any]]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    def chunks(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        size = max(1, -(-len(records) // spec.files))
        return [records[i : i + size] for i in range(0, len(records), size)]

    written = []
    for name in members:
        folder = _folder(landing_root, entities[name])
        for i, part in enumerate(chunks(events[name]), start=1):
            written.append(write(folder / f"{name}-{i:04d}.json", part))
    held_back = {m["id"] for m in meta[-2 * spec.late :: 2]} if spec.late else set()
    on_time = [m for m in meta if not (m["status"] == "END" and m["id"] in held_back)]
    folder = _folder(landing_root, group)
    for i, part in enumerate(chunks(on_time), start=1):
        written.append(write(folder / f"{group.name}-{i:04d}.json", part))
    late = [m for m in meta if m["status"] == "END" and m["id"] in held_back]
    if late:
        written.append(write(folder / "late" / f"{group.name}-late.json", late))
    return written
