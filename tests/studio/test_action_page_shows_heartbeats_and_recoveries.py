"""The action page shows durable attempts: a running step its last heartbeat (time ago),
progress and checkpoint; the attempts list the lost and timed-out ones with their errors;
a recovery step the failure that led to it. The API's action detail has the attempts.

Not a spec case: issue 11 ("Studio")."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from engine import StepContext, testing
from engine.models import Action
from tests.attempt_helpers import WorkerKilled
from tests.domain import Car
from tests.studio.support import StudioClient


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def running_report(session: Session, car: Car) -> Action:
    """A report whose worker died after checkpointing chunk 4 of 10: its attempt is open."""
    report = engine.define(Car, "report", retry=2)

    @report.step(heartbeat_timeout=timedelta(seconds=30))
    def chunks(car: Car, step: StepContext) -> None:
        for chunk in range(10):
            step.heartbeat(progress=chunk / 10, checkpoint={"chunk": chunk})
            testing.travel(timedelta(seconds=1))
            if chunk == 4:
                raise WorkerKilled

    testing.freeze()
    engine.later(car, "report")
    session.commit()
    with pytest.raises(WorkerKilled):
        testing.drain()
    return session.query(Action).one()


def test_a_running_step_shows_its_last_heartbeat_progress_and_checkpoint(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    action = running_report(session, car)
    testing.travel(timedelta(seconds=5))
    page = text_of(viewer_client.get(f"/actions/{action.id}").text)
    assert "step chunks: running · last heartbeat 6s ago, 40%" in page
    assert "attempt 1 running on" in page
    assert "attempt 1 running on" in page and '· heartbeat 6s ago · 40% · checkpoint {"chunk": 4}' in page

    # When no heartbeat comes for 30 s, the attempt is lost and the page says so
    testing.travel(timedelta(seconds=30))
    testing.drain(lambda item: item.job == "stepwise.check_attempt")
    page = text_of(viewer_client.get(f"/actions/{action.id}").text)
    assert "attempt 1 lost" in page
    assert "engine.errors.HeartbeatTimedOut" in page

    detail = viewer_client.get(f"/api/actions/{action.id}").json
    assert detail is not None
    [attempt] = detail["attempts"]
    assert (attempt["attempt"], attempt["outcome"], attempt["checkpoint"]) == (1, "lost", {"chunk": 4})
    assert attempt["progress"] == 0.4


def test_a_recovery_step_shows_the_failure_that_led_to_it(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    order = engine.define(Car, "order")

    @order.step(recover="refund")
    def charge(car: Car, step: StepContext) -> None:
        raise RuntimeError("card declined")

    @order.step
    def refund(car: Car, step: StepContext) -> None:
        step.fail("refunded after a declined charge")

    with testing.handle_exceptions():
        engine.later(car, "order")
        session.commit()
        testing.drain()
    action = session.query(Action).one()
    page = text_of(viewer_client.get(f"/actions/{action.id}").text)
    assert "recovering from charge: builtins.RuntimeError card declined (attempt 1, may have run)" in page
    assert "→ went to refund" in page


def test_the_catalog_shows_a_steps_timeouts_and_its_recovery(viewer_client: StudioClient) -> None:
    order = engine.define(Car, "order")

    @order.step(heartbeat_timeout=30, attempt_timeout=timedelta(minutes=5), recover="refund")
    def charge(car: Car, step: StepContext) -> None:
        pass

    @order.step
    def refund(car: Car, step: StepContext) -> None:
        pass

    page = viewer_client.get("/catalog/").text
    assert "heartbeat timeout 30s · attempt timeout 5m 00s" in page
    assert 'data-edge="recover:refund"' in page
    assert "once its retries are exhausted, recovers at" in text_of(page)
