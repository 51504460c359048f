"""Given actions in the engine's tables, the read-only JSON API lists them with the actions
list's filters in keyset pages, shows one with its steps, parents and errors (tracebacks
included), and nests its tree. A viewer may read it; a visitor who has not signed in gets
401 JSON, never a redirect; a bad query parameter is a 400 that names it.

Not a spec case: the studio is ours (issue 4, "Webhooks and API").
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.api import queries as queries_api
from app.api import views as api
from engine import StepContext, testing
from engine.models import Action
from tests.domain import Car
from tests.studio.support import StudioClient


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def given_a_failed_trip(session: Session, car: Car) -> dict[str, Action]:
    """trip -> step 1 -> leg -> breakdown (raises); trip -> step 1 -> drive 3 (succeeds)."""
    engine.define(Car, "breakdown")
    leg = engine.define(Car, "leg")

    @leg.step
    def go(car: Car, step: StepContext) -> None:
        step.do("breakdown")

    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: StepContext, destination: str) -> None:
        step.do("leg")
        step.do("drive", 3)

    with testing.handle_exceptions():
        engine.now(car, "trip", "Lyon")
        testing.drain()
    session.expire_all()
    return {a.name: a for a in session.scalars(select(Action))}


def ids(page: Any) -> list[int]:
    return [a["id"] for a in page["actions"]]


# --- access --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["/api/actions", "/api/actions/1", "/api/actions/1/tree", "/api/lanes", "/api/openapi.json"]
)
def test_a_visitor_who_has_not_signed_in_gets_401_json_not_a_redirect(client: StudioClient, url: str) -> None:
    # Even a browser, which asks for HTML
    answer = client.get(url, headers={"Accept": "text/html"})

    assert answer.status_code == 401
    assert answer.json == {"error": "not signed in", "login": "/login"}


def test_a_viewer_reads_the_api(viewer_client: StudioClient, session: Session, car: Car) -> None:
    given_a_failed_trip(session, car)

    answer = viewer_client.get("/api/actions")

    assert answer.status_code == 200
    assert answer.mimetype == "application/json"
    assert len(answer.json["actions"]) == 4  # type: ignore[index]


# --- the list ------------------------------------------------------------------------------------


def test_the_list_shows_each_action_newest_first(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    actions = given_a_failed_trip(session, car)

    page = viewer_client.get("/api/actions").json
    assert page is not None

    assert ids(page) == sorted((a.id for a in actions.values()), reverse=True)
    assert page["next"] is None and page["limit"] == 50
    trip = next(a for a in page["actions"] if a["name"] == "trip")
    assert trip["status"] == "failed"
    assert trip["actor_type"] == "Car" and trip["actor_id"] == str(car.id)
    assert trip["arguments"] == ["Lyon"]
    assert trip["root"] is True and trip["tree_id"] == actions["trip"].id
    assert trip["created_at"].endswith("Z")
    assert trip["links"] == {
        "self": f"/api/actions/{actions['trip'].id}",
        "tree": f"/api/actions/{actions['trip'].id}/tree",
    }
    breakdown = next(a for a in page["actions"] if a["name"] == "breakdown")
    assert breakdown["error"] == {"class": "builtins.RuntimeError", "message": "breakdown"}
    assert breakdown["root"] is False and breakdown["tree_id"] == actions["trip"].id


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("status=failed", {"trip", "leg", "breakdown"}),
        ("status=succeeded", {"drive"}),
        ("name=leg", {"leg"}),
        ("roots_only=true", {"trip"}),
        ("roots_only=false", {"trip", "leg", "breakdown", "drive"}),
        ("search=Lyon", {"trip"}),
        ("actor_type=Car&actor_id=CAR", {"trip", "leg", "breakdown", "drive"}),
        ("actor_type=Account", set()),
        ("status=failed&name=leg", {"leg"}),
        ("concurrency_key=KEY", {"drive"}),
    ],
)
def test_the_list_filters_like_the_actions_list(
    viewer_client: StudioClient, session: Session, car: Car, query: str, names: set[str]
) -> None:
    actions = given_a_failed_trip(session, car)
    query = query.replace("CAR", str(car.id)).replace("KEY", actions["drive"].concurrency_key)

    page = viewer_client.get(f"/api/actions?{query}").json

    assert {a["name"] for a in page["actions"]} == names  # type: ignore[index]


def test_the_list_filters_by_creation_time(viewer_client: StudioClient, session: Session, car: Car) -> None:
    start = testing.freeze()
    engine.define(Car, "honk")
    engine.now(car, "honk")
    testing.travel(timedelta(hours=1))
    later = engine.now(car, "honk")
    after = (start + timedelta(minutes=30)).isoformat()

    newer = viewer_client.get(f"/api/actions?created_after={after}Z").json
    older = viewer_client.get(f"/api/actions?created_before={after}%2B00:00").json

    assert ids(newer) == [later.id]
    assert ids(older) == [later.id - 1]


def test_the_list_is_paged_by_keyset(viewer_client: StudioClient, session: Session, car: Car) -> None:
    # Given seven honks and a drive
    engine.define(Car, "honk")
    honks = [engine.now(car, "honk").id for _ in range(7)]
    engine.now(car, "drive", 1)

    # When a client follows the `next` links three at a time
    seen: list[int] = []
    url: str | None = "/api/actions?name=honk&limit=3"
    pages = 0
    while url is not None:
        page = viewer_client.get(url).json
        assert page is not None
        assert len(page["actions"]) <= 3
        seen += ids(page)
        url = page["next"]
        pages += 1

    # Then it sees every honk once, newest first, in three pages
    assert seen == sorted(honks, reverse=True)
    assert pages == 3
    # And each cursor keeps the filters and the limit
    first = viewer_client.get("/api/actions?name=honk&limit=3").json
    assert first["next"] == f"/api/actions?name=honk&limit=3&before={honks[4]}"  # type: ignore[index]


def test_a_page_that_ends_exactly_at_the_limit_has_no_next(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "honk")
    for _ in range(3):
        engine.now(car, "honk")

    page = viewer_client.get("/api/actions?limit=3").json

    assert len(page["actions"]) == 3 and page["next"] is None  # type: ignore[index]


@pytest.mark.parametrize(
    ("query", "parameter", "says"),
    [
        ("limit=0", "limit", "from 1 to 200"),
        ("limit=201", "limit", "from 1 to 200"),
        ("limit=ten", "limit", "from 1 to 200"),
        ("limit=-1", "limit", "from 1 to 200"),
        ("before=abc", "before", "must be an integer"),
        ("before=99999999999999999999999", "before", "must be an integer"),
        ("status=done", "status", "must be one of pending, performing"),
        ("roots_only=maybe", "roots_only", "true or false"),
        ("created_after=yesterday", "created_after", "ISO 8601"),
        ("created_before=0001-01-01T00:00:00%2B05:00", "created_before", "ISO 8601"),
        ("name=a%00b", "name", "NUL"),
        ("state=failed", "state", "is not a parameter here"),
    ],
)
def test_a_bad_query_parameter_is_a_400_that_names_it(
    viewer_client: StudioClient, query: str, parameter: str, says: str
) -> None:
    answer = viewer_client.get(f"/api/actions?{query}")

    assert answer.status_code == 400
    assert answer.json is not None
    assert answer.json["error"] == "bad_parameter"
    assert answer.json["parameter"] == parameter
    assert says in answer.json["message"]


# --- one action ----------------------------------------------------------------------------------


def test_an_action_shows_its_steps_children_and_parents(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    actions = given_a_failed_trip(session, car)
    trip, leg, drive = actions["trip"], actions["leg"], actions["drive"]

    shown = viewer_client.get(f"/api/actions/{trip.id}").json
    assert shown is not None

    assert shown["id"] == trip.id and shown["status"] == "failed"
    (step,) = shown["steps"]
    assert (step["index"], step["status"], step["attempt"]) == (0, "failed", 1)
    assert step["children"] == [leg.id, drive.id]
    assert step["unsuccessful_actions_count"] == 1 and step["pending_actions_count"] == 0
    assert shown["parents"] == []
    child = viewer_client.get(f"/api/actions/{leg.id}").json
    assert child["parents"] == [  # type: ignore[index]
        {"action_id": trip.id, "step_id": step["id"], "step_index": 0}
    ]


def test_an_action_shows_every_error_with_its_traceback(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    actions = given_a_failed_trip(session, car)

    shown = viewer_client.get(f"/api/actions/{actions['breakdown'].id}").json
    assert shown is not None

    assert shown["error"]["class"] == "builtins.RuntimeError"
    assert "RuntimeError: breakdown" in shown["error"]["traceback"]
    assert shown["errors"], "the history's errors"
    for error in shown["errors"]:
        assert (error["error_class"], error["error_message"]) == ("builtins.RuntimeError", "breakdown")
        assert "RuntimeError: breakdown" in error["traceback"]
        assert error["at"].endswith("Z")
    assert shown["errors"][0]["event"] in ("step_failed", "step_errored")


def test_each_failed_attempt_is_an_error_of_its_own(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a step that fails twice and succeeds on its third attempt
    calls = {"n": 0}
    flaky = engine.define(
        Car, "flaky", retry=engine.RetryPolicy(max_attempts=3, initial_interval=timedelta())
    )

    @flaky.step
    def once(car: Car, step: StepContext) -> None:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError(f"try {calls['n']}")

    with testing.handle_exceptions():
        action = engine.now(car, "flaky")
        testing.drain()

    shown = viewer_client.get(f"/api/actions/{action.id}").json
    assert shown is not None

    assert shown["status"] == "succeeded"
    assert [(e["event"], e["attempt"], e["error_message"]) for e in shown["errors"]] == [
        ("attempt_failed", 1, "try 1"),
        ("attempt_failed", 2, "try 2"),
    ]
    assert shown["steps"][0]["attempt"] == 3


def test_an_unknown_action_is_a_404_in_json(viewer_client: StudioClient) -> None:
    for url in ("/api/actions/999", "/api/actions/999/tree"):
        answer = viewer_client.get(url)
        assert answer.status_code == 404
        assert answer.json == {"error": "not_found", "message": "there is no action 999"}
    huge = 10**30  # larger than a BIGINT: never sent to the database
    for url in (f"/api/actions/{huge}", f"/api/actions/{huge}/tree", "/api/actions/0"):
        assert viewer_client.get(url).status_code == 404
    answer = viewer_client.get("/api/nowhere")
    assert answer.status_code == 404 and answer.mimetype == "application/json"


# --- the tree ------------------------------------------------------------------------------------


def test_the_tree_nests_steps_and_children(viewer_client: StudioClient, session: Session, car: Car) -> None:
    actions = given_a_failed_trip(session, car)

    answer = viewer_client.get(f"/api/actions/{actions['trip'].id}/tree").json
    assert answer is not None

    assert (answer["nodes"], answer["truncated"]) == (4, False)
    root = answer["tree"]
    assert (root["name"], root["status"]) == ("trip", "failed")
    (step,) = root["steps"]
    leg, drive = step["children"]
    assert (leg["name"], leg["status"], drive["name"], drive["status"]) == (
        "leg",
        "failed",
        "drive",
        "succeeded",
    )
    (breakdown,) = leg["steps"][0]["children"]
    assert breakdown["name"] == "breakdown"
    assert breakdown["error"] == {"class": "builtins.RuntimeError", "message": "breakdown"}
    assert drive["steps"][0]["children"] == []
    # A subtree: from the leg down
    subtree = viewer_client.get(f"/api/actions/{actions['leg'].id}/tree").json
    assert subtree["nodes"] == 2  # type: ignore[index]
    assert subtree["tree"]["steps"][0]["children"][0]["id"] == actions["breakdown"].id  # type: ignore[index]


def given_shared_work(session: Session, car: Car) -> Action:
    """tour -> (a, b); a and b both visit Paris: reuse attaches b to a's visit."""
    engine.define(Car, "visit", order_paint, outbound=True, checksum=lambda car, place: place)
    for name in ("a", "b"):
        engine.define(Car, name).step(lambda car, step: step.do("visit", "Paris"))
    tour = engine.define(Car, "tour")

    @tour.step
    def both(car: Car, step: StepContext) -> None:
        step.do("a")
        step.do("b")

    root = engine.now(car, "tour")
    testing.drain()
    return root


