"""Sample data, apart from the pipeline: deterministic AWS DMS-style CSV Files, daily full
extracts, and Debezium transaction groups for the declared or a synthetic entity
(`runner generate`: the shipped landing folder, the tests, the demos and the benchmarks)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import yaml

from runner.entities import load_entities
from runner.errors import UsageError
from runner.project import Project
from runner.samples.generate import (
    GenerateSpec,
    GroupSpec,
    SnapshotSpec,
    generate_entity,
    generate_group,
    generate_snapshots,
    synthetic_declaration,
    synthetic_entity,
    synthetic_snapshot_declaration,
    synthetic_snapshot_entity,
)


def write_samples(
    project: Project,
    entity_name: str,
    out: str | None,
    *,
    initial: int,
    incremental: int,
    files: int,
    delete_share: float,
    update_share: float,
    seed: int,
    key_columns: int | None,
    value_columns: int,
    snapshot: bool,
    days: int,
    start: datetime | None,
) -> list[str]:
    """Write the sample Files `runner generate` asks for; the lines to print about them."""
    said: list[str] = []
    say = said.append
    if key_columns is not None:
        if key_columns < 1 or value_columns < 0:
            raise UsageError("--key-columns must be at least 1 and --value-columns at least 0")
        make, declare = (
            (synthetic_snapshot_entity, synthetic_snapshot_declaration)
            if snapshot
            else (synthetic_entity, synthetic_declaration)
        )
        entities = {entity_name: make(entity_name, key_columns, value_columns)}
        declaration = declare(entity_name, key_columns, value_columns)
        say("# declare it under a source's tables: in dbt_project/models/staging/*.yml")
        say(yaml.safe_dump([declaration], sort_keys=False))
    else:
        entities = load_entities(project)
    if entity_name not in entities:
        raise UsageError(f"unknown entity {entity_name!r}; declared: {sorted(entities)}")
    if not 0 <= delete_share + update_share <= 1 or files < 1:
        raise UsageError("shares must add up to at most 1, and --files must be at least 1")
    entity = entities[entity_name]
    if entity.is_transactions:  # a transaction group: its members' Files and its metadata
        root = Path(out) if out else project.root / project.settings.landing_roots[0]
        gspec = GroupSpec(transactions=initial, files=files, seed=seed)
        written = generate_group(entity, entities, root, gspec)
        say(
            f"wrote {len(written)} Files ({initial} transactions of "
            f"{', '.join(entity.members)}, and their metadata) under {root}; the END of the "
            f"last transaction is in {written[-1].relative_to(root)}, outside the landing "
            "globs: move it next to the other metadata Files to release that transaction"
        )
        return said
    folder = Path(out) if out else project.root / project.settings.landing_roots[0] / entity_name
    if snapshot != entity.is_snapshot:
        raise UsageError(
            f"entity {entity_name} is declared with mode {entity.mode}: "
            + ("leave out --snapshot" if not snapshot else "--snapshot is for mode snapshot")
        )
    if snapshot:
        if days < 1:
            raise UsageError("--days must be at least 1")
        sspec = SnapshotSpec(
            initial,
            incremental,
            days,
            delete_share,
            update_share,
            seed,
            start or SnapshotSpec.start,
        )
        written = generate_snapshots(entity, folder, sspec)
        say(f"wrote {len(written)} daily extracts to {folder}")
        return said
    spec = GenerateSpec(initial, incremental, files, delete_share, update_share, seed)
    written = generate_entity(entities[entity_name], folder, spec)
    say(f"wrote {len(written)} Files ({initial + incremental} rows) to {folder}")
    return said
