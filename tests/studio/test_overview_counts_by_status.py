"""Given actions in several statuses, the overview counts the live ones (pending, performing, compensating,
waiting for a person) with counts that stop at a cap so that the page (and its polling
fragment) stays cheap on a big table, and beside them those completed in a chosen window
(1 h, 24 h, 7 d), with a success rate.

Not a spec case: the studio is ours (issue 4, "Overview").
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy.orm import Session

import engine
from app import queries
from engine import testing
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def given_actions_in_four_statuses(session: Session, car: Car) -> None:
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/maintenance")
    engine.define(Car, "breakdown")
    engine.now(car, "drive", 5)  # succeeded
    engine.now(car, "drive", 6)  # succeeded
    engine.now(car, "paint", "red")  # performing, waiting outside
    engine.now(car, "paint", "blue")  # pending behind it
    with testing.handle_exceptions():
        engine.now(car, "breakdown")  # failed


def counts_on(html: str) -> dict[str, int]:
    return {s: int(n) for s, n in re.findall(r'data-status="(\w+)" data-count="(\d+)"', html)}


def test_the_overview_counts_actions_by_status(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_actions_in_four_statuses(session, car)

    page = viewer_client.get("/")

    assert page.status_code == 200
    assert counts_on(viewer_client.get("/", headers=HTMX).text) == {
        "pending": 1,
        "performing": 1,
        "compensating": 0,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 0,
        "superseded": 0,
        "timed_out": 0,
    }
    # Each count links to the actions list filtered by its status
    assert 'href="/actions/?status=failed"' in page.text
    # The outbound paint job performing waits for a person: a live tile of its own
    assert 'data-live="waiting" data-count="1"' in page.text
    assert 'href="/actions/?status=performing&amp;outbound=1"' in page.text
    # 2 of the 3 that ran to an end succeeded
    assert 'data-success-rate="0.6667"' in page.text


def test_completed_counts_are_those_of_the_chosen_window_and_live_counts_are_not(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given actions completed two hours ago, and one drive just now
    testing.freeze()
    given_actions_in_four_statuses(session, car)
    testing.travel(timedelta(hours=2))
    engine.now(car, "drive", 7)

    hour = counts_on(viewer_client.get("/overview/counts", headers=HTMX).text)
    day = counts_on(viewer_client.get("/?window=24h", headers=HTMX).text)
    week = viewer_client.get("/overview/counts?window=7d", headers=HTMX)

    # The last hour saw one success; the last day all four completions
    assert (hour["succeeded"], hour["failed"]) == (1, 0)
    assert (day["succeeded"], day["failed"]) == (3, 1)
    # Live counts do not depend on the window
    assert hour["pending"] == day["pending"] == 1
    assert hour["performing"] == day["performing"] == 1
    # The window is chosen by links, and the fragment polls with its window
    assert 'href="/?window=24h"' in week.text
    assert 'hx-get="/overview/counts?window=7d"' in week.text
    assert "Completed in the last 7 days" in week.text


def test_the_counts_fragment_polls_itself_only_while_the_tab_is_visible(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    given_actions_in_four_statuses(session, car)

    fragment = viewer_client.get("/", headers=HTMX)

    assert fragment.text.lstrip().startswith('<section id="overview-counts"')
    assert "<html" not in fragment.text
    assert 'hx-get="/overview/counts"' in fragment.text
    assert "hx-trigger=\"every 5s, stepwise:visible\"" in fragment.text
    assert counts_on(viewer_client.get("/overview/counts", headers=HTMX).text)["succeeded"] == 2


def test_counts_stop_at_the_cap(session: Session, car: Car) -> None:
    given_actions_in_four_statuses(session, car)

    counts = queries.status_counts(session, cap=1)

    assert counts["succeeded"] == queries.Count(1, capped=True)
    assert str(counts["succeeded"]) == "1+"
    assert counts["failed"] == queries.Count(1, capped=False)
    assert str(counts["failed"]) == "1"
