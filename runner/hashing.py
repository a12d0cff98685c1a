"""Content Hash of a File: SHA-256 of its bytes, streamed in constant memory."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1024 * 1024


def content_hash(path: Path, chunk_size: int = CHUNK) -> str:
    """Hex SHA-256 of the file's bytes, read ``chunk_size`` at a time (never whole)."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            n = handle.readinto(buffer)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()
