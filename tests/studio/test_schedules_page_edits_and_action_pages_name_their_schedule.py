"""Given a schedule, an operator edits it from its own page (a form prefilled with its rule,
time zone, arguments and policies): it changes in place, a new rule ticks from now, the
audit keeps the fields before and after with the operator's name; a bad field is a 400 that
names it, and a schedule declared in code offers no form and refuses the edit (409), since
the code is where it changes. An action a schedule started says so at the top of its page,
with the tick (or who triggered it by hand) and a link to the schedule.

Not a spec case: issue 11, "Studio"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

import engine
from engine import schedules, testing
from engine.models import AuditEntry, Schedule
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row
from tests.studio.support import StudioClient, forms


@pytest.fixture
def honker(car: Car) -> Schedule:
    testing.freeze(MONDAY)
    return honking(car, cron="*/15 * * * *", timezone="Europe/Paris")


def edit_form(**changes: str) -> dict[str, str]:
    return {
        "cron": "*/15 * * * *",
        "every": "",
        "timezone": "Europe/Paris",
        "arguments": "[]",
        "missed": "skip",
        "overlap": "skip",
        **changes,
    }


def test_the_schedules_page_offers_a_prefilled_edit_form(
    operator_client: StudioClient, honker: Schedule
) -> None:
    page = operator_client.get(f"/schedules/{honker.id}").text
    [form] = [f for f in forms(page) if f.action == f"/schedules/{honker.id}/edit"]
    assert {"cron", "every", "timezone", "arguments", "missed", "overlap", "reason"} <= set(form.inputs)
    assert 'value="*/15 * * * *"' in page and 'value="Europe/Paris"' in page


def test_an_operator_edits_the_rule_and_it_ticks_from_now(
    operator_client: StudioClient, honker: Schedule
) -> None:
    testing.travel(timedelta(minutes=20))  # 09:19:30: 09:00 and 09:15 are overdue

    answer = operator_client.command(
        f"/schedules/{honker.id}/edit",
        edit_form(cron="", every="3600", arguments='["twice"]', overlap="allow", reason="hourly is enough"),
        htmx=False,
    )

    assert answer.status_code == 303 and answer.headers["Location"].endswith(f"/schedules/{honker.id}")
    shown = operator_client.get(answer.headers["Location"]).text
    assert "Edited honker (cron, every seconds, arguments, overlap): Every hour" in shown
    row = schedule_row()
    assert (row.cron, row.every_seconds, row.arguments, row.overlap) == (None, 3600, ["twice"], "allow")
    assert row.next_fire_at == MONDAY.replace(hour=10, minute=0, second=0)
    assert run_clock().fired == 0  # no back-fire
    with engine.new_session() as s:
        entry = s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_edit")).one()
    assert (entry.by, entry.reason) == ("olga", "hourly is enough")
    assert entry.data["before"]["cron"] == "*/15 * * * *" and entry.data["after"]["every_seconds"] == 3600
    # The same form again changes nothing, and says so
    again = operator_client.command(
        f"/schedules/{honker.id}/edit",
        edit_form(cron="", every="3600", arguments='["twice"]', overlap="allow"),
    )
    assert again.status_code == 409 and "nothing was changed" in again.text


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"cron": "0 25 * * *"}, "The cron (cron): '0 25 * * *' is not a cron expression"),
        ({"every": "60"}, "The cron (cron): give a schedule either a cron expression or an interval"),
        ({"cron": "", "every": "often"}, "The every (every): 'often' is not a whole number of seconds"),
        ({"timezone": "Mars/Olympus"}, "The timezone (timezone): unknown time zone 'Mars/Olympus'"),
        ({"arguments": "{}"}, "The arguments (arguments): they must be a JSON array"),
        ({"overlap": "sometimes"}, "The overlap (overlap): 'sometimes' is not one of skip, allow"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    operator_client: StudioClient, honker: Schedule, changes: dict[str, str], says: str
) -> None:
    answer = operator_client.command(f"/schedules/{honker.id}/edit", edit_form(**changes))
    assert answer.status_code == 400
    assert says in answer.text.replace("&#39;", "'") and "Nothing was changed." in answer.text
    assert schedule_row().cron == "*/15 * * * *"


def test_viewers_and_unknown_schedules_are_refused(
    viewer_client: StudioClient, operator_client: StudioClient, honker: Schedule
) -> None:
    page = viewer_client.get(f"/schedules/{honker.id}").text
    assert not [f for f in forms(page) if f.method == "post" and "/schedules" in f.action]
    assert (
        viewer_client.command(f"/schedules/{honker.id}/edit", edit_form(cron="0 2 * * *")).status_code == 403
    )
    assert operator_client.command("/schedules/999/edit", edit_form()).status_code == 404
    assert schedule_row().cron == "*/15 * * * *"


def test_a_schedule_declared_in_code_is_edited_in_the_code(operator_client: StudioClient, car: Car) -> None:
    schedules.forget_declared()
    engine.define(Car, "honk", lambda car: car.honk())
    engine.schedule("declared", every=300, actor=car, action="honk")
    schedules.sync()
    try:
        row = schedule_row("declared")
        page = operator_client.get(f"/schedules/{row.id}").text
        assert "Declared in code with" in page and "change it there" in page
        assert not [f for f in forms(page) if f.action.endswith("/edit")]

        answer = operator_client.command(f"/schedules/{row.id}/edit", edit_form(cron="", every="60"))
        assert answer.status_code == 409 and "declared in code" in answer.text
        assert schedule_row("declared").every_seconds == 300
    finally:
        schedules.forget_declared()


def test_an_action_a_schedule_started_names_its_schedule_and_tick(
    operator_client: StudioClient, honker: Schedule
) -> None:
    # Given the 09:00 tick fired, and an operator triggered it by hand
    testing.travel(timedelta(seconds=31))
    run_clock()
    schedules.trigger("honker", by="olga")
    testing.drain()
    ticked, by_hand = actions_started()

    page = operator_client.get(f"/actions/{ticked.id}").text
    assert 'class="started-by' in page
    assert "Started by schedule" in page and f'<a href="/schedules/{honker.id}">honker</a>' in page
    assert "tick" in page and "2026-01-05 09:00:00 UTC" in page and "2026-01-05 10:00:00 CET" in page

    manual = operator_client.get(f"/actions/{by_hand.id}").text
    assert "triggered by hand by olga at" in manual and f'href="/schedules/{honker.id}"' in manual
    # The live fragment (polled) does not repeat it
    fragment = operator_client.get(f"/actions/{ticked.id}", headers={"HX-Request": "true"}).text
    assert "Started by schedule" not in fragment


def test_an_action_started_otherwise_names_no_schedule(operator_client: StudioClient, car: Car) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    engine.now(car, "honk")
    testing.drain()
    [action] = actions_started()
    assert "Started by schedule" not in operator_client.get(f"/actions/{action.id}").text
