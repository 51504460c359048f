"""The engine's clock: every timestamp the engine writes comes from ``now()``.

Tests freeze and move it (``engine.testing``) so timeouts and waits can be driven
without sleeping. Times are naive UTC, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

_frozen: datetime | None = None
_offset = timedelta()
_EPOCH = datetime(1970, 1, 1)


def now() -> datetime:
    """The current time, naive UTC (the system's clock, as ``datetime.now(UTC)`` reads it)."""
    if _frozen is not None:
        return _frozen
    # Counted from the epoch: ~0.7 µs against ~1.5 µs for datetime.now(UTC) made naive (an
    # action reads the clock ~17 times); utcnow() is as fast but deprecated.
    current = _EPOCH + timedelta(microseconds=time.time_ns() // 1000)
    return current + _offset if _offset else current


def freeze(at: datetime | None = None) -> datetime:
    """Stop the clock at ``at`` (default: the current time)."""
    global _frozen
    _frozen = (at or now()).replace(tzinfo=None, microsecond=(at or now()).microsecond)
    return _frozen


def travel(delta: timedelta) -> datetime:
    """Move the clock forward by ``delta``, frozen or not."""
    global _frozen, _offset
    if _frozen is not None:
        _frozen = _frozen + delta
    else:
        _offset += delta
    return now()


def reset() -> None:
    global _frozen, _offset
    _frozen = None
    _offset = timedelta()
