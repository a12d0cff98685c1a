"""What `runner status` shows a person: one line per entity (is it up to date, what waits and
since when, what is quarantined and why), or with ``--files`` one line per File with its path
relative to its landing root. Lines fit ``width`` columns (a terminal's); ``width`` None: as
long as they are (not a terminal). `--json` is elsewhere (present.file_json) and unchanged."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Files in these states still have work ahead of them; the others are done with.
WAITING = ("PENDING", "PROCESSING", "STAGED")
PROBLEMS = ("QUARANTINED", "FAILED")
ELLIPSIS = "..."


def age(seconds: float) -> str:
    """3s, 5m, 2h, 4d: a duration in its largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(int(seconds), 0)}s"


def duration_ms(ms: float) -> str:
    """A duration for a person: 3 ms, 12 s, 4 min, 2 h 5 min, 3 d 4 h."""
    if ms < 1000:
        return f"{int(ms)} ms"
    seconds = int(ms // 1000)
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        return f"{hours} h" + (f" {minutes % 60} min" if minutes % 60 else "")
    return f"{days} d" + (f" {hours % 24} h" if hours % 24 else "")


def source_time(ms: int) -> str:
    """A source's commit time in epoch milliseconds (Debezium's ts_ms) as a UTC timestamp."""
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} UTC"


def middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle cut out: both ends of a path (its
    folder and its file name) stay readable."""
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:width]
    keep = width - len(ELLIPSIS)
    head = keep // 2
    return text[:head] + ELLIPSIS + text[len(text) - (keep - head) :]


def middle_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters: its file name whole when that leaves room for
    the start of its folder, the folder cut in its middle; else cut as ``middle`` cuts."""
    if len(path) <= width:
        return path
    folder, slash, name = path.rpartition("/")
    room = width - len(name) - len(slash)
    if not slash or room < len(ELLIPSIS) + 4:
        return middle(path, width)
    return middle(folder, room) + slash + name


def clip(text: str, width: int | None) -> str:
    """``text`` cut at ``width`` (its end marked), or whole when ``width`` is None."""
    if width is None or len(text) <= width:
        return text
    return text[: max(width - len(ELLIPSIS), 0)] + ELLIPSIS


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


@dataclass
class EntityStatus:
    """One entity's Files, summed up."""

    entity: str
    states: dict[str, int] = field(default_factory=dict)
    last_commit: datetime | None = None
    oldest_waiting: datetime | None = None
    oldest_waiting_state: str | None = None
    problems: list[Any] = field(default_factory=list)  # quarantined and failed Files, oldest first

    @property
    def files(self) -> int:
        return sum(self.states.values())

    def count(self, *states: str) -> int:
        return sum(self.states.get(s, 0) for s in states)


def by_entity(files: Iterable[Any], declared: Iterable[str] = ()) -> list[EntityStatus]:
    """Each entity's Files summed up, declared entities without a File included, by name."""
    out: dict[str, EntityStatus] = {name: EntityStatus(name) for name in declared}
    for f in files:
        e = out.setdefault(f.entity, EntityStatus(f.entity))
        e.states[f.state] = e.states.get(f.state, 0) + 1
        if f.state == "COMMITTED" and f.committed_at is not None:
            if e.last_commit is None or f.committed_at > e.last_commit:
                e.last_commit = f.committed_at
        elif f.state in WAITING and (e.oldest_waiting is None or f.created_at < e.oldest_waiting):
            e.oldest_waiting, e.oldest_waiting_state = f.created_at, f.state
        elif f.state in PROBLEMS:
            e.problems.append(f)
    return [out[name] for name in sorted(out)]


ENTITY_COLUMNS = ("committed", "waiting (oldest)", "quarantined", "failed", "last commit")
NUMERIC = (True, True, True, True, False)


