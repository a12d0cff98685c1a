"""Local copies of Files in object storage, for a Spark that cannot read their scheme.

The embedded default's Spark (and the one that stages for PostgreSQL and BigQuery) has no
connector for ``s3://``, ``gs://`` or ``abfss://``: it reads each remote File from a copy on
local disk, the spool, written while the runner hashes the File (one read of the object), or,
for a File hashed by an earlier run, fetched when it is staged (its bytes checked against its
content hash). A Spark cluster (``spark.master`` not ``local``) reads the URIs itself: nothing
is spooled.

Bounded and cleaned: copies made while hashing stop at ``max_bytes`` in all (the rest are
fetched when staged); a batch staged from the spool holds at most ``max_bytes`` of Files (a
single larger File alone); each copy is removed once its batch is staged, the run's folder when
the run ends, and folders of runs that are no longer running by the next run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from runner.errors import TerminalError
from runner.fs import RemoteFile
from runner.hashing import CHUNK, content_hash

#: What the spool holds at most (bytes), unless runner.yml's ``spool_max_mib`` says otherwise.
DEFAULT_MAX_BYTES = 2048 * 1024 * 1024

T = TypeVar("T")


class Spool:
    """One run's local copies, under ``<state_dir>/spool/<process id>/``."""

    def __init__(
        self, root: Path, process_id: str, max_bytes: int = DEFAULT_MAX_BYTES, *, eager: bool = True
    ) -> None:
        self.root = root
        self.dir = root / process_id
        self.max_bytes = max_bytes
        self.eager = eager  # copies made while hashing (else only when Spark cannot read)
        self.held = 0  # bytes of the copies made while hashing, not yet released

    def path_for(self, digest: str, name: str) -> Path:
        """Where a File's copy lies: its own folder, its own name (messages name it)."""
        return self.dir / digest / name

    def hash_and_keep(self, remote: RemoteFile, size: int) -> str:
        """The File's content hash; its copy kept on the way when the spool has room."""
        if self.held + size > self.max_bytes:
            return content_hash(remote)
        digest, part = self._copy(remote)
        final = self.path_for(digest, remote.name)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        self.held += size
        return digest

    def has(self, remote: RemoteFile, registered: str) -> bool:
        return self.path_for(registered, remote.name).exists()

    def local_copy(self, remote: RemoteFile, registered: str) -> Path:
        """The File's copy, fetched now if hashing did not keep one. Bytes that are no longer
        the ones registered (the object was overwritten since) are refused."""
        final = self.path_for(registered, remote.name)
        if final.exists():
            return final
        digest, part = self._copy(remote)
        if digest != registered:
            part.unlink(missing_ok=True)
            raise TerminalError(
                f"{remote.name}: its bytes changed since the File was registered (content "
                f"hash {registered[:12]}, now {digest[:12]}); the object as it is now is a "
                "new File, staged on its own"
            )
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, final)
        return final

    def release(self, content_hashes: Iterable[str]) -> None:
        """Remove these Files' copies (their batch is staged, or given back)."""
        for h in content_hashes:
            folder = self.dir / h
            if folder.is_dir():
                self.held -= sum(p.stat().st_size for p in folder.iterdir())
                shutil.rmtree(folder, ignore_errors=True)
        self.held = max(self.held, 0)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def clean(self, running: set[str]) -> None:
        """Remove the folders of runs not in ``running`` (a run killed before it cleaned up)."""
        if not self.root.is_dir():
            return
        for folder in self.root.iterdir():
            if folder.name not in running and folder != self.dir:
                shutil.rmtree(folder, ignore_errors=True)

    def batches(self, files: Sequence[T], sizes: Sequence[int]) -> Iterator[list[T]]:
        """``files`` in consecutive batches of at most ``max_bytes`` (a larger File alone)."""
        batch: list[T] = []
        total = 0
        for f, size in zip(files, sizes, strict=True):
            if batch and total + size > self.max_bytes:
                yield batch
                batch, total = [], 0
            batch.append(f)
            total += size
        if batch:
            yield batch

    def _copy(self, remote: RemoteFile) -> tuple[str, Path]:
        """Stream the object into a partial file beside the spool's copies, hashing it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        part = self.dir / f".{os.getpid()}.{id(remote)}.part"
        with remote.open("rb") as source, open(part, "wb") as sink:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                sink.write(chunk)
        return digest.hexdigest(), part


_READS: dict[tuple[int, str], bool] = {}


def spark_reads(spark: Any, uri: str) -> bool:
    """Whether ``spark`` has a filesystem for the URI's scheme (Hadoop's connectors: s3a with
    hadoop-aws, gs with the GCS connector, abfss with hadoop-azure). Spark Connect (Databricks)
    cannot be asked and reads what its cluster reads: True."""
    scheme = uri.split("://", 1)[0]
    key = (id(spark), scheme)
    if key not in _READS:
        try:
            jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
        except AttributeError:
            return True
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
            _READS[key] = True
        except Exception:  # noqa: BLE001 - UnsupportedFileSystemException, through Py4J
            _READS[key] = False
    return _READS[key]
