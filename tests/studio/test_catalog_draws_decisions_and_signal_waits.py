"""The catalog draws the edges a definition can take: each ``step.go_to`` read from the
source (a link to the step it goes to, "dynamic" when the name is not a literal), finish
and fail decisions, and the waits for signals (any-of, all-of, approvals, with their
timeouts); otherwise the next step."""

from __future__ import annotations

from datetime import timedelta

import engine
from app.action.step_source import step_calls
from tests.domain import Car
from tests.studio.support import StudioClient


def declare_refund() -> None:
    refund = engine.define(Car, "refund")

    @refund.step
    def check(car: Car, step: engine.StepContext, amount: int) -> None:
        if amount > 100:
            step.go_to("review")
        elif amount < 0:
            step.fail("negative")
        step.go_to(car.location or "pay")

    @refund.step
    def review(car: Car, step: engine.StepContext, amount: int) -> None:
        step.wait_for_approval(timeout=timedelta(hours=4))
        step.wait_for_all("receipt", "photo")

    @refund.step
    def pay(car: Car, step: engine.StepContext, amount: int) -> None:
        step.finish({"paid": amount})


def test_decisions_and_waits_are_read_from_the_source() -> None:
    declare_refund()
    definition = engine.definition(Car, "refund")
    check, review, pay = (step_calls(fn) for fn in definition.steps)
    assert check is not None and review is not None and pay is not None
    assert check.decisions == [("go_to", "review"), ("fail", None), ("go_to", None)]
    assert review.waits == [
        "signal approved or rejected (timeout timedelta(hours=4))",
        "signal receipt and photo",
    ]
    assert pay.decisions == [("finish", None)]


def test_the_catalog_draws_the_edges(viewer_client: StudioClient) -> None:
    declare_refund()
    page = viewer_client.get("/catalog/Car/refund").text
    assert 'data-edge="go_to:review"' in page
    assert 'href="#Car-refund-step-review"' in page or "-step-review" in page
    assert 'data-edge="fail"' in page and 'data-edge="finish"' in page
    assert "a step it names at run time" in page
    assert "signal approved or rejected" in page
    assert "otherwise → the next step" in page
