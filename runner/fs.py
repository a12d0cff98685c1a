"""Where Files are: local paths (``pathlib.Path``, unchanged) or URIs on any filesystem fsspec
knows (``s3://``, ``gs://``, ``abfss://``, ``file://``; its protocol package, such as s3fs,
installed and configured by its own environment). Databricks volumes (``/Volumes/...``) are
local paths on a cluster.

A remote File is a ``RemoteFile``: the few things the runner asks of a path (``name``,
``suffix``, ``open``, ``resolve``, ``str``) over fsspec, so that discovery, hashing and
validation stream it the same way as a local File, and Spark reads it by the same URI.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from runner.errors import ConfigError

# Protocol spellings that name the same store (Hadoop's connectors versus fsspec's).
SAME_STORE = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "abfss"}


def is_uri(location: str) -> bool:
    return "://" in location


@dataclass(frozen=True)
class RemoteFile:
    """A File (or landing root) on an fsspec filesystem, named by its URI."""

    uri: str

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return posixpath.basename(urlsplit(self.uri).path.rstrip("/"))

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    def resolve(self) -> RemoteFile:
        return self

    def open(self, mode: str = "rb") -> IO[bytes]:
        import fsspec

        handle: IO[bytes] = fsspec.open(self.uri, mode).open()
        return handle

    def info(self) -> dict[str, Any]:
        """The object's entry as the store says now (not as a listing saw it)."""
        fs, path = filesystem(self.uri)
        fs.invalidate_cache(path)
        return dict(fs.info(path))

    def stat(self) -> tuple[int, datetime]:
        return file_size_mtime(self.info())


FilePath = Path | RemoteFile


def size_mtime(path: FilePath) -> tuple[int, datetime]:
    """A File's size and modification time (naive UTC), local or remote."""
    if isinstance(path, RemoteFile):
        return path.stat()
    st = path.stat()
    return st.st_size, datetime.fromtimestamp(st.st_mtime, UTC).replace(tzinfo=None)


def as_file(location: str) -> FilePath:
    """A File's path as the Audit DB records it, back as a path object."""
    return RemoteFile(location) if is_uri(location) else Path(location)


def configure(options: dict[str, dict[str, Any]]) -> None:
    """runner.yml's ``landing_options``: each protocol's fsspec options (an endpoint, a
    region), the defaults of every filesystem of that protocol this process opens."""
    if not options:
        return
    import fsspec.config

    for protocol, values in options.items():
        fsspec.config.conf.setdefault(protocol, {}).update(values)


def filesystem(uri: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for a URI."""
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ConfigError("landing roots that are URIs need fsspec (pip install fsspec)") from exc
    try:
        return fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        scheme = urlsplit(uri).scheme
        raise ConfigError(
            f"landing root {uri}: no filesystem for {scheme}:// ({exc}); install its fsspec "
            "package (s3fs, gcsfs, adlfs) and configure its credentials in the environment"
        ) from exc


def file_size_mtime(info: dict[str, Any]) -> tuple[int, datetime]:
    """Size and modification time (naive UTC) from an fsspec ``info`` entry, whatever the
    filesystem calls them."""
    raw = next(
        (
            info[k]
            for k in ("mtime", "LastModified", "last_modified", "updated", "modified")
            if info.get(k) is not None
        ),
        None,
    )
    if isinstance(raw, int | float):
        mtime = datetime.fromtimestamp(raw, UTC)
    elif isinstance(raw, datetime):
        mtime = raw if raw.tzinfo else raw.replace(tzinfo=UTC)
    elif isinstance(raw, str):
        mtime = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        mtime = mtime if mtime.tzinfo else mtime.replace(tzinfo=UTC)
    else:
        mtime = datetime.fromtimestamp(0, UTC)  # unknown: settle() compares sizes then
    return int(info.get("size") or 0), mtime.astimezone(UTC).replace(tzinfo=None)


def etag(info: dict[str, Any]) -> str | None:
    """An object's entity tag from an fsspec ``info`` entry (S3's ETag, GCS's etag, Azure's
    etag), or None where the store has none."""
    found = info.get("ETag") or info.get("etag")
    return str(found).strip('"') if found else None


def same_store_spellings(uri: str) -> set[str]:
    """A URI as each connector may spell its scheme (s3a:// and s3:// name one object)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return {uri}
    canonical = SAME_STORE.get(scheme, scheme)
    return {uri, f"{canonical}://{rest}"}
