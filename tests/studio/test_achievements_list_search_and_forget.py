"""Given achievements (the checksum of the last success under a checksum key), the
achievements page lists them in key order and searches their keys (prefix or contains);
each shows its checksum, the action that granted it and the invocations it skipped since.
An operator may forget one (a POST with the CSRF token), after which the next invocation
under its key runs; a viewer may not, nor a form without its token.

Not a spec case: the studio is ours (issue 4, "Achievements" and "Commands"). The skipped
invocations are found by the key the engine stores on an invocation an achievement skips
(``Invocation.checksum_key``, indexed where set).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from app.achievements import queries as queries_achievements
from app.security import csrf
from engine import StepContext, testing
from engine.models import Achievement, Action, AuditEntry, Invocation
from tests.domain import Car
from tests.studio.support import StudioClient, forms

T = datetime(2025, 1, 2, 3, 4, 5)


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    testing.freeze(T)
    yield


def visits_by_place() -> None:
    """``visit`` moves the car; visiting the same place again is skipped."""
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, place: place)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("visit", "Paris")


def achievement_under(session: Session, key: str) -> Achievement | None:
    session.expire_all()
    return session.scalars(select(Achievement).where(Achievement.checksum_key == key)).one_or_none()


def audit_entries(session: Session) -> list[AuditEntry]:
    session.expire_all()
    return list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def given_a_visit_to_paris_that_skipped_two_invocations(session: Session, car: Car) -> tuple[Action, Action]:
    visits_by_place()
    visit = engine.now(car, "visit", "Paris")  # granted
    testing.travel(timedelta(minutes=1))
    assert engine.now(car, "visit", "Paris").id is None  # skipped, invoked from outside a tree
    testing.travel(timedelta(minutes=1))
    trip = engine.now(car, "trip")  # its step's visit is skipped
    testing.drain()
    return visit, trip


def test_the_list_shows_each_achievement_with_its_grant_and_what_it_skipped(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a visit to Paris that was granted an achievement, then skipped twice
    visit, trip = given_a_visit_to_paris_that_skipped_two_invocations(session, car)
    key = f"Car/{car.id}/visit"

    # When a viewer opens the achievements page
    page = viewer_client.get("/achievements/")

    # Then the achievement shows its short checksum, the visit that granted it, and both skips
    assert page.status_code == 200
    row = page.text.split(f'data-key="{key}"', 1)[1].split("</tr>", 1)[0]
    checksum = engine.checksum("Paris")
    assert checksum is not None
    assert f'<code class="checksum" title="{checksum}">{checksum[:8]}</code>' in row
    assert f'<a href="/actions/{visit.id}">visit #{visit.id}</a>' in row
    assert f'from <a href="/actions/{trip.id}">trip #{trip.id}</a>' in row
    assert "invoked from outside a tree" in row
    assert row.count("<li>") == 2
    assert "1 in all" in page.text
    # And the skips are the invocations the engine marked with the key, newest first
    (listed,) = queries_achievements.search(session).rows
    skipped = session.scalars(select(Invocation).where(Invocation.outcome == "skipped")).all()
    assert [s.invocation.id for s in listed.skips] == sorted((i.id for i in skipped), reverse=True)
    assert {i.checksum_key for i in skipped} == {key}
    # And a viewer is offered no forget form
    assert not [f for f in forms(page.text) if f.action == "/achievements/forget"]


def test_skips_before_the_achievement_was_granted_again_are_not_its_own(session: Session, car: Car) -> None:
    # Given a visit to Paris that skipped once, then a visit to Rome and a new one to Paris
    visits_by_place()
    engine.now(car, "visit", "Paris")
    engine.now(car, "visit", "Paris")  # skipped by the first achievement
    testing.travel(timedelta(minutes=1))
    engine.now(car, "visit", "Rome")  # erases it, and is granted its own
    engine.now(car, "visit", "Paris")  # erases Rome's; Paris is granted anew

    # Then the new achievement has skipped nothing yet
    (row,) = queries_achievements.search(session).rows
    assert row.skips == []


def test_keys_are_searched_by_prefix_or_by_what_they_contain(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given achievements under three keys
    engine.define(
        Car,
        "visit",
        Car.change_location,
        checksum=lambda car, place: place,
        checksum_key=lambda car, place: place,
    )
    for place in ("Paris", "Parma", "Rome"):
        engine.now(car, "visit", place)

    def keys(url: str) -> list[str]:
        return re.findall(r'<tr id="achievement-\d+" data-key="([^"]+)"', viewer_client.get(url).text)

    # Then a prefix finds the keys that start with it, and contains finds any part, in any case
    assert keys("/achievements/") == ["Paris", "Parma", "Rome"]
    assert keys("/achievements/?q=Par") == ["Paris", "Parma"]
    assert keys("/achievements/?q=par") == []
    assert keys("/achievements/?q=R&mode=contains") == ["Paris", "Parma", "Rome"]
    assert keys("/achievements/?q=M&mode=contains") == ["Parma", "Rome"]
    assert (
        "No achievement whose key contains “zzz”"
        in viewer_client.get("/achievements/?q=zzz&mode=contains").text
    )

    # And a contains search reads a window of keys per page, carrying on where it stopped
    first = queries_achievements.search(session, q="m", mode="contains", scan=2)
    assert [r.key for r in first.rows] == ["Parma"]
    assert first.next_after == first.searched_to == "Parma"
    rest = queries_achievements.search(session, q="m", mode="contains", scan=2, after=first.next_after)
    assert [r.key for r in rest.rows] == ["Rome"]
    assert rest.next_after is None

    # And pages follow each other in key order
    page = queries_achievements.search(session, limit=2)
    assert [r.key for r in page.rows] == ["Paris", "Parma"]
    assert [r.key for r in queries_achievements.search(session, after=page.next_after).rows] == ["Rome"]


def test_an_operator_forgets_an_achievement_and_the_next_invocation_runs(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a visit to Paris granted an achievement, which the page offers to forget
    visits_by_place()
    engine.now(car, "visit", "Paris")
    key = f"Car/{car.id}/visit"
    page = operator_client.get("/achievements/")
    (form,) = [f for f in forms(page.text) if f.action == "/achievements/forget"]
    assert form.inputs["checksum_key"] == key
    assert form.inputs[csrf.FIELD] == operator_client.csrf_token()

    # When the operator forgets it, through htmx, saying why
    answer = operator_client.command(
        "/achievements/forget", {"checksum_key": key, "row_id": form.inputs["row_id"], "reason": "repaint"}
    )

    # Then the row says so, the achievement is gone, and one audit entry records who and why
    assert answer.status_code == 200
    assert answer.text.lstrip().startswith(f'<tr id="{form.inputs["row_id"]}" class="forgotten"')
    assert f"Forgot the achievement under {key}: the next invocation under this key runs." in answer.text
    assert achievement_under(session, key) is None
    (entry,) = audit_entries(session)
    assert (entry.command, entry.target, entry.by, entry.cause, entry.reason, entry.result) == (
        "forget",
        f"achievement:{key}",
        "olga",
        "operator",
        "repaint",
        "forgotten",
    )
    # And the next visit to Paris runs instead of being skipped
    again = engine.now(car, "visit", "Paris")
    assert again.id is not None and again.status == "succeeded"


def test_forgetting_without_javascript_redirects_back_with_a_message(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    visits_by_place()
    engine.now(car, "visit", "Paris")
    key = f"Car/{car.id}/visit"

    answer = operator_client.command("/achievements/forget", {"checksum_key": key}, htmx=False)

    assert answer.status_code == 303
    assert answer.headers["Location"] == "/achievements/"
    assert "Forgot the achievement under" in operator_client.get("/achievements/").text
    assert achievement_under(session, key) is None


def test_forgetting_what_is_not_there_changes_nothing_and_says_so(
    operator_client: StudioClient, session: Session
) -> None:
    answer = operator_client.command("/achievements/forget", {"checksum_key": "Car/9/visit"})

    assert answer.status_code == 409
    assert "No achievement under Car/9/visit" in answer.text
    (entry,) = audit_entries(session)
    assert entry.result == "not_found"
    assert operator_client.command("/achievements/forget", {}).status_code == 400


def test_a_viewer_may_not_forget_and_nothing_changes(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    visits_by_place()
    engine.now(car, "visit", "Paris")
    key = f"Car/{car.id}/visit"

    answer = viewer_client.command("/achievements/forget", {"checksum_key": key})

    assert answer.status_code == 403
    assert "Only an operator may do this" in answer.text
    assert achievement_under(session, key) is not None
    assert audit_entries(session) == []


def test_forgetting_without_the_csrf_token_is_refused_and_nothing_changes(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    visits_by_place()
    engine.now(car, "visit", "Paris")
    key = f"Car/{car.id}/visit"

    answer = operator_client.post("/achievements/forget", data={"checksum_key": key})

    assert answer.status_code == 400
    assert "nothing was changed" in answer.text
    assert achievement_under(session, key) is not None
    assert audit_entries(session) == []


def test_an_achievements_page_lists_what_it_skipped_a_page_at_a_time(
    operator_client: StudioClient, session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an achievement that skipped two invocations, and pages of one
    visit, trip = given_a_visit_to_paris_that_skipped_two_invocations(session, car)
    key = f"Car/{car.id}/visit"
    monkeypatch.setattr(queries_achievements, "PAGE", 1)

    # When the operator opens its page
    page = operator_client.get(f"/achievements/key?key={key}")

    # Then it shows the grant, the newest skip, a link to older ones, and the forget form
    assert page.status_code == 200
    assert f'<a href="/actions/{visit.id}">visit #{visit.id}</a>' in page.text
    assert f'from <a href="/actions/{trip.id}">trip #{trip.id}</a>' in page.text
    assert 'rel="next"' in page.text
    (form,) = [f for f in forms(page.text) if f.action == "/achievements/forget"]
    assert form.inputs["next"] == "/achievements/"
    newest = session.scalar(select(func.max(Invocation.id)).where(Invocation.outcome == "skipped"))
    older = operator_client.get(f"/achievements/key?key={key}&before={newest}")
    assert "invoked from outside a tree" in older.text
    assert f"trip #{trip.id}" not in older.text.split('id="skipped"', 1)[1]

    # And a key without an achievement says its next invocation runs
    gone = operator_client.get("/achievements/key?key=Car/9/visit")
    assert "No achievement under this key: the next invocation under it runs." in gone.text
