"""Finding an entity's Files under the declared landing roots.

Nothing outside a landing root is ever read: a glob that escapes it, or a symlink pointing out
of it, is refused. Files still being written are skipped: until they are old enough
(``min_age_seconds``), or while their size or mtime changes between two listings
(``settle()``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.entities import Entity
from runner.errors import CdcError, ConfigError, TransientError, first_line
from runner.fs import FilePath, RemoteFile, etag, file_size_mtime, filesystem, size_mtime


@dataclass(frozen=True)
class LandedFile:
    entity: str
    path: FilePath  # resolved, inside a landing root (a local path or a RemoteFile URI)
    size: int
    mtime: datetime  # naive UTC
    etag: str | None = None  # an object's entity tag (object stores): new bytes, a new tag

    @property
    def name(self) -> str:
        return self.path.name


def resolve_roots(roots: list[FilePath]) -> list[FilePath]:
    resolved: list[FilePath] = []
    for root in roots:
        if isinstance(root, RemoteFile):
            _check_remote_root(root)
            resolved.append(RemoteFile(root.uri.rstrip("/")))
            continue
        real = root.resolve()
        if not real.is_dir():
            raise ConfigError(f"landing root {root} does not exist or is not a folder")
        resolved.append(real)
    return resolved


def _check_remote_root(root: RemoteFile) -> None:
    """A remote root can be listed: its bucket (container) exists and the credentials may list
    it; a prefix with no object under it yet is a root with no Files (object stores have no
    folders). Each failure is one line naming the root; an endpoint that does not answer is
    transient (a watch polls again)."""
    fs, path = filesystem(root.uri)
    fs.invalidate_cache()  # fsspec keeps listings (of every folder): a watch would see nothing new
    bucket = path.split("/", 1)[0]
    try:
        if fs.isdir(path):
            return
        if fs.isfile(path):
            raise ConfigError(f"landing root {root} is an object, not a prefix to list")
        if not fs.exists(bucket):
            raise ConfigError(
                f"landing root {root}: bucket {bucket!r} does not exist (or these credentials "
                f"cannot see it); {NOTHING_RECORDED}"
            )
    except PermissionError as exc:
        raise ConfigError(
            f"landing root {root}: access denied ({first_line(exc)}); check the credentials "
            "the store's own chain finds (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            f"AWS_PROFILE, an instance role); {NOTHING_RECORDED}"
        ) from exc
    except CdcError:
        raise
    except Exception as exc:  # noqa: BLE001 - the store's client: no endpoint, no network
        raise TransientError(
            f"landing root {root} cannot be listed: {type(exc).__name__}: {first_line(exc)}; "
            f"{NOTHING_RECORDED} once it answers"
        ) from exc


# What a root that cannot be listed leaves, and what to do.
NOTHING_RECORDED = "no File was recorded: run the same command again"


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def discover(
    entity: Entity,
    roots: list[FilePath],
    *,
    min_age_seconds: float = 0.0,
    now: float | None = None,
) -> tuple[list[LandedFile], list[str]]:
    """The entity's Files under ``roots`` (sorted by path), and notes on what was skipped."""
    return discover_each([entity], roots, min_age_seconds=min_age_seconds, now=now)[entity.name]


def discover_each(
    entities: list[Entity],
    roots: list[FilePath],
    *,
    min_age_seconds: float = 0.0,
    now: float | None = None,
) -> dict[str, tuple[list[LandedFile], list[str]]]:
    """``discover`` for each entity, the roots checked (and remote listings read afresh)
    once for all of them."""
    resolved = resolve_roots(roots)
    now = time.time() if now is None else now
    return {e.name: _discover(e, resolved, min_age_seconds, now) for e in entities}


def _discover(
    entity: Entity, roots: list[FilePath], min_age_seconds: float, now: float
) -> tuple[list[LandedFile], list[str]]:
    found: dict[FilePath, LandedFile] = {}
    notes: list[str] = []
    for root in roots:
        if isinstance(root, RemoteFile):
            for landed in _discover_remote(entity, root, min_age_seconds, now, notes):
                found[landed.path] = landed
            continue
        candidates = {c for glob in entity.landing for c in root.glob(glob)}
        for candidate in sorted(candidates):
            real = candidate.resolve()
            if not _inside(real, [root]):
                notes.append(f"{candidate}: points outside landing root {root}; not read")
                continue
            if not real.is_file():
                continue
            stat = real.stat()
            if now - stat.st_mtime < min_age_seconds:
                notes.append(
                    f"{candidate}: modified {now - stat.st_mtime:.1f}s ago; skipped "
                    "until it is older than the minimum age"
                )
                continue
            found[real] = LandedFile(
                entity=entity.name,
                path=real,
                size=stat.st_size,
                mtime=datetime.fromtimestamp(stat.st_mtime, UTC).replace(tzinfo=None),
            )
    return sorted(found.values(), key=lambda f: str(f.path)), notes


def _discover_remote(
    entity: Entity, root: RemoteFile, min_age_seconds: float, now: float, notes: list[str]
) -> list[LandedFile]:
    """Files under a URI root, listed through fsspec (the entity's globs are relative and
    never hold '..': checked when declared)."""
    fs, base = filesystem(root.uri)
    base = base.rstrip("/")
    out = []
    for glob in entity.landing:
        for path, info in sorted(fs.glob(f"{base}/{glob}", detail=True).items()):
            if info.get("type") != "file":
                continue
            if not path.startswith(base + "/"):
                notes.append(f"{path}: outside landing root {root}; not read")
                continue
            size, mtime = file_size_mtime(info)
            age = now - mtime.replace(tzinfo=UTC).timestamp()
            # the root as the user spelled it, then the path under it: fsspec's own spelling
            # may drop what the store needs to find it again (abfss://container@account...)
            uri = root.uri.rstrip("/") + path[len(base) :]
            if age < min_age_seconds:
                notes.append(
                    f"{uri}: modified {age:.1f}s ago; skipped until it is older than the "
                    "minimum age"
                )
                continue
            landed = LandedFile(
                entity=entity.name, path=RemoteFile(uri), size=size, mtime=mtime, etag=etag(info)
            )
            out.append(landed)
    return out


def settle(
    files: list[LandedFile], seconds: float, *, sleep: Callable[[float], None] = time.sleep
) -> tuple[list[LandedFile], list[str]]:
    """Keep the Files whose size and mtime (and an object's entity tag: an object rewritten
    with as many bytes in the same second) did not change over ``seconds`` (a second
    listing)."""
    if seconds <= 0 or not files:
        return files, []
    sleep(seconds)
    stable, notes = [], []
    for f in files:
        try:
            if isinstance(f.path, RemoteFile):
                info = f.path.info()
                (size, mtime), tag = file_size_mtime(info), etag(info)
            else:
                (size, mtime), tag = size_mtime(f.path), None
        except FileNotFoundError:
            notes.append(f"{f.path}: disappeared between two listings; skipped")
            continue
        if size != f.size or mtime != f.mtime or tag != f.etag:
            what = "size, mtime or ETag" if f.etag else "size or mtime"
            notes.append(f"{f.path}: {what} changed within {seconds:g}s; skipped this run")
            continue
        stable.append(f)
    return stable, notes
