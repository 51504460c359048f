"""Given a lane whose current action's last step is finishing, when another admission queues
an action in that lane and still holds the lane's lock as the completion arrives, then the
completion waits for it and sees the queued action: the lane is kept and moves on to it,
which then runs. Nothing is left pending in a lane that has no current action.

(A completion that took the lane's lock inside the statement that also checked for the
lane's other members read them with the snapshot that statement began with, from before
the wait: it removed the lane under the queued action, which stayed pending forever. The
integration test of exclusive lanes found it on Redis.)
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import admission, db, status, testing
from tests.domain import Car

pytestmark = pytest.mark.postgresql_only


def test_an_action_queued_while_its_lane_completes_is_not_stranded(session: Session, car: Car) -> None:
    body_started, go = threading.Event(), threading.Event()

    def unload(car: Car, step: engine.StepContext) -> None:
        body_started.set()
        go.wait(timeout=5)

    engine.define(Car, "unload", unload, concurrency_key="dock")

    # Given the lane's first action running its (only) step
    engine.later(car, "unload")
    session.commit()
    worker = threading.Thread(target=testing.drain, daemon=True)
    worker.start()
    assert body_started.wait(timeout=5)

    # When a second action is queued by an admission that holds the lane's lock while the
    # first one's completion arrives
    queued = engine.later(car, "unload")
    session.commit()
    with db.session() as holder:
        action = admission.admit(holder, queued.id)
        assert action is not None and action.status == status.PENDING
        go.set()
        time.sleep(0.5)  # the completion now waits for the lane's lock
        holder.commit()
    worker.join(timeout=10)
    assert not worker.is_alive()
    testing.drain()

    # Then the lane moved on to the queued action, which ran; no lane and nothing pending is left
    session.expire_all()
    statuses = session.scalars(select(engine.Action.status).order_by(engine.Action.id)).all()
    assert statuses == [status.SUCCEEDED, status.SUCCEEDED]
    assert session.scalars(select(engine.Performance)).all() == []