def entity_lines(
    entities: Sequence[EntityStatus],
    now: datetime,
    width: int | None,
    relative: Any = None,
) -> list[str]:
    """The table of ``entities``: a header, one line per entity (Files committed; Files still
    waiting to be staged or applied, with the age of the oldest; quarantined; failed; how long
    ago the last commit was), and under an entity with quarantined or failed Files the first
    one's File and reason. ``relative``: a File's path as shown (default: as recorded)."""
    show = relative or (lambda f: f.path)
    rows = []
    for e in entities:
        waiting = e.count(*WAITING)
        oldest = (
            f" ({age((now - e.oldest_waiting).total_seconds())})"
            if e.oldest_waiting is not None
            else ""
        )
        last = (
            f"{age((now - e.last_commit).total_seconds())} ago"
            if e.last_commit is not None
            else "never"
        )
        rows.append(
            (
                e.entity,
                str(e.count("COMMITTED")),
                f"{waiting}{oldest}",
                str(e.count("QUARANTINED")),
                str(e.count("FAILED")),
                last,
            )
        )
    widths = [max([len(h), *(len(r[i + 1]) for r in rows)]) for i, h in enumerate(ENTITY_COLUMNS)]
    name_width = max([len("entity"), *(len(r[0]) for r in rows)])
    if width is not None:
        rest = sum(widths) + 2 * len(widths)
        name_width = max(min(name_width, width - rest), len("entity"))

    def line(cells: Sequence[str]) -> str:
        out = [middle(cells[0], name_width).ljust(name_width)]
        for value, w, numeric in zip(cells[1:], widths, NUMERIC, strict=True):
            out.append(value.rjust(w) if numeric else value.ljust(w))
        return clip("  ".join(out).rstrip(), width)

    lines = [line(("entity", *ENTITY_COLUMNS))]
    for e, row in zip(entities, rows, strict=True):
        lines.append(line(row))
        for state in PROBLEMS:
            bad = [f for f in e.problems if f.state == state]
            if not bad:
                continue
            more = f" (+{len(bad) - 1} more: runner status --files)" if len(bad) > 1 else ""
            reason = first_line(bad[0].last_error) or "no reason recorded"
            lines.append(clip(f"  {state.lower()}: {show(bad[0])}: {reason}{more}", width))
    return lines


FILE_COLUMNS = ("id", "entity", "state", "tries", "age", "path", "applied")


def file_lines(
    files: Sequence[Any],
    applied: dict[int, str],
    now: datetime,
    width: int | None,
    relative: Any = None,
) -> list[str]:
    """One line per File (id, entity, state, attempts, age, path, the markers' counts), the
    path cut in its middle to fit; under a File with a reason, its first line."""
    show = relative or (lambda f: f.path)
    rows = [
        (
            str(f.id),
            f.entity,
            f.state,
            str(f.attempts),
            age((now - f.created_at).total_seconds()),
            show(f),
            applied.get(f.id, ""),
        )
        for f in files
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(FILE_COLUMNS)]
    if width is not None:
        # the path takes what the other columns leave, at least 20; applied is cut at the end
        others = sum(widths[:5]) + 2 * 5 + (2 + len("applied") if any(applied.values()) else 0)
        widths[5] = max(min(widths[5], width - others), 20)
    header = "  ".join(h.ljust(w) for h, w in zip(FILE_COLUMNS, widths, strict=True))
    lines = [clip(header.rstrip(), width)]
    for f, row in zip(files, rows, strict=True):
        cells = [
            row[0].rjust(widths[0]),
            row[1].ljust(widths[1]),
            row[2].ljust(widths[2]),
            row[3].rjust(widths[3]),
            row[4].rjust(widths[4]),
            middle_path(row[5], widths[5]).ljust(widths[5]),
            row[6],
        ]
        lines.append(clip("  ".join(cells).rstrip(), width))
        reason = first_line(f.last_error)
        if reason and f.state != "COMMITTED":
            lines.append(clip(f"    {reason}", width))
        if f.reload_of is not None:
            lines.append(clip(f"    reload: the bytes of File {f.reload_of} again", width))
    return lines


def relative_to(roots: Iterable[str], files: Iterable[Any] = ()) -> Any:
    """A function: a File's path relative to the landing root it is under (the longest); a
    File under none of ``roots`` (landed through `--landing` elsewhere) relative to the folder
    all such ``files`` share, when they share one."""
    prefixes = sorted(
        {r.rstrip("/") + "/" for r in roots if r and r.strip("/")}, key=len, reverse=True
    )

    def under_root(path: str) -> str | None:
        return next((path[len(p) :] for p in prefixes if path.startswith(p)), None)

    folders = [os.path.dirname(f.path) for f in files if under_root(f.path) is None]
    shared = ""
    if folders and all("://" not in f for f in folders):
        shared = os.path.commonpath(folders)
        if shared in folders:  # a File's own folder: keep its name (the entity's, often)
            shared = os.path.dirname(shared)
    base = shared.rstrip("/") + "/" if shared.strip("/") else ""

    def show(f: Any) -> str:
        found = under_root(f.path)
        if found is not None:
            return found
        return f.path[len(base) :] if base and f.path.startswith(base) else f.path

    return show


def landing_prefixes(root: os.PathLike[str] | str, configured: Iterable[str]) -> list[str]:
    """The landing roots as recorded paths may start: URIs as they are, local folders absolute
    and with their links resolved."""
    out = []
    for r in configured:
        if "://" in r:
            out.append(r)
        else:
            folder = os.path.join(root, r)
            out += [os.path.abspath(folder), os.path.realpath(folder)]
    return out
