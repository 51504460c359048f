"""Given lanes (performances) with current and queued actions, GET /api/lanes lists each with
its current action, whether it waits for an outbound completion and how many actions are
queued behind it, newest lane first, in keyset pages.

Not a spec case: the studio is ours (issue 4, "Webhooks and API").
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from engine import StepContext
from engine.models import Action
from tests.domain import Car
from tests.studio.support import StudioClient


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def given_two_lanes(car: Car) -> tuple[Action, Action]:
    """The paint shop's lane: a paint job waiting for the shop and one queued behind it (green
    superseded blue, which no longer counts); and a parking lane whose action waits an hour
    (performing, not outbound)."""
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/paint-shop")
    park = engine.define(Car, "park", concurrency_key="Car/parking")

    @park.step
    def wait(car: Car, step: StepContext) -> None:
        step.wait(timedelta(hours=1))

    painting = engine.now(car, "paint", "red")
    engine.now(car, "paint", "blue")
    engine.now(car, "paint", "green")
    parking = engine.now(car, "park")
    return painting, parking


def test_each_lane_shows_its_current_action_and_its_queue(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    painting, parking = given_two_lanes(car)

    page = viewer_client.get("/api/lanes").json
    assert page is not None

    parking_lane, paint_lane = page["lanes"]  # newest lane first
    assert paint_lane["concurrency_key"] == "Car/paint-shop"
    assert paint_lane["current"]["id"] == painting.id
    assert paint_lane["current"]["status"] == "performing"
    assert paint_lane["current"]["outbound"] is True
    assert (paint_lane["waiting_for_completion"], paint_lane["queued"]) == (True, 1)
    assert paint_lane["links"] == {
        "current": f"/api/actions/{painting.id}",
        "actions": "/api/actions?concurrency_key=Car/paint-shop",
    }
    assert parking_lane["concurrency_key"] == "Car/parking"
    assert parking_lane["current"]["id"] == parking.id
    assert (parking_lane["waiting_for_completion"], parking_lane["queued"]) == (False, 0)
    assert page["next"] is None


def test_lanes_filter_by_key_and_by_waiting_for_a_completion(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_two_lanes(car)

    def keys(query: str) -> list[str]:
        page = viewer_client.get(f"/api/lanes?{query}").json
        assert page is not None
        return [lane["concurrency_key"] for lane in page["lanes"]]

    assert keys("outbound=true") == ["Car/paint-shop"]
    assert keys("outbound=false") == ["Car/parking"]
    assert keys("concurrency_key=Car/parking") == ["Car/parking"]
    assert keys("concurrency_key=Car/nowhere") == []


def test_lanes_are_paged_by_keyset(viewer_client: StudioClient, session: Session, car: Car) -> None:
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, color: f"paint/{color}"
    )
    for color in ("red", "blue", "green", "white", "black"):
        engine.now(car, "paint", color)

    first = viewer_client.get("/api/lanes?limit=2").json
    assert first is not None
    second = viewer_client.get(first["next"]).json
    assert second is not None
    third = viewer_client.get(second["next"]).json
    assert third is not None

    seen = [lane["concurrency_key"] for page in (first, second, third) for lane in page["lanes"]]
    assert seen == ["paint/black", "paint/white", "paint/green", "paint/blue", "paint/red"]
    assert third["next"] is None


def test_a_bad_lane_parameter_is_a_400_that_names_it(viewer_client: StudioClient) -> None:
    for query, parameter in (
        ("outbound=perhaps", "outbound"),
        ("limit=500", "limit"),
        ("status=x", "status"),
    ):
        answer = viewer_client.get(f"/api/lanes?{query}")
        assert answer.status_code == 400
        assert answer.json["parameter"] == parameter  # type: ignore[index]
