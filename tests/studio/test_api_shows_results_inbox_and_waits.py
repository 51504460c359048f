"""Given a release that decided its way, waits for a signal and has one signal kept in its
inbox, GET /api/actions/{id} shows each step by name with its visit, result and decision,
every signal sent to it (consumed or kept), and the wait still open with its deadline; the
answer is valid against the OpenAPI document, and a finished action shows its result."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import engine
from engine import testing
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.test_api_answers_match_the_openapi_document import check, document

__all__ = ["document"]


def test_the_action_shows_its_steps_results_inbox_and_open_waits(
    viewer_client: StudioClient, session: Session, car: Car, document: dict[str, Any]
) -> None:
    # Given a release that checks, skips review, then waits for the go-ahead until a deadline
    release = engine.define(Car, "release")

    @release.step
    def check_it(car: Car, step: engine.StepContext) -> str:
        step.go_to("ship")
        return "small change"

    @release.step
    def review(car: Car, step: engine.StepContext) -> None:
        pass

    @release.step
    def ship(car: Car, step: engine.StepContext) -> None:
        step.wait_for("go", timeout=3600)

    @release.step
    def done(car: Car, step: engine.StepContext) -> dict[str, str]:
        return {"shipped": step.signal.name if step.signal else "never"}

    action = engine.now(car, "release")
    engine.signal(action, "noise", {"x": 1}, by="ci", note="not awaited")

    # When the API is asked for it
    answer = viewer_client.get(f"/api/actions/{action.id}")

    # Then it shows the steps by name, the inbox and the open wait, as the document says
    assert answer.status_code == 200
    check(document, "get", f"/api/actions/{action.id}", answer)
    body = answer.get_json()
    steps = [(s["name"], s["visit"], s["result"], s["decision"]) for s in body["steps"]]
    assert steps == [("check_it", 1, "small change", {"go_to": "ship"}), ("ship", 1, None, None)]
    assert [(s["name"], s["payload"], s["sent_by"], s["consumed_at"]) for s in body["inbox"]] == [
        ("noise", {"x": 1}, "ci", None)
    ]
    (wait,) = body["waits"]
    assert wait["signals"] == ["go"]
    assert wait["until"] is not None

    # And once it is signalled, its result
    testing.send_signal(action, "go")
    finished = viewer_client.get(f"/api/actions/{action.id}").get_json()
    assert finished["status"] == "succeeded"
    assert finished["result"] == {"shipped": "go"}
    assert finished["waits"] == []
    check(document, "get", f"/api/actions/{action.id}", viewer_client.get(f"/api/actions/{action.id}"))
