"""Given a tree that failed at a leaf, an operator skips the leaf from its page or from the
failure path on the root's page: the leaf completes as succeeded with her note, the tree
above carries on, and the command is audited. A viewer cannot; an action that failed
because of one below it is refused with a message naming that one.

Not a spec case: the studio is ours (issue 12, "Retry and skip").
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine import testing
from engine.models import AuditEntry
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip, status_of
from tests.studio.support import FormParser, StudioClient


def forms(html: str) -> dict[str, dict[str, str]]:
    parser = FormParser()
    parser.feed(html)
    return {f.action: f.inputs for f in parser.forms}


def test_the_leaf_and_the_failure_path_offer_to_skip_it(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    leaf = trip.breakdown
    own = forms(operator_client.get(f"/actions/{leaf.id}").text)
    assert f"/actions/{leaf.id}/skip" in own
    on_root = forms(operator_client.get(f"/actions/{trip.trip.id}").text)
    assert on_root[f"/actions/{leaf.id}/skip"]["page"] == str(trip.trip.id)
    # the leg failed because of the leaf: its own commands do not offer a skip
    assert f"/actions/{trip.leg.id}/skip" not in forms(operator_client.get(f"/actions/{trip.leg.id}").text)


def test_skipping_the_leaf_from_the_roots_failure_path_lets_the_tree_succeed(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a trip that failed because its breakdown failed
    trip = failing_trip(session, car)

    # When the operator skips the breakdown from the trip's failure path
    answer = operator_client.command(
        f"/actions/{trip.breakdown.id}/skip", {"note": "towed", "page": str(trip.trip.id)}
    )
    testing.drain()

    # Then the breakdown, the leg and the trip succeeded
    assert answer.status_code == 200
    assert "was skipped" in answer.text
    assert [status_of(session, a.id) for a in (trip.breakdown, trip.leg, trip.trip)] == ["succeeded"] * 3
    # the answer is the trip's page fragments, and the audit has her note
    assert f'data-action-id="{trip.trip.id}"' in answer.text
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.by, entry.reason, entry.result) == ("skip", "olga", "towed", "skipped")
    # and the trip's page shows no failure path any more
    page = operator_client.get(f"/actions/{trip.trip.id}").text
    assert "Failure path" not in page


def test_a_skip_that_does_not_apply_says_why(
    operator_client: StudioClient, viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    refused = operator_client.command(f"/actions/{trip.leg.id}/skip")
    assert refused.status_code == 409
    assert f"failed because action {trip.breakdown.id} below it failed" in refused.text
    done = operator_client.command(f"/actions/{trip.honk.id}/skip")
    assert done.status_code == 409
    assert "only a failed or timed-out action can be skipped" in done.text
    assert viewer_client.command(f"/actions/{trip.breakdown.id}/skip").status_code == 403
    assert status_of(session, trip.breakdown.id) == "failed"


def test_a_skip_sent_from_a_page_that_is_gone_answers_with_the_leafs_page(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    answer = operator_client.command(f"/actions/{trip.breakdown.id}/skip", {"page": "987654"})
    assert answer.status_code == 200
    assert f'data-action-id="{trip.breakdown.id}"' in answer.text
    assert status_of(session, trip.breakdown.id) == "succeeded"
