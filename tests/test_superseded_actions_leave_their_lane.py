"""Given a lane that never drains (its current action is outbound and waits for hours),
when new requests keep superseding the queued one, then each superseded action leaves the
lane: admission reads only the lane's live members (the current action and the newest
queued one), so the hundredth request costs what the second did.

Before, a superseded action kept its lane link (``performance_id``) until the lane
closed, and every admission loaded every superseded action: quadratic in a busy lane. Now
membership is the key and an incomplete status, read through a partial index that holds
only live actions.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.admission import lane_actions
from engine.models import Action, Performance
from tests.action_helpers import lane_of
from tests.domain import Car


def test_a_lane_that_never_drains_holds_only_its_live_members(session: Session, car: Car) -> None:
    paint = engine.define(Car, "paint", outbound=True, concurrency_key="Car/paint")

    @paint.step
    def order(car: Car, step: engine.StepContext, color: str) -> None:
        pass

    for color in ["red", *[f"blue {n}" for n in range(30)]]:
        engine.later(car, "paint", color)
        session.commit()
        testing.drain()

    session.expire_all()
    lane = session.scalars(select(Performance)).one()
    members = lane_actions(session, lane)
    assert [(m.status, m.arguments) for m in members] == [("performing", ["red"]), ("pending", ["blue 29"])]
    superseded = session.scalar(select(func.count()).where(Action.status == "superseded"))
    assert superseded == 29
    assert all(
        lane_of(session, a) is None
        for a in session.scalars(select(Action).where(Action.status == "superseded"))
    )
