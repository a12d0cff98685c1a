"""AWS DMS table reloads (``meta.cdc.reloads``): full-load Files that land after change Files.

A reload says "this is the whole table now". Its Files start a new epoch: the staging gives
the epoch a truncate just before its rows (a staged row of operation ``T`` carried by one of
its Files), so the apply deletes the keys the reload lacks and closes their history, and the
changes after it apply on top (macros/apply/steps/truncate.sql).

Which Files are a reload is decided from what was staged before, batch by batch (the Files
one staging marked STAGED together, in the Audit DB):

- Files named by ``reloads.files`` (``LOAD*``) before any change File was staged are the
  first full load, as without ``reloads``.
- Such Files after a change File was staged start an epoch. Files of a later batch continue
  it until a change File is staged in a batch after the one that started it; the next such
  Files start another.

Where an epoch sits among the changes:

- ``sequence: {file_order: dms}``: after the change Files staged before it (the greatest of
  their places ``P``), before every change File staged with it or later. Its Files' places are
  ``P.R`` followed by their own place (``0.<segment>.<counter>``), and its truncate is at
  ``P.R``: after every line of ``P`` (letters sort after digits in any collation), before the
  next change File's place. A change File staged in the same batch as the reload's first Files
  is taken to follow the reload.
- ``sequence: {column: <commit time>, ties: line}``: the reload's rows carry DMS's transfer
  times, so they sit where those times put them. The truncate is at the earliest of them in
  the batch that starts the epoch (``<time>.``, before that time's first line).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from runner.entities import Entity

#: What follows a change File's place in a reload's places: after every line (digits).
AFTER = ".R"


@dataclass
class ReloadPlan:
    """What one batch's Files are, as far as reloads go."""

    reload_ids: set[int] = field(default_factory=set)  # Files of a reload epoch
    places: dict[int, str] = field(default_factory=dict)  # file order: their places
    starts: bool = False  # the batch starts an epoch: it carries the truncate
    truncate: str | None = None  # file order: the truncate's staged sequence
    carried: bool = False  # the truncate row was written (by the first group holding a reload)


def batches(staged: Iterable[tuple[str, datetime | None, str | None]]) -> list[list[str]]:
    """Earlier Files as (name, staged_at, staged_by), grouped into the batches that staged them
    (one ``staged_at`` per batch), in staging order."""
    groups: dict[tuple[datetime, str], list[str]] = {}
    for name, at, by in staged:
        if at is not None:
            groups.setdefault((at, by or ""), []).append(name)
    return [groups[k] for k in sorted(groups)]


def plan(
    entity: Entity,
    earlier: Sequence[Sequence[str]],
    batch: Sequence[tuple[int, str]],
    place_of: dict[str, str],
) -> ReloadPlan:
    """The reload Files of ``batch`` ((file id, name)) after the ``earlier`` batches (names,
    in staging order). ``place_of``: a name's place in DMS's order (file order only)."""
    out = ReloadPlan()
    if not entity.reload_files:
        return out
    by_order = entity.file_order is not None
    greatest: str | None = None  # the greatest place of a change File staged so far
    changed = False  # some change File was staged
    epoch: tuple[str, int] | None = None  # (P, index of the batch that started it)
    open_ = False
    for i, names in enumerate(earlier):
        loads = [n for n in names if entity.reloads(n)]
        changes = [n for n in names if not entity.reloads(n)]
        if loads and changed and not open_:
            epoch, open_ = (greatest or "", i), True
        if changes and epoch is not None and i > epoch[1]:
            open_ = False
        if changes:
            changed = True
            if by_order:
                places = [place_of[n] for n in changes if n in place_of]
                greatest = max([*places, *([greatest] if greatest else [])], default=None)
    loads_now = [(fid, n) for fid, n in batch if entity.reloads(n)]
    if not loads_now or not changed:
        return out
    if not open_:
        epoch, out.starts = (greatest or "", len(earlier)), True
    assert epoch is not None
    out.reload_ids = {fid for fid, _ in loads_now}
    if by_order:
        prefix = epoch[0] + AFTER
        out.truncate = prefix
        out.places = {fid: prefix + place_of[n] for fid, n in loads_now if n in place_of}
    return out
