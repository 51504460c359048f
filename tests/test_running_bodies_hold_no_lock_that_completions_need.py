"""Given an outbound step body that calls a payment gateway whose webhook arrives before the
body returns, when the webhook completes the action from another connection, then the
completion neither waits for the body nor deadlocks with it: it commits at once, the body
runs exactly once, and the body's outcome, recorded afterwards, leaves the completed action
as the webhook left it.

Before the kernel's lock order (lane, then step, then action; a body holding only its
step's lease), the body held its step row lock while it ran and then needed the lane lock,
while the completion held the lane lock and needed the step row: PostgreSQL aborted one of
them after ``deadlock_timeout``, and when the body was the victim it ran again (the gateway
was called twice).
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.domain import Car

pytestmark = pytest.mark.postgresql_only


def test_a_webhook_completing_the_action_of_a_running_body_commits_at_once(
    session: Session, car: Car
) -> None:
    calls: list[float] = []
    completed: dict[str, object] = {}
    webhook_done = threading.Event()

    def webhook(action_id: int) -> None:
        started = time.monotonic()
        completed["result"] = engine.complete_action(action_id, "succeeded", cause="webhook")
        completed["seconds"] = time.monotonic() - started
        webhook_done.set()

    pay = engine.define(Car, "pay", outbound=True)

    @pay.step
    def charge(car: Car, step: engine.StepContext) -> None:
        calls.append(time.monotonic())
        threading.Thread(target=webhook, args=(step.action.id,), daemon=True).start()
        # The gateway answers after its webhook has been delivered.
        webhook_done.wait(timeout=5)

    engine.later(car, "pay")
    session.commit()
    testing.drain()

    assert webhook_done.is_set(), "the webhook's completion never finished"
    assert completed["result"], completed
    assert completed["seconds"] < 0.9, "the completion waited for the body (deadlock_timeout is 1 s)"
    assert len(calls) == 1, "the body ran more than once"
    session.expire_all()
    action = session.scalars(select(engine.Action)).one()
    assert action.status == "succeeded"
    steps = session.scalars(select(engine.Step)).all()
    assert [s.completed_at is not None for s in steps] == [True]
