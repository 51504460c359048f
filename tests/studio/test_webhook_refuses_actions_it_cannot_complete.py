"""Given an outbound action waiting for the outside world, a well-signed, well-formed
delivery to /webhooks/complete that names an unknown action (404), an action that is not
outbound (409), or, by actor and name, an outbound action queued behind another (409) is
refused with a JSON answer that says what is wrong, and changes nothing.

Not a spec case: the studio is ours (issue 4, "Webhooks and API": a bad signature, a stale
timestamp, malformed JSON).
"""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

import engine
from engine.models import Action
from tests.domain import Car
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import deliver
from tests.studio.webhook_refusal_helpers import body_for, nothing_changes, order_paint, painting, refused

__all__ = ["nothing_changes", "painting"]  # the shared fixtures: pytest finds them in this module


@pytest.mark.usefixtures("nothing_changes")
def test_an_unknown_action_is_404(client: StudioClient, painting: Action, car: Car) -> None:
    by_id = deliver(client, body_for(painting, action_id=painting.id + 1000))
    by_lane = deliver(
        client, {"id": "c-2", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "wash"}
    )

    assert f"there is no action {painting.id + 1000}" in refused(by_id, 404, "unknown_action")
    assert f"there is no action 'wash' on Car/{car.id}" in refused(by_lane, 404, "unknown_action")


@pytest.mark.usefixtures("nothing_changes")
def test_an_action_that_is_not_outbound_is_409(client: StudioClient, session: Session, car: Car) -> None:
    engine.define(Car, "drive")
    drive = engine.now(car, "drive", 5)

    by_id = deliver(client, {"id": "c-1", "action_id": drive.id, "status": "succeeded"})
    by_lane = deliver(
        client, {"id": "c-2", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "drive"}
    )

    assert "is not outbound" in refused(by_id, 409, "not_outbound")
    assert "is not outbound" in refused(by_lane, 409, "not_outbound")


@pytest.mark.usefixtures("nothing_changes")
def test_an_outbound_action_queued_behind_another_is_not_addressable_by_actor_and_name(
    client: StudioClient, session: Session, car: Car, painting: Action
) -> None:
    # Given a wash queued in the paint job's lane
    engine.define(Car, "wash", order_paint, outbound=True, concurrency_key=painting.concurrency_key)
    wash = engine.now(car, "wash")
    assert wash.status == "pending"

    answer = deliver(
        client, {"id": "c-1", "status": "succeeded", "actor_type": "Car", "actor_id": car.id, "name": "wash"}
    )

    assert "give its action_id instead" in refused(answer, 409, "not_current")
    assert answer.json["action_id"] == wash.id  # type: ignore[index]
