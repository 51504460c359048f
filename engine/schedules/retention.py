"""Retention of ticks: each schedule keeps its newest ``KEEP`` ticks, and always its newest
tick that started an action (the overlap check reads it), so an every-second schedule does
not grow the ticks table by 86,400 rows a day forever.

A pruned tick can never fire again: a schedule's next tick is always later than every tick
it has recorded, so the unique row it leaves behind guards nothing any more.
"""

from __future__ import annotations

from functools import partial

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from .. import db
from .tables import Schedule, Tick

#: Ticks kept per schedule (the studio shows the newest 50).
KEEP = 1000
#: How often the clock prunes.
EVERY_SECONDS = 3600.0


def prune(session: Session | None = None, *, keep: int = KEEP) -> int:
    """Delete each schedule's ticks beyond its newest ``keep`` (but never its newest tick
    that started an action); one transaction per schedule that has more. Returns how many."""
    own = session is None
    s = session if session is not None else db.session()
    deleted = 0
    try:
        crowded = s.scalars(
            select(Tick.schedule_id).group_by(Tick.schedule_id).having(func.count() > keep)
        ).all()
        s.rollback()
        for schedule_id in crowded:
            deleted += db.retrying(s, partial(_prune_one, s, schedule_id, keep))
        return deleted
    finally:
        if own:
            s.close()


def _prune_one(s: Session, schedule_id: int, keep: int) -> int:
    # Through ix_stepwise_schedule_ticks_schedule: the newest entries of this schedule only.
    oldest_kept = s.scalar(
        select(Tick.id)
        .where(Tick.schedule_id == schedule_id)
        .order_by(Tick.id.desc())
        .offset(keep - 1)
        .limit(1)
    )
    last_run = s.scalar(
        select(Tick.id)
        .where(Tick.schedule_id == schedule_id, Tick.invocation_id.is_not(None))
        .order_by(Tick.id.desc())
        .limit(1)
    )
    if oldest_kept is None or s.get(Schedule, schedule_id) is None:
        return 0
    doomed = delete(Tick).where(Tick.schedule_id == schedule_id, Tick.id < oldest_kept)
    if last_run is not None:
        doomed = doomed.where(Tick.id != last_run)
    result = s.execute(doomed)
    return int(getattr(result, "rowcount", 0) or 0)
