"""Process ids: one per runner invocation, unique and sortable by start time (UUIDv7)."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_process_id() -> str:
    """Return a UUIDv7 (RFC 9562) string.

    The first 48 bits are the Unix time in milliseconds, so ids sort by creation time as
    strings and as UUIDs. Within one millisecond a 12-bit counter (``rand_a``) keeps ids from
    one process strictly increasing; the remaining 62 bits are random, so ids from different
    processes do not collide.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted inside one millisecond: borrow the next one
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        counter = _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= counter << 64
    value |= 0b10 << 62  # RFC 9562 variant
    value |= rand_b
    return str(uuid.UUID(int=value))
