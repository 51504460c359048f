"""Given registered definitions, the catalog draws each as a diagram of its steps in order,
with the child actions each step starts where its source names them ("dynamic" where it
does not) and its options in words; and an operator starts an action on an actor with JSON
arguments from its form. A viewer may not, nor a form without its CSRF token; bad JSON, an
unknown actor type, actor or action, or arguments the steps do not take are refused with
400 and a message that says what is wrong, and nothing is started.

Not a spec case: the studio is ours (issue 4, "Catalog (the visual workflow studio)").
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from app.catalog import definitions as catalog
from engine import RetryPolicy, StepContext, testing
from engine.models import Action, AuditEntry, Invocation
from tests.domain import Car
from tests.studio.support import StudioClient, forms


def order_paint(car: Car, color: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def define_road_trip() -> None:
    """A road trip: a prepended check, then three steps starting children in every way the
    catalog reads (a literal name, a bound method, a list of actors in a loop, a name only
    known at run time) and a wait; with a lane key, a checksum, a timeout and retries."""
    engine.define(Car, "paint", order_paint, outbound=True)
    engine.define(Car, "drive")
    trip = engine.define(
        Car,
        "road_trip",
        concurrency_key=lambda car, city: ["trips", city],
        checksum=lambda car, city: city,
        timeout=timedelta(hours=2),
        retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=5), jitter=0),
    )

    @trip.step
    def prepare(car: Car, step: StepContext, city: str) -> None:
        """Paint it for the trip, and wait for it to dry."""
        step.do("paint", "red")
        step.wait(timedelta(minutes=10))

    @trip.step
    def go(car: Car, step: StepContext, city: str) -> None:
        step.do(car.drive, 100)
        for _ in range(3):
            step.on([car], "honk")

    @trip.step
    def detour(car: Car, step: StepContext, city: str) -> None:
        if city == "Paris":
            step.do(f"visit_{city.lower()}")

    @trip.prepend_step
    def check_tyres(car: Car, step: StepContext, city: str) -> None:
        pass

    @trip.succeeded
    def celebrate(car: Car, action: Action, city: str) -> None:
        pass


def invocations(session: Session) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(Invocation)) or 0


def audit_entries(session: Session) -> list[AuditEntry]:
    session.expire_all()
    return list(session.scalars(select(AuditEntry)))


def test_a_multi_step_definition_is_drawn_with_its_steps_children_and_options(
    viewer_client: StudioClient,
) -> None:
    # Given a road trip of four steps
    define_road_trip()

    # When a viewer opens the catalog
    page = viewer_client.get("/catalog/")

    # Then the road trip's diagram shows its steps in order, the prepended one first
    assert page.status_code == 200
    article = page.text.split('id="def-Car-road_trip"', 1)[1].split("</article>", 1)[0]
    steps = re.findall(
        r'data-step="(\d+)">\s*<div class="node-head">.*?<span class="mono">(\w+)</span>', article, re.S
    )
    assert steps == [("1", "check_tyres"), ("2", "prepare"), ("3", "go"), ("4", "detour")]
    assert '<span class="badge">prepended</span>' in article
    assert "Paint it for the trip, and wait for it to dry." in article
    # And the child actions each step starts, linked to their own diagrams
    assert (
        '<a class="mono" href="/catalog/#def-Car-paint">paint</a> <span class="badge">outbound</span>'
        in article
    )
    assert "waits <code>timedelta(minutes=10)</code>" in article
    assert '<a class="mono" href="/catalog/#def-Car-drive">drive</a>' in article
    assert '<span class="mono">honk</span> on <code>[car]</code>' in article
    assert 'title="Called in a loop: maybe many times">repeated</span>' in article
    # And a name known only at run time is dynamic, under its condition
    assert (
        '<span class="badge">dynamic</span> <code>step.do(f&#39;visit_{city.lower()}&#39;)</code>' in article
    )
    # And the options in words
    options = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>([^<]+)</dd>", article))
    assert options["Lane key"] == "lambda car, city: [&#39;trips&#39;, city]"
    assert options["Checksum"] == "lambda car, city: city"
    assert options["Checksum key"] == "Car/&lt;actor id&gt;/road_trip"
    assert options["Timeout"] == "2h 00m"
    assert options["Outbound"] == "no"
    assert options["Retry"] == "3 attempts, 5s apart at first, then 2 times longer each time, up to 5m 00s"
    assert 'succeeded: <span class="mono">define_road_trip.celebrate</span>' in article
    # And the table of contents links to it
    assert 'href="#def-Car-road_trip"' in page.text


def test_the_children_of_a_step_are_read_from_its_source() -> None:
    # Given steps written as a lambda, as a loop over actors, and with a computed name
    define_road_trip()
    lambda_trip = engine.define(Car, "lambda_trip")
    lambda_trip.step(lambda car, step: step.do("visit", "Paris"))
    shape = catalog.shape(engine.registry.find(Car, "road_trip"))  # type: ignore[arg-type]

    # Then each call is named with how it is made
    (call,) = catalog.step_calls(lambda_trip.steps[0]).calls  # type: ignore[union-attr]
    assert call == catalog.Call("visit", "step.do('visit', 'Paris')")
    go = shape.steps[2]
    assert [(c.call.name, c.call.on, c.call.repeated, c.kind) for c in go.children] == [
        ("drive", None, False, "declared"),
        ("honk", "[car]", True, "method"),  # the step's own actor, in a list
    ]
    detour = shape.steps[3]
    assert detour.dynamic
    assert detour.children[0].call.conditional
    # And a definition without steps is one step calling its method
    (drive,) = catalog.shape(engine.registry.find(Car, "drive")).steps  # type: ignore[arg-type]
    assert (drive.kind, drive.label) == ("method", "Car.drive")


def test_a_definitions_page_draws_it_with_its_start_form_and_latest_actions(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    define_road_trip()
    engine.define(Car, "honk", outbound=True)
    honk = engine.now(car, "honk")

    page = operator_client.get("/catalog/Car/honk")

    assert page.status_code == 200
    assert 'data-definition="Car.honk"' in page.text
    assert "awaits its outbound completion" in page.text
    (form,) = [f for f in forms(page.text) if f.action == "/catalog/start"]
    assert form.inputs["name"] == "honk"
    assert '<option value="Car" selected>' in page.text
    assert f'<a href="/actions/{honk.id}">honk #{honk.id}</a>' in page.text
    assert operator_client.get("/catalog/Car/fly").status_code == 404


def test_an_operator_starts_an_action_with_json_arguments(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given the catalog's start form
    engine.define(Car, "drive")
    page = operator_client.get("/catalog/")
    (form,) = [f for f in forms(page.text) if f.action == "/catalog/start"]
    assert set(form.inputs) >= {"csrf_token", "actor_type", "actor_id", "name", "arguments"}

    # When the operator starts drive on the car with [42], through htmx
    answer = operator_client.command(
        "/catalog/start", {"actor_type": "Car", "actor_id": str(car.id), "name": "drive", "arguments": "[42]"}
    )

    # Then the action is invoked, recorded in the audit, and the form comes back with its values
    assert answer.status_code == 200
    (invocation,) = session.scalars(select(Invocation)).all()
    assert f"Started drive on Car/{car.id} (invocation #{invocation.id})" in answer.text
    assert answer.text.lstrip().startswith('<section id="start-action"')
    assert "[42]</textarea>" in answer.text
    (entry,) = audit_entries(session)
    assert (entry.command, entry.target, entry.by, entry.cause, entry.result) == (
        "start",
        f"invocation:{invocation.id}",
        "olga",
        "operator",
        "invoked",
    )
    assert entry.data == {"actor": f"Car/{car.id}", "action": "drive", "arguments": [42]}
    # And a worker performs it
    testing.drain()
    session.refresh(car)
    assert car.mileage == 42


def test_starting_without_javascript_redirects_back_with_a_message(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "honk")
    form = {"actor_type": "Car", "actor_id": str(car.id), "name": "honk", "arguments": ""}

    answer = operator_client.command(
        "/catalog/start", form, htmx=False, headers={"Referer": "/catalog/Car/honk"}
    )

    assert answer.status_code == 303
    assert answer.headers["Location"] == "/catalog/Car/honk"
    assert "Started honk on Car/" in operator_client.get("/catalog/Car/honk").text
    assert invocations(session) == 1


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (
            {"arguments": "[42"},
            "The arguments are not valid JSON (Expecting &#39;,&#39; delimiter at line 1, column 4)",
        ),
        ({"arguments": '{"miles": 42}'}, "The arguments must be a JSON array, like"),
        ({"arguments": '"42"'}, "not a string"),
        ({"actor_type": "Boat"}, "There is no actor type &#39;Boat&#39; in this studio (it knows: "),
        ({"actor_id": "999"}, "There is no Car with id &#39;999&#39;."),
        ({"actor_id": "not-a-number"}, "There is no Car with id &#39;not-a-number&#39;."),
        ({"actor_id": ""}, "Say which Car to start it on: the actor id is empty."),
        ({"name": "fly"}, "Car has no registered action &#39;fly&#39; (its actions: "),
        ({"name": "__init__"}, "Car has no registered action &#39;__init__&#39;"),
        ({"arguments": "[]"}, "The arguments do not fit: drive takes (miles): missing a required argument"),
        ({"arguments": "[1, 2]"}, "The arguments do not fit: drive takes (miles): too many positional"),
    ],
    ids=[
        "bad-json",
        "object",
        "string",
        "unknown-actor-type",
        "unknown-actor",
        "malformed-id",
        "no-actor-id",
        "unknown-action",
        "private-method",
        "too-few",
        "too-many",
    ],
)
def test_a_bad_start_is_refused_with_a_clear_message_and_nothing_is_started(
    operator_client: StudioClient, session: Session, car: Car, form: dict[str, str], message: str
) -> None:
    engine.define(Car, "drive")
    sent = {"actor_type": "Car", "actor_id": str(car.id), "name": "drive", "arguments": "[42]", **form}

    page = operator_client.command("/catalog/start", sent, htmx=False)
    fragment = operator_client.command("/catalog/start", sent)

    assert page.status_code == fragment.status_code == 400
    assert message in page.text
    assert "Nothing was started." in page.text
    assert fragment.headers["HX-Retarget"] == "#flash"
    assert invocations(session) == 0
    assert audit_entries(session) == []


def test_a_viewer_may_not_start_an_action_and_is_not_offered_the_form(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "drive")
    assert not [f for f in forms(viewer_client.get("/catalog/").text) if f.action == "/catalog/start"]

    answer = viewer_client.command(
        "/catalog/start", {"actor_type": "Car", "actor_id": str(car.id), "name": "drive", "arguments": "[1]"}
    )

    assert answer.status_code == 403
    assert invocations(session) == 0
    assert audit_entries(session) == []


def test_starting_without_the_csrf_token_is_refused_and_nothing_is_started(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "drive")

    answer = operator_client.post(
        "/catalog/start",
        data={"actor_type": "Car", "actor_id": str(car.id), "name": "drive", "arguments": "[1]"},
    )

    assert answer.status_code == 400
    assert "nothing was changed" in answer.text
    assert invocations(session) == 0
