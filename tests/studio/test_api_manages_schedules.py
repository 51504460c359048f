"""Given schedules, the JSON API lists and shows them (rule in words, time zone, policies,
paused or not, the next ticks, the last runs with the actions they started), and an operator
creates, edits, pauses, resumes, triggers and deletes them there, through engine.schedules
as the Schedules page and the CLI do, each audited with the operator's name. The commands
need an operator's session and its CSRF token (sent in X-CSRF-Token; every API answer to a
signed-in session carries it); bad input is a 400 naming the field and changes nothing; an
unknown schedule is a 404; a schedule declared in code is edited in the code (409). Every
answer matches the OpenAPI document.

Not a spec case: issue 11, "Schedules" and "Webhooks and API"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from werkzeug.test import TestResponse

import engine
from engine import schedules, testing
from engine.models import AuditEntry, Schedule
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row, ticks
from tests.studio.support import StudioClient
from tests.studio.test_api_answers_match_the_openapi_document import check


@pytest.fixture
def document(viewer_client: StudioClient) -> dict[str, Any]:
    answer = viewer_client.get("/api/openapi.json")
    assert answer.status_code == 200 and answer.json is not None
    return answer.json


@pytest.fixture
def honker(car: Car) -> Schedule:
    testing.freeze(MONDAY)
    made = honking(car, cron="*/15 * * * *", timezone="Europe/Paris", missed="run_once")
    testing.travel(timedelta(seconds=31))  # 09:00:01: the 09:00 tick fires
    run_clock()
    return made


class Api:
    """An operator's calls, checked against the OpenAPI document."""

    def __init__(self, client: StudioClient, document: dict[str, Any]) -> None:
        self.client, self.document = client, document

    def __call__(self, method: str, url: str, body: Any = None, *, token: bool = True) -> TestResponse:
        headers = {"X-CSRF-Token": self.client.csrf_token()} if token else {}
        answer = self.client.open(url, method=method.upper(), json=body, headers=headers)
        check(self.document, method, url, answer)
        return answer


@pytest.fixture
def api(operator_client: StudioClient, document: dict[str, Any]) -> Api:
    return Api(operator_client, document)


def new_schedule(car: Car, **changes: Any) -> dict[str, Any]:
    return {
        "name": "nightly",
        "cron": "0 2 * * *",
        "timezone": "Europe/Paris",
        "actor_type": "Car",
        "actor_id": car.id,
        "action": "honk",
        "arguments": ["loud"],
        "missed": "run_once",
        **changes,
    }


def audit_trail() -> list[tuple[str, str | None, str | None]]:
    with engine.new_session() as s:
        entries = s.scalars(
            select(AuditEntry).where(AuditEntry.command != "schedule_create").order_by(AuditEntry.id)
        )
        return [(e.command, e.by, e.result) for e in entries]


def test_the_list_and_a_schedule_show_rule_zone_policies_next_ticks_and_last_runs(
    api: Api, honker: Schedule
) -> None:
    listed = api("get", "/api/schedules")

    assert listed.status_code == 200 and listed.json is not None
    [shown] = listed.json["schedules"]
    assert listed.json["truncated"] is False
    assert shown["name"] == "honker" and shown["rule"] == "Every 15th minute of every hour (Europe/Paris)"
    assert (shown["cron"], shown["every_seconds"], shown["timezone"]) == (
        "*/15 * * * *",
        None,
        "Europe/Paris",
    )
    assert (shown["missed"], shown["overlap"], shown["source"], shown["paused"]) == (
        "run_once",
        "skip",
        "operator",
        False,
    )
    assert shown["next_fire_at"] == "2026-01-05T09:15:00Z"
    assert [t["at"] for t in shown["upcoming"]] == [
        "2026-01-05T09:15:00Z",
        "2026-01-05T09:30:00Z",
        "2026-01-05T09:45:00Z",
    ]
    assert shown["upcoming"][0]["local"] == "2026-01-05 10:15:00 CET"
    [action] = actions_started()
    [run] = shown["runs"]
    assert (run["outcome"], run["due_at"], run["action_id"], run["action_status"]) == (
        "fired",
        "2026-01-05T09:00:00Z",
        action.id,
        "succeeded",
    )
    assert shown["links"] == {"self": f"/api/schedules/{honker.id}", "page": f"/schedules/{honker.id}"}

    one = api("get", f"/api/schedules/{honker.id}")
    assert one.status_code == 200 and one.json == shown
    missing = api("get", "/api/schedules/999")
    assert missing.status_code == 404 and missing.json == {
        "error": "not_found",
        "message": "there is no schedule 999",
    }
    assert api("get", "/api/schedules?colour=red").status_code == 400


