"""Transaction groups as `runner status` shows them: per group, the watermark (the latest
commit time of a released transaction), the count per status, and the transactions held back
or quarantined, read from the group's ledger (the dbt model built by
``cdc.transaction_ledger``, macros/apply/transactions.sql)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from runner.errors import ConfigError
from runner.invocation import Invocation
from runner.project import IDENTIFIER

LEDGER_COLUMNS = [
    "transaction_id",
    "status",
    "start_ms",
    "end_ms",
    "expected_events",
    "staged_events",
    "held_ms",
    "overdue",
]


@dataclass
class GroupStatus:
    group: str  # the transaction metadata entity
    members: list[str]
    ledger: str  # schema.table of the ledger model
    built: bool  # False until `dbt build` has built the ledger
    watermark_ms: int | None = None  # end_ms of the latest released transaction
    counts: dict[str, int] = field(default_factory=dict)  # status -> transactions
    held: list[dict[str, Any]] = field(default_factory=list)  # oldest first
    quarantined: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupStatus:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def recorded_group_status(inv: Invocation) -> tuple[list[GroupStatus], Any]:
    """Every declared group's status as the Audit DB keeps it (the last reconcile that read
    the destination recorded it), and when the oldest of them was recorded (None: never). A
    declared group with no record yet shows as not built."""
    groups = [e for e in inv.entities.values() if e.is_transactions]
    if not groups:
        return [], None
    kept = {r["state"]["group"]: r for r in inv.db.recorded_groups()}
    out, times = [], []
    for g in groups:
        if g.name in kept:
            out.append(GroupStatus.from_json(kept[g.name]["state"]))
            times.append(kept[g.name]["recorded_at"])
        else:
            ledger = f"{inv.destination.schema}.{ledger_name(g)}"  # as group_status names it
            out.append(GroupStatus(g.name, sorted(g.members), ledger, False))
    return out, (min(times) if times else None)


def ledger_name(entity: Any) -> str:
    """The ledger model of a group: meta.cdc.ledger, else the transaction entity's name."""
    name = str(entity.meta.get("ledger") or entity.name)
    if not IDENTIFIER.match(name):
        raise ConfigError(f"entity {entity.name}: ledger {name!r} is not a plain identifier")
    return name


def group_status(inv: Invocation) -> list[GroupStatus]:
    """Every declared group's status; [] when none is declared (nothing is read then)."""
    groups = [e for e in inv.entities.values() if e.is_transactions]
    if not groups:
        return []
    dest = inv.destination
    spark = inv.reading_spark
    out = []
    for g in groups:
        table = ledger_name(g)
        rows = dest.select_rows(dest.schema, table, LEDGER_COLUMNS, spark)
        status = GroupStatus(g.name, sorted(g.members), f"{dest.schema}.{table}", rows is not None)
        for r in rows or []:
            status.counts[r["status"]] = status.counts.get(r["status"], 0) + 1
            if r["status"] == "released" and r["end_ms"] is not None:
                status.watermark_ms = max(status.watermark_ms or 0, int(r["end_ms"]))
            elif r["status"] == "held":
                status.held.append({k: r[k] for k in LEDGER_COLUMNS if k != "status"})
            elif r["status"] == "quarantined":
                status.quarantined.append(str(r["transaction_id"]))
        status.held.sort(key=lambda h: (h["start_ms"] is None, h["start_ms"] or 0))
        status.quarantined.sort()
        out.append(status)
    return out
