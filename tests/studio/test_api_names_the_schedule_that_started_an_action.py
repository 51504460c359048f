"""Given actions a schedule started (a tick, and a run triggered by hand) and one started
otherwise, GET /api/actions/{id} names the schedule and the tick that started it, as the
action page's "Started by schedule X, tick …" line does: the schedule's id and name, the
tick, when it was due (in UTC and in the schedule's time zone), whether it was triggered by
hand and by whom, with links to the schedule; ``started_by`` is null when no schedule
started it. The answers match the OpenAPI document, which describes the field.

Not a spec case: issue 12's API, with issue 11's schedules.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import engine
from engine import schedules, testing
from engine.models import Schedule
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, ticks
from tests.studio.support import StudioClient
from tests.studio.test_api_answers_match_the_openapi_document import check, document

__all__ = ["document"]  # the shared fixture: pytest finds it in this module


@pytest.fixture
def honker(car: Car) -> Schedule:
    testing.freeze(MONDAY)
    return honking(car, cron="*/15 * * * *", timezone="Europe/Paris")


def test_an_action_a_tick_started_names_its_schedule_and_tick(
    viewer_client: StudioClient, honker: Schedule, document: dict[str, Any]
) -> None:
    # Given the 09:00 tick fired, and an operator triggered the schedule by hand
    testing.travel(timedelta(seconds=31))
    run_clock()
    schedules.trigger("honker", by="olga")
    testing.drain()
    ticked, by_hand = actions_started()
    fired, manual = ticks()

    # When a client reads each action
    answer = viewer_client.get(f"/api/actions/{ticked.id}")
    asked_by_hand = viewer_client.get(f"/api/actions/{by_hand.id}")

    # Then the first names the schedule and the 09:00 tick, in UTC and in Paris
    assert answer.status_code == 200 and answer.json is not None
    assert answer.json["started_by"] == {
        "schedule_id": honker.id,
        "schedule": "honker",
        "tick_id": fired.id,
        "due_at": "2026-01-05T09:00:00Z",
        "local": "2026-01-05 10:00:00 CET",
        "timezone": "Europe/Paris",
        "manual": False,
        "by": None,
        "links": {"schedule": f"/api/schedules/{honker.id}", "page": f"/schedules/{honker.id}"},
    }
    # And the second says it was triggered by hand, by olga
    assert asked_by_hand.json is not None
    started = asked_by_hand.json["started_by"]
    assert (started["tick_id"], started["manual"], started["by"]) == (manual.id, True, "olga")
    # And both answers match the document
    for action, got in ((ticked, answer), (by_hand, asked_by_hand)):
        check(document, "get", f"/api/actions/{action.id}", got)


def test_an_action_started_otherwise_names_no_schedule(
    viewer_client: StudioClient, car: Car, document: dict[str, Any]
) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    engine.now(car, "honk")
    testing.drain()
    [action] = actions_started()

    answer = viewer_client.get(f"/api/actions/{action.id}")

    assert answer.json is not None and answer.json["started_by"] is None
    check(document, "get", f"/api/actions/{action.id}", answer)


def test_the_document_describes_started_by(document: dict[str, Any]) -> None:
    detail = document["components"]["schemas"]["ActionDetail"]
    assert "started_by" in detail["required"]
    field = detail["properties"]["started_by"]
    assert {"$ref": "#/components/schemas/StartedBy"} in field["anyOf"] and {"type": "null"} in field["anyOf"]
    started_by = document["components"]["schemas"]["StartedBy"]
    assert set(started_by["required"]) == {
        "schedule_id",
        "schedule",
        "tick_id",
        "due_at",
        "local",
        "timezone",
        "manual",
        "by",
        "links",
    }