def test_an_operator_creates_a_schedule(api: Api, car: Car) -> None:
    engine.define(Car, "honk", lambda car: car.honk())
    testing.freeze(MONDAY)

    made = api("post", "/api/schedules", new_schedule(car, reason="reports"))

    assert made.status_code == 201, made.text
    assert made.json is not None
    assert made.headers["Location"] == f"/api/schedules/{made.json['id']}"
    assert made.json["rule"] == "At 02:00 every day (Europe/Paris)"
    assert made.json["next_fire_at"] == "2026-01-06T01:00:00Z" and made.json["arguments"] == ["loud"]
    row = schedule_row("nightly")
    assert (row.source, row.actor_id, row.missed, row.overlap) == (
        "operator",
        str(car.id),
        "run_once",
        "skip",
    )
    with engine.new_session() as s:
        entry = s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_create")).one()
    assert (entry.by, entry.reason, entry.target) == ("olga", "reports", "schedule:nightly")


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"cron": "0 25 * * *"}, "cron", "is not a cron expression"),
        ({"cron": None}, "cron", "either a cron expression or an interval"),
        ({"every": 60}, "cron", "not both"),
        ({"cron": None, "every": "60"}, "every", "must be an integer"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
        ({"missed": "later"}, "missed", "must be one of skip, run_once, not 'later'"),
        ({"arguments": {"a": 1}}, "arguments", "must be an array"),
        ({"actor_type": "Boat"}, "actor_type", "there is no actor type 'Boat'"),
        ({"action": "fly"}, "action", "Car has no registered action 'fly'"),
        ({"actor_id": "404"}, "actor_id", "there is no Car with id '404'"),
        ({"name": " "}, "name", "must not be empty"),
        ({"name": "a\x00b"}, "name", "must not contain NUL characters"),
        ({"colour": "red"}, "colour", "is not a field here"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_made(
    api: Api, car: Car, changes: dict[str, Any], field: str, says: str
) -> None:
    engine.define(Car, "honk", lambda car: car.honk())

    answer = api("post", "/api/schedules", new_schedule(car, **changes))

    assert answer.status_code == 400, answer.text
    assert answer.json is not None
    assert (answer.json["error"], answer.json["field"]) == ("invalid_field", field)
    assert says in answer.json["message"] and answer.json["message"].startswith(field)
    with engine.new_session() as s:
        assert s.scalar(select(func.count()).select_from(Schedule)) == 0


def test_a_body_that_is_not_a_json_object_and_a_taken_name_are_refused(
    api: Api, operator_client: StudioClient, honker: Schedule, car: Car
) -> None:
    headers = {"X-CSRF-Token": operator_client.csrf_token(), "Content-Type": "application/json"}
    broken = operator_client.post("/api/schedules", data=b"{", headers=headers)
    assert broken.status_code == 400 and broken.json is not None and broken.json["error"] == "malformed_json"
    listed = api("post", "/api/schedules", ["honker"])
    assert listed.status_code == 400 and listed.json is not None
    assert listed.json["message"] == "the body must be a JSON object, not an array"
    huge = api("patch", f"/api/schedules/{honker.id}", {"arguments": ["x" * 70_000]})
    assert huge.status_code == 413 and huge.json is not None and huge.json["error"] == "too_large"
    taken = api("post", "/api/schedules", new_schedule(car, name="honker"))
    assert taken.status_code == 400 and taken.json is not None and taken.json["field"] == "name"
    assert "a schedule named 'honker' exists already" in taken.json["message"]


def test_an_operator_edits_a_schedule_in_place(api: Api, honker: Schedule) -> None:
    testing.travel(timedelta(minutes=20))  # 09:20:01: 09:15 is overdue

    edited = api(
        "patch", f"/api/schedules/{honker.id}", {"every": 3600, "arguments": ["twice"], "reason": "calmer"}
    )

    assert edited.status_code == 200, edited.text
    assert edited.json is not None and edited.json["changed"] is True
    assert edited.json["changes"] == {
        "cron": {"before": "*/15 * * * *", "after": None},
        "every_seconds": {"before": None, "after": 3600},
        "arguments": {"before": [], "after": ["twice"]},
    }
    shown = edited.json["schedule"]
    assert (shown["rule"], shown["next_fire_at"], shown["timezone"]) == (
        "Every hour",
        "2026-01-05T10:00:00Z",
        "Europe/Paris",
    )
    assert run_clock().fired == 0  # the overdue 09:15 never runs
    assert len(ticks()) == 1
    # The same edit again changes nothing, and says so
    again = api("patch", f"/api/schedules/{honker.id}", {"every": 3600})
    assert again.status_code == 200 and again.json is not None
    assert (again.json["changed"], again.json["changes"]) == (False, {})
    # Bad input names the field; an unknown schedule is a 404
    bad = api("patch", f"/api/schedules/{honker.id}", {"cron": "0 25 * * *"})
    assert bad.status_code == 400 and bad.json is not None and bad.json["field"] == "cron"
    both = api("patch", f"/api/schedules/{honker.id}", {"cron": "0 2 * * *", "every": 60})
    assert both.status_code == 400 and both.json is not None and "not both" in both.json["message"]
    policy = api("patch", f"/api/schedules/{honker.id}", {"overlap": "sometimes"})
    assert policy.status_code == 400 and policy.json is not None and policy.json["field"] == "overlap"
    assert api("patch", "/api/schedules/999", {"every": 60}).status_code == 404
    assert schedule_row().every_seconds == 3600
    assert [(c, by, r) for c, by, r in audit_trail() if c == "schedule_edit"] == [
        ("schedule_edit", "olga", "edited"),
        ("schedule_edit", "olga", "unchanged"),
    ]


def test_a_schedule_declared_in_code_is_edited_in_the_code(api: Api, car: Car) -> None:
    schedules.forget_declared()
    engine.define(Car, "honk", lambda car: car.honk())
    engine.schedule("declared", every=300, actor=car, action="honk")
    schedules.sync()
    try:
        row = schedule_row("declared")
        answer = api("patch", f"/api/schedules/{row.id}", {"every": 60})
        assert answer.status_code == 409 and answer.json is not None
        assert answer.json["error"] == "declared_in_code" and "change it there" in answer.json["message"]
        assert schedule_row("declared").every_seconds == 300
        shown = api("get", f"/api/schedules/{row.id}").json
        assert shown is not None and shown["source"] == "code"
    finally:
        schedules.forget_declared()


def test_an_operator_pauses_resumes_triggers_and_deletes(api: Api, honker: Schedule) -> None:
    url = f"/api/schedules/{honker.id}"

    paused = api("post", f"{url}/pause", {"reason": "holidays"})
    assert paused.status_code == 200 and paused.json is not None
    assert paused.json["changed"] is True and paused.json["schedule"]["paused"] is True
    assert paused.json["schedule"]["paused_by"] == "olga" and paused.json["schedule"]["upcoming"] == []
    again = api("post", f"{url}/pause")  # no body at all
    assert again.status_code == 200 and again.json is not None and again.json["changed"] is False

    resumed = api("post", f"{url}/resume", {})
    assert resumed.json is not None and resumed.json["changed"] is True
    assert resumed.json["schedule"]["paused"] is False

    triggered = api("post", f"{url}/trigger", {"reason": "rerun"})
    assert triggered.status_code == 200 and triggered.json is not None
    run = triggered.json["run"]
    assert (run["manual"], run["by"], run["outcome"]) == (True, "olga", "fired") and run["invocation_id"]
    testing.drain()
    assert len(actions_started()) == 2

    deleted = api("delete", url, {"reason": "retired"})
    assert deleted.status_code == 200 and deleted.json == {"deleted": "honker"}
    for method, path in (("post", f"{url}/pause"), ("post", f"{url}/trigger"), ("delete", url)):
        gone = api(method, path)
        assert (
            gone.status_code == 404
            and gone.json is not None
            and "nothing was changed" in gone.json["message"]
        )
    assert audit_trail() == [
        ("schedule_pause", "olga", "paused"),
        ("schedule_pause", "olga", "already_paused"),
        ("schedule_resume", "olga", "resumed"),
        ("schedule_trigger", "olga", "triggered"),
        ("schedule_delete", "olga", "deleted"),
    ]


def test_commands_need_an_operator_a_session_and_its_csrf_token(
    viewer_client: StudioClient,
    operator_client: StudioClient,
    client: StudioClient,
    document: dict[str, Any],
    honker: Schedule,
    car: Car,
) -> None:
    # Every answer to a signed-in session carries its CSRF token
    listed = viewer_client.get("/api/schedules")
    assert listed.headers["X-CSRF-Token"] == viewer_client.csrf_token()
    # A viewer reads, and is refused every command (403)
    viewer = Api(viewer_client, document)
    url = f"/api/schedules/{honker.id}"
    for method, path, body in (
        ("post", "/api/schedules", new_schedule(car)),
        ("patch", url, {"every": 60}),
        ("post", f"{url}/pause", {}),
        ("post", f"{url}/trigger", {}),
        ("delete", url, {}),
    ):
        refused = viewer(method, path, body)
        assert refused.status_code == 403, (method, path)
        assert refused.json is not None and "Only an operator may do this" in refused.json["message"]
    # Without the token, nothing changes (400); without a session, 401
    operator = Api(operator_client, document)
    assert operator("post", f"{url}/pause", {}, token=False).status_code == 400
    anonymous = client.post(f"{url}/pause", json={})
    assert anonymous.status_code in (400, 401)
    unsigned = client.get("/api/schedules")
    assert unsigned.status_code == 401 and "X-CSRF-Token" not in unsigned.headers
    check(document, "get", "/api/schedules", unsigned)
    assert not schedule_row().paused
