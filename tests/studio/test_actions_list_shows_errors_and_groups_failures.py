"""Given failed trees, the actions list shows the error class and message of each failure (a
failed root the error raised below it, and where); the failed view lists each tree once, by
its root, with every level one click away; and the failures can be grouped by error class:
how many, the newest, and a link to the list of each class.

Not a spec case: the studio is ours (issue 12, "Errors at a glance").
"""

from __future__ import annotations

import re

from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

import engine
from app.actions import filters as action_filters
from engine import commands, testing
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip
from tests.studio.support import HTMX, StudioClient


class PaintShopClosed(Exception):
    """The paint shop did not answer."""


def paint(car: Car, color: str) -> None:
    raise PaintShopClosed(f"closed for {color}")


def ids_on(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-id="(\d+)"', html)]


def row(html: str, action_id: int) -> str:
    found = re.search(rf'<tr data-id="{action_id}">(.*?)</tr>', html, re.S)
    assert found is not None, html
    return found.group(1)


def groups_on(html: str) -> list[tuple[str, int]]:
    return [(cls, int(n)) for cls, n in re.findall(r'<tr data-error="([^"]+)" data-count="(\d+)"', html)]


def given_three_paint_failures(car: Car) -> list[engine.Action]:
    engine.define(Car, "paint", paint)
    with testing.handle_exceptions():
        return [engine.now(car, "paint", color) for color in ("red", "green", "blue")]


def test_the_failed_view_lists_each_tree_once_by_its_root_with_the_error_below(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)

    page = viewer_client.get("/actions/?status=failed")

    # Three actions failed (breakdown, its leg, the trip): one tree, listed by its root
    assert ids_on(page.text) == [trip.trip.id]
    cells = row(page.text, trip.trip.id)
    assert 'data-error="builtins.RuntimeError"' in cells
    assert f'in <a class="plain" href="/actions/{trip.breakdown.id}">breakdown</a>: breakdown' in cells
    # The box says so, and every level is one click away
    assert 'id="filter-roots" name="roots" type="checkbox" value="1" checked' in page.text
    assert 'href="/actions/?status=failed&amp;roots=0" data-scope="every-level"' in page.text
    every = viewer_client.get("/actions/?status=failed&roots=0")
    assert ids_on(every.text) == [trip.breakdown.id, trip.leg.id, trip.trip.id]
    assert 'href="/actions/?status=failed" data-scope="roots"' in every.text
    # The leaf that raised shows its own error
    assert 'RuntimeError</a> <span class="error-message" title="breakdown">breakdown</span>' in row(
        every.text, trip.breakdown.id
    )


def test_the_roots_default_is_kept_out_of_the_url_and_of_the_filter() -> None:
    failed = action_filters.parse_filters({"status": "failed"})
    explicit = action_filters.parse_filters({"status": "failed", "roots": "1"})
    every = action_filters.parse_filters({"status": "failed", "roots": "0"})
    # Both boxes of the form: ticked ("1" then the hidden "0"), or not (the hidden "0" alone)
    ticked = action_filters.parse_filters(MultiDict([("status", "pending"), ("roots", "1"), ("roots", "0")]))
    unticked = action_filters.parse_filters(MultiDict([("status", "pending"), ("roots", "0")]))

    assert failed.where == explicit.where == commands.ActionFilter(status="failed", roots_only=True)
    assert failed.values == explicit.values == {"status": "failed"}
    assert every.where == commands.ActionFilter(status="failed")
    assert every.values == {"status": "failed", "roots": "0"}
    assert ticked.where.roots_only and ticked.values == {"status": "pending", "roots": "1"}
    assert not unticked.where.roots_only and unticked.values == {"status": "pending"}


def test_the_list_filters_by_error_class(viewer_client: StudioClient, session: Session, car: Car) -> None:
    trip = failing_trip(session, car)
    jobs = given_three_paint_failures(car)
    closed = f"{__name__}.PaintShopClosed"

    page = viewer_client.get(f"/actions/?status=failed&error={closed}")
    runtime = viewer_client.get("/actions/?status=failed&error=builtins.RuntimeError")

    # An error class lists the actions that raised it (not the roots above them)
    assert ids_on(page.text) == [j.id for j in reversed(jobs)]
    assert 'data-count="3" data-capped="false"' in page.text
    assert ids_on(runtime.text) == [trip.breakdown.id]
    # Each error class in the list links to its list
    assert f'href="/actions/?status=failed&amp;error={closed}"' in row(page.text, jobs[0].id)


def test_failures_are_grouped_by_error_class_the_newest_first(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    jobs = given_three_paint_failures(car)
    closed = f"{__name__}.PaintShopClosed"

    page = viewer_client.get("/actions/errors")
    fragment = viewer_client.get("/actions/errors", headers=HTMX)

    assert page.status_code == 200
    assert "<h1>Failures by error</h1>" in page.text
    assert fragment.text.lstrip().startswith('<section id="error-groups"')
    # Only the actions that raised count (not the trip and leg that failed with them)
    assert groups_on(page.text) == [(closed, 3), ("builtins.RuntimeError", 1)]
    group = re.search(rf'<tr data-error="{closed}".*?</tr>', page.text, re.S)
    assert group is not None
    cells = group.group(0)
    # The newest, its message, which action names raised it, and the link to its list
    assert f'<a href="/actions/{jobs[-1].id}">#{jobs[-1].id}</a>' in cells
    assert "closed for blue" in cells
    assert ">paint<" in cells
    assert f'href="/actions/?status=failed&amp;error={closed}"' in cells
    assert f'href="/actions/{trip.breakdown.id}"' in page.text


def test_a_retried_failure_leaves_its_group(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    jobs = given_three_paint_failures(car)
    engine.define(Car, "paint", lambda car, color: None)
    commands.retry(jobs[0].id, by="olga")
    testing.drain()

    page = operator_client.get("/actions/errors")

    assert groups_on(page.text) == [(f"{__name__}.PaintShopClosed", 2)]


def test_without_failures_the_groups_say_so(viewer_client: StudioClient, car: Car) -> None:
    engine.now(car, "drive", 5)

    page = viewer_client.get("/actions/errors")

    assert groups_on(page.text) == []
    assert "No failed action raised an error." in page.text
