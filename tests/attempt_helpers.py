"""Shared by the durable-attempt tests: a report that processes chunks and heartbeats a
checkpoint, a stand-in for a worker killed mid-body, and readers of the attempt rows."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.models import ActionEvent, Attempt


class WorkerKilled(BaseException):
    """Raised inside a body to stand for its worker dying there: nothing after it runs,
    and nothing catches it (as SIGKILL), so the attempt is left open as a killed worker's."""


def attempts(session: Session, action_id: int) -> list[Attempt]:
    session.expire_all()
    return list(session.scalars(select(Attempt).where(Attempt.action_id == action_id).order_by(Attempt.id)))


def events(session: Session, action_id: int) -> list[str]:
    return list(
        session.scalars(
            select(ActionEvent.event).where(ActionEvent.action_id == action_id).order_by(ActionEvent.id)
        )
    )
