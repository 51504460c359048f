"""The engine's clock: every timestamp the engine writes comes from ``now()``.

Tests freeze and move it (``engine.testing``) so timeouts and waits can be driven
without sleeping. Times are naive UTC, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_frozen: datetime | None = None
_offset = timedelta()


def now() -> datetime:
    if _frozen is not None:
        return _frozen
    return datetime.now(UTC).replace(tzinfo=None) + _offset


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
