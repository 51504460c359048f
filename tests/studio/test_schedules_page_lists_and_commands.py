"""Given schedules, the Schedules page lists each with its rule in words, its time zone, its
next three ticks, its last runs (links to their actions, with their statuses) and its paused
state; operators pause, resume, trigger, create and delete them there (audited with their
name), viewers only look; bad input is a 400 naming the field, and nothing is made.

Not a spec case: issue 11, "Studio"."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import schedules, testing
from engine.models import AuditEntry, Schedule
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row
from tests.studio.support import StudioClient, forms


@pytest.fixture
def honker(car: Car) -> Schedule:
    testing.freeze(MONDAY)
    made = honking(car, cron="*/15 * * * *", timezone="Europe/Paris")
    testing.travel(timedelta(seconds=31))  # 09:00:01: the 09:00 tick fires
    run_clock()
    return made


def test_the_page_shows_rule_zone_next_ticks_and_last_runs(
    operator_client: StudioClient, honker: Schedule
) -> None:
    page = operator_client.get("/schedules/")
    assert page.status_code == 200
    html = page.text
    assert 'aria-current="page">Schedules</a>' in html
    assert "honker" in html and "Every 15th minute of every hour (Europe/Paris)" in html
    assert "2026-01-05 09:15:00 UTC" in html and "2026-01-05 10:15:00 CET" in html
    assert "2026-01-05 09:45:00 UTC" in html  # the next three ticks
    [action] = actions_started()
    assert f'href="/actions/{action.id}"' in html
    assert "status-succeeded" in html
    # The schedule's own page
    own = operator_client.get(f"/schedules/{honker.id}")
    assert own.status_code == 200 and "Last 1 runs" in own.text and f"action #{action.id}" in own.text
    assert operator_client.get("/schedules/999").status_code == 404


def test_operators_pause_resume_trigger_and_delete(operator_client: StudioClient, honker: Schedule) -> None:
    paused = operator_client.command(f"/schedules/{honker.id}/pause")
    assert paused.status_code == 200 and "Paused honker" in paused.text
    assert "paused: no tick until resumed" in paused.text
    assert schedule_row().paused_by == "olga"
    assert operator_client.command(f"/schedules/{honker.id}/pause").status_code == 409

    resumed = operator_client.command(f"/schedules/{honker.id}/resume")
    assert "the ticks due while it was paused are not run" in resumed.text

    triggered = operator_client.command(f"/schedules/{honker.id}/trigger")
    assert "Triggered honker now" in triggered.text
    testing.drain()
    assert len(actions_started()) == 2

    deleted = operator_client.command(f"/schedules/{honker.id}/delete", htmx=False)
    assert deleted.status_code == 303
    assert operator_client.command(f"/schedules/{honker.id}/delete").status_code == 404
    with engine.new_session() as s:
        trail = s.execute(
            select(AuditEntry.command, AuditEntry.by).where(AuditEntry.by == "olga").order_by(AuditEntry.id)
        ).all()
    assert [c for c, _ in trail][1:] == [
        "schedule_pause",
        "schedule_pause",
        "schedule_resume",
        "schedule_trigger",
        "schedule_delete",
    ]


def good_form(car: Car, **changes: str) -> dict[str, str]:
    return {
        "name": "nightly",
        "cron": "0 2 * * *",
        "every": "",
        "timezone": "Europe/Paris",
        "actor_type": "Car",
        "actor_id": str(car.id),
        "action": "honk",
        "arguments": "[]",
        "missed": "run_once",
        "overlap": "skip",
        **changes,
    }


def test_an_operator_creates_a_schedule_from_the_form(operator_client: StudioClient, car: Car) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    page = operator_client.get("/schedules/")
    [create] = [f for f in forms(page.text) if f.action == "/schedules/"]
    assert {"name", "cron", "every", "timezone", "actor_type", "actor_id", "action", "arguments"} <= set(
        create.inputs
    ) | {"actor_type", "missed", "overlap"}

    made = operator_client.command("/schedules/", good_form(car))

    assert made.status_code == 200, made.text
    assert "Created schedule nightly: At 02:00 every day (Europe/Paris)" in made.text
    row = schedule_row("nightly")
    assert (row.source, row.missed, row.timezone) == ("operator", "run_once", "Europe/Paris")
    with engine.new_session() as s:
        entry = s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_create")).one()
        assert entry.by == "olga"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"cron": "0 25 * * *"}, "The cron (cron): '0 25 * * *' is not a cron expression"),
        ({"cron": "", "every": "often"}, "The every (every): 'often' is not a whole number of seconds"),
        ({"cron": ""}, "The cron (cron): give a schedule either a cron expression or an interval"),
        ({"timezone": "Mars/Olympus"}, "The timezone (timezone): unknown time zone 'Mars/Olympus'"),
        ({"actor_type": "Boat"}, "The actor type (actor_type): there is no actor type 'Boat'"),
        ({"action": "fly"}, "The action (action): Car has no registered action 'fly'"),
        ({"actor_id": "404"}, "The actor id (actor_id): there is no Car with id '404'"),
        ({"arguments": "{"}, "The arguments (arguments): they are not valid JSON"),
        ({"arguments": "{}"}, "The arguments (arguments): they must be a JSON array"),
        ({"missed": "later"}, "The missed (missed): 'later' is not one of skip, run_once"),
        ({"name": ""}, "The name (name): a schedule needs a name"),
        ({"name": "a\x00b"}, "The field 'name' holds a NUL character"),  # the studio's own check
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    operator_client: StudioClient, car: Car, changes: dict[str, str], says: str
) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    answer = operator_client.command("/schedules/", good_form(car, **changes))
    assert answer.status_code == 400
    assert says in answer.text.replace("&#39;", "'")
    assert "Nothing was created." in answer.text or "NUL" in says
    with engine.new_session() as s:
        assert s.scalar(select(func.count()).select_from(Schedule)) == 0


def test_a_taken_name_is_refused(operator_client: StudioClient, honker: Schedule, car: Car) -> None:
    answer = operator_client.command("/schedules/", good_form(car, name="honker"))
    assert answer.status_code == 400
    assert "a schedule named 'honker' exists already" in answer.text.replace("&#39;", "'")


def test_a_viewer_sees_the_page_and_is_refused_the_commands(
    viewer_client: StudioClient, honker: Schedule, car: Car
) -> None:
    page = viewer_client.get("/schedules/")
    assert page.status_code == 200 and "honker" in page.text
    assert not [f for f in forms(page.text) if f.method == "post" and "/schedules" in f.action]
    for path in (f"/schedules/{honker.id}/pause", f"/schedules/{honker.id}/trigger", "/schedules/"):
        assert viewer_client.command(path, good_form(car)).status_code == 403
    assert not schedule_row().paused


def test_a_command_without_the_csrf_token_is_refused(operator_client: StudioClient, honker: Schedule) -> None:
    answer = operator_client.post(f"/schedules/{honker.id}/pause", data={})
    assert answer.status_code == 400
    assert not schedule_row().paused


def test_the_list_polls_itself_while_there_are_schedules(
    operator_client: StudioClient, honker: Schedule, session: Session
) -> None:
    fragment = operator_client.get("/schedules/", headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<section id="schedules"')
    assert 'hx-trigger="every 5s' in fragment.text
    schedules.delete("honker", by="olga")
    empty = operator_client.get("/schedules/", headers={"HX-Request": "true"})
    assert "hx-trigger" not in empty.text and "No schedule yet" in empty.text


def test_the_audit_page_lists_schedule_commands(operator_client: StudioClient, honker: Schedule) -> None:
    operator_client.command(f"/schedules/{honker.id}/pause", {"reason": "holidays"})
    page = operator_client.get("/audit/?command=schedule_pause")
    assert page.status_code == 200
    assert "schedule pause" in page.text and "holidays" in page.text
    assert '<a href="/schedules/#schedules">honker</a>' in page.text


def test_each_schedule_shows_its_five_newest_runs_and_its_page_fifty(
    operator_client: StudioClient, car: Car
) -> None:
    from engine.models import Tick

    testing.freeze(MONDAY)
    first, second = honking(car, name="first"), honking(car, name="second")
    with engine.new_session() as s:
        for schedule in (first, second):
            for n in range(60):
                at = MONDAY - timedelta(minutes=n)
                s.add(Tick(schedule_id=schedule.id, due_at=at, fired_at=at, outcome="skipped", note=f"n{n}"))
        s.commit()
    page = operator_client.get("/schedules/").text
    for schedule in ("first", "second"):
        row = page.split(f'data-schedule="{schedule}"', 1)[1].split("</tr>", 1)[0]
        assert row.count('class="run run-skipped"') == 5
    own = operator_client.get(f"/schedules/{first.id}").text
    assert own.count('class="run run-skipped"') == 50 and "Last 50 runs" in own


def test_the_schedules_own_page_pauses_and_sends_the_browser_back_there(
    operator_client: StudioClient, honker: Schedule
) -> None:
    page = operator_client.get(f"/schedules/{honker.id}").text
    actions = {f.action for f in forms(page) if f.method == "post"}
    assert {f"/schedules/{honker.id}/trigger", f"/schedules/{honker.id}/pause"} <= actions
    answer = operator_client.command(
        f"/schedules/{honker.id}/pause", {"next": f"/schedules/{honker.id}"}, htmx=False
    )
    assert answer.status_code == 303 and answer.headers["Location"].endswith(f"/schedules/{honker.id}")
    assert "Paused honker" in operator_client.get(answer.headers["Location"]).text
    # Never an open redirect
    away = operator_client.command(
        f"/schedules/{honker.id}/resume", {"next": "https://evil.example"}, htmx=False
    )
    assert "evil" not in away.headers["Location"]
