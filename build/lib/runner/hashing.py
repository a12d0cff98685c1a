"""Content Hash of a File: SHA-256 of its bytes, streamed in constant memory."""

from __future__ import annotations

import hashlib

from runner.fs import FilePath, RemoteFile

CHUNK = 1024 * 1024


def content_hash(path: FilePath, chunk_size: int = CHUNK) -> str:
    """Hex SHA-256 of the file's bytes, read ``chunk_size`` at a time (never whole)."""
    digest = hashlib.sha256()
    if isinstance(path, RemoteFile):  # streamed through fsspec
        with path.open("rb") as remote:
            while chunk := remote.read(chunk_size):
                digest.update(chunk)
        return digest.hexdigest()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buffer)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()
