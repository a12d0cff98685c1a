"""Transaction groups' states kept in the Audit DB: what the last run that applied a group read
from its ledger, for `runner status` (which then needs no destination)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert, select

from audit.models import group_states as groups_t
from audit.records import _Store, utcnow


class Groups(_Store):
    def record_groups(self, states: list[dict[str, Any]], process_id: str) -> None:
        """Keep each group's state (a GroupStatus as JSON, keyed by its ``group``), replacing
        what an earlier run kept of it."""
        now = utcnow()
        with self.engine.begin() as conn:
            for state in states:
                name = str(state["group"])
                conn.execute(delete(groups_t).where(groups_t.c.group_name == name))
                conn.execute(
                    insert(groups_t).values(
                        group_name=name,
                        state=json.dumps(state, default=str),
                        recorded_by=process_id,
                        recorded_at=now,
                    )
                )

    def recorded_groups(self) -> list[dict[str, Any]]:
        """Every kept group state: {state, recorded_by, recorded_at}, by group name."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(groups_t).order_by(groups_t.c.group_name)).mappings().all()
        return [
            {
                "state": json.loads(r["state"]),
                "recorded_by": r["recorded_by"],
                "recorded_at": r["recorded_at"],
            }
            for r in rows
        ]
