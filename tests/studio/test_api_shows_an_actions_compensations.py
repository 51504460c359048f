"""The API's action shows what its steps registered to undo their work, in turn, with
their progress (and the steps that ran them, index -1), matching the OpenAPI document; an
action without compensations lists none."""

from __future__ import annotations

from typing import Any

from flask import Flask

import engine
from app.database import db
from engine import StepContext, testing
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.test_api_answers_match_the_openapi_document import check, document  # noqa: F401


def test_the_api_lists_compensations_in_turn(
    app: Flask,
    viewer_client: StudioClient,
    document: dict[str, Any],  # noqa: F811
) -> None:
    # Given a trip that booked, then paid, then broke down, and was compensated
    engine.define(Car, "unbook", lambda car: None)
    engine.define(Car, "refund", lambda car, amount: None)
    trip = engine.define(Car, "trip")

    @trip.step
    def book(car: Car, step: StepContext) -> None:
        step.compensate("unbook")

    @trip.step
    def pay(car: Car, step: StepContext) -> None:
        step.compensate("refund", 40)

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("breakdown")

    with app.app_context():
        car = Car()
        db.session.add(car)
        db.session.commit()
        with testing.handle_exceptions():
            action_id = engine.now(car, "trip").id
            testing.drain()
        plain_id = engine.now(car, "honk").id

    # When the API is asked for it
    answer = viewer_client.get(f"/api/actions/{action_id}")

    # Then it lists the refund first, then the unbooking, both succeeded, as documented
    assert answer.status_code == 200
    check(document, "get", f"/api/actions/{action_id}", answer)
    assert answer.json is not None
    listed = [(c["name"], c["sequence"], c["status"]) for c in answer.json["compensations"]]
    assert listed == [("refund", 1, "succeeded"), ("unbook", 2, "succeeded")]
    runners = {c["step_id"] for c in answer.json["compensations"]}
    assert {s["id"] for s in answer.json["steps"] if s["index"] == -1} == runners
    assert all(s["name"] is None for s in answer.json["steps"] if s["index"] == -1)
    assert answer.json["status"] == "failed"
    plain = viewer_client.get(f"/api/actions/{plain_id}")
    assert plain.json is not None and plain.json["compensations"] == []
