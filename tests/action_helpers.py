"""Helpers of the action spec tests (spec §8 cases 22-33, test/models/stepped/action_test.rb):
read again what jobs committed, and the row counts a test expects to change.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from engine import performance
from engine.models import Action


def reread(session: Session) -> None:
    """Read what jobs committed: end the test session's snapshot (SQLite keeps one per
    transaction) and expire every row it holds."""
    session.commit()
    session.expire_all()


def no_change(**changes: int) -> dict[str, int]:
    return {"actions": 0, "steps": 0, "performances": 0, "achievements": 0, **changes}


def lane_of(session: Session, action: Action) -> int | None:
    """The id of the lane ``action`` is in (its key's, while pending or performing)."""
    lane = performance.of(session, action)
    return lane.id if lane is not None else None