def test_work_reached_twice_in_a_tree_is_shown_once_then_marked_repeated(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    root = given_shared_work(session, car)

    answer = viewer_client.get(f"/api/actions/{root.id}/tree").json
    assert answer is not None

    a, b = answer["tree"]["steps"][0]["children"]
    (first,) = a["steps"][0]["children"]
    (second,) = b["steps"][0]["children"]
    assert first["id"] == second["id"]
    assert first["name"] == "visit" and "steps" in first
    assert second == {"id": first["id"], "name": "visit", "status": "performing", "repeated": True}
    assert answer["nodes"] == 4


def test_a_tree_too_big_or_too_deep_is_cut_off_and_says_so(
    viewer_client: StudioClient, session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    actions = given_a_failed_trip(session, car)
    url = f"/api/actions/{actions['trip'].id}/tree"

    monkeypatch.setattr(queries_api, "TREE_LIMIT", 2)
    small = viewer_client.get(url).json
    assert small is not None
    assert (small["nodes"], small["truncated"]) == (2, True)
    assert small["tree"]["steps"][0]["children"][1] == {"id": actions["drive"].id, "truncated": True}

    monkeypatch.setattr(queries_api, "TREE_LIMIT", 5_000)
    monkeypatch.setattr(api, "MAX_TREE_DEPTH", 1)
    shallow = viewer_client.get(url).json
    assert shallow is not None
    assert shallow["truncated"] is True
    leg = shallow["tree"]["steps"][0]["children"][0]
    assert leg["steps"][0]["children"] == [{"id": actions["breakdown"].id, "truncated": True}]
