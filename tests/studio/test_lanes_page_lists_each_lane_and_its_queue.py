"""Given lanes (queues (performances)) with current and queued actions, the lanes page lists
each concurrency key with its performing action and its pending queue, a page at a time in
key order, filtered by key prefix; it refreshes itself while it shows lanes and stops once
they are idle. A lane's own page shows its queue and the latest actions of its key, and
stops refreshing when the lane is idle.

Not a spec case: the studio is ours (issue 4, "Lanes (performances)" and "Live updates").
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy.orm import Session

import engine
from app.lanes import queries as queries_lanes
from engine import testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient

POLLING = 'hx-trigger="every 3s, stepwise:visible"'


def order_paint(car: Car, color: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def paint_by_colour() -> None:
    engine.define(
        Car, "paint", order_paint, outbound=True, concurrency_key=lambda car, color: f"paint/{color}"
    )


def lanes_on(html: str) -> list[str]:
    return re.findall(r'data-lane="([^"]+)"', html)


def test_each_lane_shows_its_performing_action_and_its_queue(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a red paint performing in its lane, and a second red paint queued behind it
    paint_by_colour()
    first = engine.now(car, "paint", "red")
    queued = engine.now(car, "paint", "red")
    assert (first.status, queued.status) == ("performing", "pending")

    # When a viewer opens the lanes page
    page = viewer_client.get("/lanes/")

    # Then the lane shows its performing action and the queued one, each linked
    assert page.status_code == 200
    assert "<h1>Lanes</h1>" in page.text
    assert lanes_on(page.text) == ["paint/red"]
    row = page.text.split('data-lane="paint/red"', 1)[1].split("</tr>", 1)[0]
    assert f'<a href="/actions/{first.id}">paint #{first.id}</a>' in row
    assert '<ol class="queue">' in row
    assert f'<a href="/actions/{queued.id}">paint #{queued.id}</a>' in row
    assert "1 lane with a current action" in page.text


def test_a_newer_queued_action_replaces_the_older_one_in_the_queue(session: Session, car: Car) -> None:
    # Given a lane with a queued paint, when a newer one is queued it supersedes it
    paint_by_colour()
    engine.now(car, "paint", "red")
    older = engine.now(car, "paint", "red")
    newer = engine.now(car, "paint", "red")

    # Then the queue holds the newer one only, and the older one is among the key's latest actions
    lane = queries_lanes.lane(session, "paint/red")
    assert lane is not None
    assert [a.id for a in lane.queue] == [newer.id]
    recent = {a.id: a.status for a in queries_lanes.recent(session, "paint/red")}
    assert recent[older.id] == "superseded"


def test_lanes_come_a_page_at_a_time_in_key_order_and_filter_by_prefix(
    viewer_client: StudioClient, session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three lanes, and pages of two
    paint_by_colour()
    for color in ("red", "blue", "green"):
        engine.now(car, "paint", color)
    monkeypatch.setattr(queries_lanes, "PAGE", 2)

    # When a viewer reads the first page, then follows its link to the next
    first = viewer_client.get("/lanes/?sort=key&single=1")
    assert lanes_on(first.text) == ["paint/blue", "paint/green"]
    assert 'rel="next" href="/lanes/?sort=key&amp;single=1&amp;after=paint/green"' in first.text
    second = viewer_client.get("/lanes/?sort=key&single=1&after=paint/green")

    # Then the second page holds the last lane, and links back to the first
    assert lanes_on(second.text) == ["paint/red"]
    assert 'rel="next"' not in second.text
    assert 'href="/lanes/?sort=key&amp;single=1">« First lanes' in second.text

    # And a prefix keeps the lanes whose key starts with it
    assert lanes_on(viewer_client.get("/lanes/?sort=key&single=1&q=paint/g").text) == ["paint/green"]
    assert lanes_on(viewer_client.get("/lanes/?sort=key&single=1&q=paint/").text) == [
        "paint/blue",
        "paint/green",
    ]
    assert (
        "No lane has a current action under “paint/x”" in viewer_client.get("/lanes/?single=1&q=paint/x").text
    )


def test_the_list_refreshes_itself_while_it_shows_lanes_and_stops_when_they_are_idle(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a lane held by an outbound paint
    paint_by_colour()
    engine.now(car, "paint", "red")

    # When htmx asks for the list, it is the fragment alone, polling while the tab is visible
    fragment = viewer_client.get("/lanes/?q=paint/&single=1", headers=HTMX)
    assert fragment.text.lstrip().startswith('<section id="lanes"')
    assert "<html" not in fragment.text
    assert 'hx-get="/lanes/?q=paint/&amp;single=1"' in fragment.text
    assert POLLING in fragment.text
    # And the polled fragment counts nothing
    assert "with a current action" not in fragment.text

    # When the paint completes and the lane is idle
    assert engine.complete(car, "paint")
    idle = viewer_client.get("/lanes/?q=paint/&single=1", headers=HTMX)

    # Then the last swap carries no polling attributes: the refresh stops
    assert "hx-get" not in idle.text
    assert "No lane has a current action" in idle.text


def test_a_lanes_page_polls_while_held_and_shows_the_lane_moving(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a lane with a performing paint and a queued one
    paint_by_colour()
    first = engine.now(car, "paint", "red")
    second = engine.now(car, "paint", "red")

    # When a viewer opens the lane's page
    page = viewer_client.get("/lanes/lane?key=paint/red")

    # Then it names the performing action, the reason, and the queue; and it polls itself
    assert page.status_code == 200
    assert 'data-lane-state="held"' in page.text
    assert f'<a href="/actions/{first.id}">paint #{first.id}</a>' in page.text
    assert "waiting for an outbound completion since" in page.text
    assert f'<a href="/actions/{second.id}">paint #{second.id}</a>' in page.text
    assert 'hx-get="/lanes/lane?key=paint/red"' in page.text

    # When the first paint completes, the second performs: the lane moved
    assert engine.complete(car, "paint")
    moved = viewer_client.get("/lanes/lane?key=paint/red", headers=HTMX)
    assert moved.text.lstrip().startswith('<section id="lane"')
    performing = moved.text.split("<h2>Queue</h2>", 1)[0]
    assert f"paint #{second.id}" in performing
    assert "Nothing is queued" in moved.text

    # When the second completes, the lane is idle and the fragment stops polling
    assert engine.complete(car, "paint")
    idle = viewer_client.get("/lanes/lane?key=paint/red", headers=HTMX)
    assert 'data-lane-state="idle"' in idle.text
    assert "hx-get" not in idle.text
    # And its latest actions show both paints succeeded
    assert idle.text.count("status-succeeded") == 2


def test_an_unknown_lane_is_idle(viewer_client: StudioClient) -> None:
    page = viewer_client.get("/lanes/lane?key=nothing/here")
    assert page.status_code == 200
    assert "No action holds this lane: it is idle." in page.text
    assert "No action has used this key." in page.text


def test_the_lanes_pages_need_a_signed_in_user(client: StudioClient) -> None:
    assert client.get("/lanes/").status_code == 302
    assert client.get("/lanes/lane?key=paint/red").status_code == 302


def test_the_queue_of_a_lane_is_keyset_paginated(session: Session, car: Car) -> None:
    # Given a lane whose queue holds several pending actions (operators retried cancelled ones)
    paint_by_colour()
    first = engine.now(car, "paint", "red")
    queued = []
    for _ in range(3):
        action = engine.now(car, "paint", "red")
        assert engine.commands.cancel(action.id, by="olga")
        queued.append(action)
    for action in queued:
        assert engine.commands.retry(action.id, by="olga")
    lane = queries_lanes.lane(session, "paint/red")
    assert lane is not None and lane.current is not None and lane.current.id == first.id

    # When the queue is read two at a time
    page, after = queries_lanes.queue(session, lane.id, first.id, limit=2)
    rest, end = queries_lanes.queue(session, lane.id, first.id, after=after, limit=2)

    # Then the pages follow each other, oldest first
    assert [a.id for a in page + rest] == [a.id for a in queued]
    assert end is None
    testing.drain()
