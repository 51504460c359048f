"""Given actions of several names, actors, lanes and statuses, the actions list at /actions/
filters them by status, action name, actor type and id, lane (concurrency key), roots only,
creation time and text in the arguments. The filter lives in the URL, so it can be shared;
the form works without JavaScript (a GET) and, with htmx, swaps only the list. The list
shows exactly what engine.commands.ActionFilter selects (what a bulk command acts on), and
counts stop at a cap.

Not a spec case: the studio is ours (issue 4, "Actions list").
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

import engine
from app import queries
from engine import StepContext, commands, testing
from engine.models import Action
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient, forms


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def ids_on(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-id="(\d+)"', html)]


def count_on(html: str) -> tuple[int, bool]:
    found = re.search(r'data-count="(\d+)" data-capped="(true|false)"', html)
    assert found is not None, html
    return int(found.group(1)), found.group(2) == "true"


def ids_of(session: Session, where: commands.ActionFilter) -> list[int]:
    session.expire_all()
    return sorted(session.scalars(where.select_ids()).all(), reverse=True)


@pytest.fixture
def fleet(session: Session, car: Car) -> dict[str, Action]:
    """Two cars: drives that succeeded, an outbound paint job performing with another
    queued behind it in the lane "Car/maintenance", a breakdown that failed, and a trip
    whose step drove the car (a child action, not a root). The trip and the second car's
    drive were created an hour after the rest."""
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/maintenance")
    engine.define(Car, "breakdown")
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("drive", 7)

    other = Car()
    session.add(other)
    session.commit()
    made = {
        "drive5": engine.now(car, "drive", 5),
        "paint_red": engine.now(car, "paint", "red"),
        "paint_blue": engine.now(car, "paint", "blue"),
    }
    with testing.handle_exceptions():
        made["breakdown"] = engine.now(car, "breakdown")
    testing.travel(timedelta(hours=1))
    made["trip"] = engine.now(car, "trip")
    testing.drain()
    made["other_drive"] = engine.now(other, "drive", 9)
    session.expire_all()
    made["child_drive"] = session.query(Action).filter(Action.root_id == made["trip"].id).one()
    return made


def test_the_list_shows_every_action_newest_first_with_links_to_each(
    viewer_client: StudioClient, fleet: dict[str, Action], session: Session
) -> None:
    page = viewer_client.get("/actions/")

    assert page.status_code == 200
    every = ids_of(session, commands.ActionFilter())
    assert ids_on(page.text) == every
    assert count_on(page.text) == (len(every), False)
    # Each row links to the action's page, and shows its name, actor, status and lane
    paint = fleet["paint_red"]
    row = re.search(rf'<tr data-id="{paint.id}">(.*?)</tr>', page.text, re.S)
    assert row is not None
    assert f'href="/actions/{paint.id}"' in row.group(1)
    assert "paint" in row.group(1) and f"Car/{paint.actor_id}" in row.group(1)
    assert 'class="badge status-performing"' in row.group(1)
    assert "Car/maintenance" in row.group(1)
    assert "outbound" in row.group(1)
    assert "[&#34;red&#34;]" in row.group(1) or '["red"]' in row.group(1)
    # A child links to its tree's root
    child = fleet["child_drive"]
    assert f'href="/actions/{fleet["trip"].id}" title="The root of its tree"' in page.text
    assert child.id in ids_on(page.text)


@pytest.mark.parametrize(
    ("query", "where"),
    [
        ("status=failed", commands.ActionFilter(status="failed")),
        ("status=performing", commands.ActionFilter(status="performing")),
        ("name=drive", commands.ActionFilter(name="drive")),
        ("actor_type=Car&actor_id=1", commands.ActionFilter(actor_type="Car", actor_id="1")),
        ("concurrency_key=Car/maintenance", commands.ActionFilter(concurrency_key="Car/maintenance")),
        ("roots=1", commands.ActionFilter(roots_only=True)),
        ("q=blue", commands.ActionFilter(search="blue")),
        ("name=drive&roots=1", commands.ActionFilter(name="drive", roots_only=True)),
    ],
    ids=["status", "performing", "name", "actor", "lane", "roots", "search", "name-and-roots"],
)
def test_each_filter_lists_exactly_what_the_action_filter_selects(
    viewer_client: StudioClient,
    fleet: dict[str, Action],
    session: Session,
    query: str,
    where: commands.ActionFilter,
) -> None:
    page = viewer_client.get(f"/actions/?{query}")

    assert page.status_code == 200
    expected = ids_of(session, where)
    assert expected, "the fleet has actions for every filter"
    assert expected != ids_of(session, commands.ActionFilter()), "each filter leaves some out"
    assert ids_on(page.text) == expected
    if "q=" in query:  # a search's count is asked for after the list (see below)
        page = viewer_client.get(f"/actions/count?{query}", headers=HTMX)
    assert count_on(page.text) == (len(expected), False)


def test_a_search_lists_first_and_counts_after(
    viewer_client: StudioClient, fleet: dict[str, Action], session: Session
) -> None:
    """A search in the arguments has no index, so counting its matches may read every
    action: the list does not wait for it. With htmx the count loads itself after the list;
    without JavaScript it is a link."""
    page = viewer_client.get("/actions/?q=blue")

    assert ids_on(page.text) == [fleet["paint_blue"].id]
    assert "data-count" not in page.text
    link = re.search(r'<a id="actions-count" href="([^"]+)" hx-get="([^"]+)" hx-trigger="load"', page.text)
    assert link is not None
    assert link.group(1) == link.group(2) == "/actions/count?q=blue"
    fragment = viewer_client.get("/actions/count?q=blue", headers=HTMX)
    assert fragment.text.startswith('<span id="actions-count">')
    assert count_on(fragment.text) == (1, False)
    whole = viewer_client.get("/actions/count?q=blue")
    assert "<html" in whole.text and count_on(whole.text) == (1, False)
    assert 'href="/actions/?q=blue"' in whole.text
    assert viewer_client.get("/actions/count?status=lost").status_code == 400


def test_the_filters_select_what_they_say(
    viewer_client: StudioClient, fleet: dict[str, Action], session: Session
) -> None:
    def listed(query: str) -> set[int]:
        return set(ids_on(viewer_client.get(f"/actions/?{query}").text))

    assert listed("status=failed") == {fleet["breakdown"].id}
    assert listed("status=pending") == {fleet["paint_blue"].id}
    assert listed("q=blue") == {fleet["paint_blue"].id}
    assert listed("concurrency_key=Car/maintenance") == {fleet["paint_red"].id, fleet["paint_blue"].id}
    assert listed(f"actor_type=Car&actor_id={fleet['other_drive'].actor_id}") == {fleet["other_drive"].id}
    assert fleet["child_drive"].id in listed("name=drive")
    assert fleet["child_drive"].id not in listed("name=drive&roots=1")


def test_the_time_range_keeps_actions_created_from_the_first_time_and_before_the_second(
    viewer_client: StudioClient, fleet: dict[str, Action], session: Session
) -> None:
    # Given the trip created an hour after the paint jobs
    # (on a whole minute: the form then shows it without seconds, as a datetime-local
    # input does; one run in sixty used to land there by chance)
    cut = (fleet["trip"].created_at - timedelta(minutes=30)).replace(second=0, microsecond=0)
    stamp = cut.strftime("%Y-%m-%dT%H:%M:%S")

    later = viewer_client.get(f"/actions/?created_after={stamp}")
    earlier = viewer_client.get(f"/actions/?created_before={stamp}")

    late = {fleet["trip"].id, fleet["child_drive"].id, fleet["other_drive"].id}
    assert set(ids_on(later.text)) == late
    assert set(ids_on(earlier.text)) == set(ids_of(session, commands.ActionFilter())) - late
    # The form shows the filter as it was given, as a datetime-local value (no seconds on a
    # whole minute)
    (form,) = [f for f in forms(later.text) if f.method == "get" and f.action != "/actions/jump"]
    assert form.inputs["created_after"] == cut.strftime("%Y-%m-%dT%H:%M")
    with_seconds = (cut + timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%S")
    (form,) = [
        f
        for f in forms(viewer_client.get(f"/actions/?created_after={with_seconds}").text)
        if f.method == "get" and f.action != "/actions/jump"
    ]
    assert form.inputs["created_after"] == with_seconds
    # A date alone is the start of that day
    day = viewer_client.get(f"/actions/?created_after={cut:%Y-%m-%d}")
    assert len(ids_on(day.text)) >= len(late)


def test_the_filter_lives_in_the_url_and_the_form_shows_it(
    viewer_client: StudioClient, fleet: dict[str, Action]
) -> None:
    page = viewer_client.get("/actions/?status=performing&name=paint&roots=1&q=red")

    (form,) = [f for f in forms(page.text) if f.method == "get" and f.action != "/actions/jump"]
    assert form.action == "/actions/"
    assert form.inputs["name"] == "paint"
    assert form.inputs["q"] == "red"
    assert '<option value="performing" selected>' in page.text
    assert 'id="filter-roots" name="roots" type="checkbox" value="1" checked' in page.text
    # Every control of the form has a label
    for control in re.findall(r'<(?:input|select)[^>]* id="([^"]+)"', page.text):
        assert f'<label for="{control}">' in page.text, control


def test_a_plain_form_submission_is_redirected_to_the_short_shareable_url(
    viewer_client: StudioClient, fleet: dict[str, Action]
) -> None:
    # When the form is sent without JavaScript, with its empty fields
    answer = viewer_client.get(
        "/actions/?status=failed&name=&actor_type=&actor_id=&concurrency_key=&created_after=&q="
    )

    # Then the browser is sent to the URL of the filter alone, which lists the failed action
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/actions/?status=failed"
    assert ids_on(viewer_client.get(answer.headers["Location"]).text) == [fleet["breakdown"].id]


def test_with_htmx_the_form_swaps_only_the_list_and_pushes_the_short_url(
    viewer_client: StudioClient, fleet: dict[str, Action]
) -> None:
    page = viewer_client.get("/actions/")
    (form,) = [f for f in forms(page.text) if f.method == "get" and f.action != "/actions/jump"]
    assert form.attributes["hx-get"] == "/actions/"
    assert form.attributes["hx-target"] == "#actions-list"
    assert form.attributes["hx-push-url"] == "true"

    fragment = viewer_client.get("/actions/?status=failed&name=&q=", headers=HTMX)

    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section id="actions-list"')
    assert "<html" not in fragment.text
    assert ids_on(fragment.text) == [fleet["breakdown"].id]
    assert fragment.headers["HX-Push-Url"] == "/actions/?status=failed"


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("status=lost", "status", "Unknown status"),
        ("created_after=yesterday", "created_after", "Not a date and time"),
        ("name=" + "x" * 300, "name", "At most 255 characters"),
    ],
)
def test_an_invalid_filter_lists_nothing_and_says_what_is_wrong(
    operator_client: StudioClient, fleet: dict[str, Action], query: str, field: str, message: str
) -> None:
    page = operator_client.get(f"/actions/?{query}")
    fragment = operator_client.get(f"/actions/?{query}", headers=HTMX)

    for answer in (page, fragment):
        assert answer.status_code == 400
        assert message in answer.text
        assert ids_on(answer.text) == []
        # No bulk command is offered on an invalid filter (it would act on something else)
        assert "/actions/bulk/confirm" not in answer.text
    assert f'id="error-{field}"' in page.text
    assert 'aria-invalid="true"' in page.text


@pytest.mark.parametrize("value", ["abc", "-3", "99999999999999999999"])
def test_a_page_id_that_is_not_an_action_id_is_refused(viewer_client: StudioClient, value: str) -> None:
    for name in ("before", "after"):
        answer = viewer_client.get(f"/actions/?{name}={value}")
        assert answer.status_code == 400
        assert "is not an action id" in answer.text


def test_counts_stop_at_the_cap_and_say_so(
    viewer_client: StudioClient, fleet: dict[str, Action], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries, "CAP", 3)

    page = viewer_client.get("/actions/")
    failed = viewer_client.get("/actions/?status=failed")

    assert count_on(page.text) == (3, True)
    assert "3+" in page.text
    assert "(counts stop at 3)" in page.text
    # Every row of the page is listed all the same
    assert len(ids_on(page.text)) == len(fleet)
    assert count_on(failed.text) == (1, False)
    assert "counts stop at" not in failed.text


def test_an_empty_result_says_so(viewer_client: StudioClient, fleet: dict[str, Action]) -> None:
    page = viewer_client.get("/actions/?name=fly")

    assert page.status_code == 200
    assert ids_on(page.text) == []
    assert count_on(page.text) == (0, False)
    assert "No action matches this filter." in page.text
    assert 'rel="next"' not in page.text


def test_the_form_suggests_the_registered_action_names_and_actor_types(
    viewer_client: StudioClient, fleet: dict[str, Action]
) -> None:
    page = viewer_client.get("/actions/")

    for name in ("paint", "breakdown", "trip"):
        assert f'<option value="{name}">' in page.text
    assert '<datalist id="actor-types"><option value="Car">' in page.text


def test_the_rows_link_their_actor_and_lane_to_the_list_filtered_by_them(
    viewer_client: StudioClient, fleet: dict[str, Action]
) -> None:
    page = viewer_client.get("/actions/?status=pending")

    assert f'href="/actions/?actor_type=Car&amp;actor_id={fleet["paint_blue"].actor_id}"' in page.text
    assert 'href="/actions/?concurrency_key=Car/maintenance"' in page.text
