"""Given outbound actions waiting for the outside world, a signed POST to /webhooks/complete
completes one, by its id or as the current outbound action of an actor's lane; the
completion lands in the action's history and in the audit (cause webhook, by "webhook");
a second delivery of the same completion id gets the first answer and completes nothing.

Not a spec case: the studio is ours (issue 4, "Webhooks and API"). The refusals (signature,
timestamp, JSON, fields, the action) are in the test_webhook_refuses_*.py files.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.database import db
from app.webhooks.deliveries import WebhookDelivery
from engine import StepContext, clock, commands, testing
from engine.models import Action, ActionEvent, AuditEntry
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import deliver


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@pytest.fixture
def painting(session: Session, car: Car) -> Action:
    """An outbound action, performing until the paint shop calls back."""
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint", "red")
    assert action.status == "performing"
    return action


def fresh(session: Session, action_id: int) -> Action:
    session.expire_all()
    found = session.get(Action, action_id)
    assert found is not None
    return found


def audit_entries(session: Session) -> list[AuditEntry]:
    session.expire_all()
    return list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def test_a_signed_completion_completes_the_action_and_lands_in_its_history_and_the_audit(
    client: StudioClient, session: Session, painting: Action
) -> None:
    # When the paint shop reports success, signed with the shared secret
    answer = deliver(
        client,
        {
            "id": "paint-job-1",
            "action_id": painting.id,
            "status": "succeeded",
            "note": "two coats",
            "payload": {"color": "red", "coats": 2},
        },
    )

    # Then the action is completed with the payload as its result
    assert answer.status_code == 200
    assert answer.json == {
        "id": "paint-job-1",
        "completed": True,
        "reason": "completed",
        "action_id": painting.id,
        "requested_status": "succeeded",
        "action_status": "succeeded",
    }
    done = fresh(session, painting.id)
    assert done.status == "succeeded"
    assert done.result == {"color": "red", "coats": 2}
    # And its history says the webhook did it, with the note
    completed = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == painting.id, ActionEvent.event == "completed")
    ).one()
    assert (completed.cause, completed.by, completed.data) == (
        "webhook",
        "webhook",
        {"status": "succeeded", "note": "two coats"},
    )
    # And the audit has one entry for it
    (entry,) = audit_entries(session)
    assert (entry.command, entry.target, entry.cause, entry.by, entry.reason, entry.result) == (
        "complete",
        f"action:{painting.id}",
        "webhook",
        "webhook",
        "two coats",
        "completed",
    )
    assert entry.data == {"status": "succeeded", "payload": {"color": "red", "coats": 2}}


def test_a_failed_completion_fails_the_action_and_its_parent_carries_on_as_the_engine_says(
    client: StudioClient, session: Session, car: Car
) -> None:
    # Given a root whose step waits on an outbound action
    engine.define(Car, "paint", order_paint, outbound=True)
    job = engine.define(Car, "job")

    @job.step
    def ask(car: Car, step: StepContext) -> None:
        step.do("paint", "blue")

    root = engine.now(car, "job")
    testing.drain()
    paint = session.scalars(select(Action).where(Action.name == "paint")).one()

    # When the paint shop reports a failure
    answer = deliver(client, {"id": "p-2", "action_id": paint.id, "status": "failed", "note": "no blue"})
    testing.drain()

    # Then the paint and its parent failed
    assert answer.status_code == 200 and answer.json["completed"] is True
    assert fresh(session, paint.id).status == "failed"
    assert fresh(session, root.id).status == "failed"


def test_a_completion_by_actor_and_name_completes_the_lanes_current_outbound_action(
    client: StudioClient, session: Session, car: Car
) -> None:
    # Given two paint jobs of one car in one lane: the first performing, the second queued
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/paint-shop")
    first = engine.now(car, "paint", "red")
    second = engine.now(car, "paint", "blue")
    assert (first.status, second.status) == ("performing", "pending")
    lane = {"actor_type": "Car", "actor_id": car.id, "name": "paint"}

    # When the paint shop completes "the car's paint job" without knowing its id
    answer = deliver(client, {"id": "shop-1", **lane, "status": "succeeded"})

    # Then the lane's current one is completed, and the next one takes its place
    assert answer.status_code == 200
    assert answer.json["action_id"] == first.id
    assert fresh(session, first.id).status == "succeeded"
    assert fresh(session, second.id).status == "performing"

    # And the next completion (a new id; actor_id as a string works too) completes that one
    answer = deliver(client, {"id": "shop-2", **lane, "actor_id": str(car.id), "status": "succeeded"})
    assert answer.status_code == 200
    assert answer.json["action_id"] == second.id
    assert fresh(session, second.id).status == "succeeded"


def test_a_repeated_completion_id_returns_the_first_result_and_completes_nothing_again(
    client: StudioClient, session: Session, car: Car
) -> None:
    # Given two paint jobs in one lane, and a first delivery that completed the first one
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/paint-shop")
    first = engine.now(car, "paint", "red")
    second = engine.now(car, "paint", "blue")
    body = {"id": "shop-1", "actor_type": "Car", "actor_id": car.id, "name": "paint", "status": "succeeded"}
    original = deliver(client, body)
    assert original.status_code == 200
    assert fresh(session, second.id).status == "performing"  # now current in the lane

    # When the sender retries the same completion a minute later (signed anew)
    testing.travel(timedelta(minutes=1))
    retried = deliver(client, body)

    # Then it gets the first answer again, marked as such, and the second job is untouched
    assert retried.status_code == 200
    assert retried.json == original.json
    assert retried.headers["X-Stepwise-Replayed"] == "true"
    assert "X-Stepwise-Replayed" not in original.headers
    assert fresh(session, first.id).status == "succeeded"
    assert fresh(session, second.id).status == "performing"
    assert len(audit_entries(session)) == 1
    # And the delivery is stored once, with its answer
    with client.application.app_context():
        (stored,) = db.session.scalars(select(WebhookDelivery)).all()
        assert (stored.id, stored.action_id, stored.status_code) == ("shop-1", first.id, 200)


def test_the_same_completion_id_with_another_body_is_refused(
    client: StudioClient, session: Session, painting: Action
) -> None:
    assert deliver(client, {"id": "c-1", "action_id": painting.id, "status": "succeeded"}).status_code == 200

    answer = deliver(client, {"id": "c-1", "action_id": painting.id, "status": "failed"})

    assert answer.status_code == 422
    assert answer.json["error"] == "id_reused"
    assert "give each completion its own id" in answer.json["message"]
    assert fresh(session, painting.id).status == "succeeded"


def test_an_action_completed_before_is_not_an_error_and_changes_nothing(
    client: StudioClient, session: Session, painting: Action
) -> None:
    # Given an operator approved the paint job by hand
    assert commands.approve(painting.id, by="olga", payload={"by": "hand"})

    # When the paint shop's webhook arrives afterwards
    answer = deliver(
        client, {"id": "late", "action_id": painting.id, "status": "failed", "payload": {"x": 1}}
    )

    # Then it is told the action was completed before; nothing changed
    assert answer.status_code == 200
    assert answer.json["completed"] is False
    assert answer.json["reason"] == "already_completed"
    assert answer.json["action_status"] == "succeeded"
    done = fresh(session, painting.id)
    assert (done.status, done.result) == ("succeeded", {"by": "hand"})
    # And the attempt is audited as such
    assert [(e.command, e.cause, e.result) for e in audit_entries(session)] == [
        ("approve", "operator", "completed"),
        ("complete", "webhook", "already_completed"),
    ]


def test_a_completion_by_actor_and_name_after_the_lane_moved_on_says_already_completed(
    client: StudioClient, session: Session, painting: Action, car: Car
) -> None:
    assert commands.approve(painting.id, by="olga")

    answer = deliver(
        client,
        {"id": "late", "actor_type": "Car", "actor_id": car.id, "name": "paint", "status": "succeeded"},
    )

    assert answer.status_code == 200
    assert (answer.json["completed"], answer.json["reason"], answer.json["action_id"]) == (
        False,
        "already_completed",
        painting.id,
    )


def test_a_delivery_refused_before_the_engine_can_be_sent_again_with_the_same_id(
    client: StudioClient, session: Session, car: Car
) -> None:
    # Given the paint shop calls back before the paint job exists
    engine.define(Car, "paint", order_paint, outbound=True)
    body = {"id": "early", "actor_type": "Car", "actor_id": car.id, "name": "paint", "status": "succeeded"}
    early = deliver(client, body)
    assert early.status_code == 404
    assert early.json["error"] == "unknown_action"

    # When the job starts and the shop retries the same completion
    painting = engine.now(car, "paint", "red")
    retried = deliver(client, body)

    # Then the retry completes it: the refusal was not kept
    assert retried.status_code == 200
    assert retried.json["completed"] is True
    assert fresh(session, painting.id).status == "succeeded"


def test_a_delivery_of_an_id_being_handled_now_is_asked_to_retry_later(
    app: Flask, client: StudioClient, session: Session, painting: Action
) -> None:
    from app.webhooks.deliveries import fingerprint

    body = {"id": "busy", "action_id": painting.id, "status": "succeeded"}
    # Given another process has just claimed this completion id and not answered yet
    with app.app_context():
        now = clock.now()
        db.session.add(
            WebhookDelivery(id="busy", fingerprint=fingerprint(body), received_at=now, claimed_at=now)
        )
        db.session.commit()

    answer = deliver(client, body)

    # Then this delivery is told to come back, and nothing was completed
    assert answer.status_code == 409
    assert answer.json["error"] == "in_progress"
    assert answer.headers["Retry-After"] == "5"
    assert fresh(session, painting.id).status == "performing"

    # When the claim is older than a minute (its process died), the next delivery takes it over
    testing.travel(timedelta(minutes=2))
    answer = deliver(client, body)
    assert answer.status_code == 200
    assert answer.json["completed"] is True
    assert fresh(session, painting.id).status == "succeeded"


def test_a_delivery_taking_over_from_a_crashed_one_completes_the_action_that_one_chose(
    app: Flask, client: StudioClient, session: Session, car: Car
) -> None:
    from app.webhooks.deliveries import fingerprint

    # Given two paint jobs in one lane, and a delivery addressed by lane that chose the first,
    # completed it, and died before answering (its claim is left, aimed at the first)
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/paint-shop")
    first = engine.now(car, "paint", "red")
    second = engine.now(car, "paint", "blue")
    body = {"id": "shop-1", "actor_type": "Car", "actor_id": car.id, "name": "paint", "status": "succeeded"}
    with app.app_context():
        now = clock.now()
        db.session.add(
            WebhookDelivery(
                id="shop-1",
                fingerprint=fingerprint(body),
                received_at=now,
                claimed_at=now,
                action_id=first.id,
            )
        )
        db.session.commit()
    assert commands.complete(first.id, "succeeded", by="webhook", cause="webhook")
    assert fresh(session, second.id).status == "performing"  # now current in the lane

    # When the sender retries after the claim went stale
    testing.travel(timedelta(minutes=2))
    answer = deliver(client, body)

    # Then the retry is about the first job (already completed), not the lane's next one
    assert answer.status_code == 200
    assert (answer.json["action_id"], answer.json["reason"]) == (first.id, "already_completed")
    assert fresh(session, second.id).status == "performing"
