"""The action page shows what a step waits for and until when, the inbox (consumed and kept
signals with their payloads) and each decision a step took; an operator sends a signal
with a JSON payload from it (audited, CSRF-checked), a viewer cannot, a bad payload is a
400 that says what is wrong, and a finished action takes none."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.audit import AuditEntry
from engine.models import Signal
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient


def declare_release(seen: list[object]) -> None:
    release = engine.define(Car, "release")

    @release.step
    def check(car: Car, step: engine.StepContext) -> None:
        step.go_to("ship")

    @release.step
    def review(car: Car, step: engine.StepContext) -> None:
        pass

    @release.step
    def ship(car: Car, step: engine.StepContext) -> None:
        step.wait_for("go", "stop", timeout=3600)

    @release.step
    def done(car: Car, step: engine.StepContext) -> None:
        seen.append((step.signal.name, step.signal.payload) if step.signal else None)


def test_the_page_shows_the_wait_the_inbox_and_the_decision(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    declare_release([])
    action = engine.now(car, "release")
    engine.signal(action, "noise", {"n": 1}, by="ci", note="nobody waits for this")

    page = viewer_client.get(f"/actions/{action.id}").text

    assert 'class="panel action-signals"' in page
    assert "<code>go</code> or <code>stop</code>" in page
    assert "with no deadline" not in page and "until" in page
    assert 'data-signal="' in page and "in the inbox" in page and "nobody waits for this" in page
    assert "→ went to" in page and ">ship<" in page
    # A viewer sees no signal form
    assert f'action="/actions/{action.id}/signal"' not in page
    assert viewer_client.command(f"/actions/{action.id}/signal", {"name": "go"}).status_code == 403


def test_an_operator_sends_a_signal_with_a_payload_and_it_is_audited(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    seen: list[object] = []
    declare_release(seen)
    action = engine.now(car, "release")
    page = operator_client.get(f"/actions/{action.id}").text
    assert f'action="/actions/{action.id}/signal"' in page and 'value="go"' in page

    answer = operator_client.command(
        f"/actions/{action.id}/signal", {"name": "go", "payload": '{"window": "now"}', "note": "ship it"}
    )

    assert answer.status_code == 200
    assert "the waiting step took it" in answer.text
    testing.drain()
    assert seen == [("go", {"window": "now"})]
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.result, entry.reason) == ("signal", "consumed", "ship it")


def test_bad_signals_are_refused_with_a_clear_message(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    declare_release([])
    action = engine.now(car, "release")

    bad_json = operator_client.command(f"/actions/{action.id}/signal", {"name": "go", "payload": "{oops"})
    no_name = operator_client.command(f"/actions/{action.id}/signal", {"name": " "})
    no_token = operator_client.post(f"/actions/{action.id}/signal", data={"name": "go"}, headers=HTMX)

    assert bad_json.status_code == 400 and "The payload is not valid JSON" in bad_json.text
    assert no_name.status_code == 400 and "name is required" in no_name.text
    assert no_token.status_code == 400
    assert session.scalars(select(Signal)).all() == []


def test_a_finished_action_takes_no_signal(operator_client: StudioClient, session: Session, car: Car) -> None:
    done = engine.now(car, "drive", 1)
    assert f'action="/actions/{done.id}/signal"' not in operator_client.get(f"/actions/{done.id}").text
    answer = operator_client.command(f"/actions/{done.id}/signal", {"name": "go"})
    assert answer.status_code == 409  # refused: it changed nothing
    assert "a finished action takes no signals. Nothing was sent." in answer.text
    assert operator_client.command("/actions/99999999/signal", {"name": "go"}).status_code == 404
