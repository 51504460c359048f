"""Given an action's page, an operator cancels, retries (with a new timeout if she wants)
and approves or rejects an outbound action with a note and a JSON payload. Each command goes
through engine.commands with her name, answers htmx with the updated commands and the live
fragment (out of band), and a browser without JavaScript with a redirect back to the page.
Refusals change nothing: a viewer (403), a missing CSRF token (400), a bad timeout or bad
JSON (400, with a message that says what is wrong), a second completion (409, "already
completed").

Not a spec case: the studio is ours (issue 4, "Commands").
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from app.security import csrf
from engine import testing
from engine.models import Action, ActionEvent, AuditEntry
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip, order_paint, status_of, waiting_order
from tests.studio.support import HTMX, StudioClient

COMMANDS = ("cancel", "retry", "approve", "reject")


def audit(session: Session) -> list[tuple[str, str | None, str | None, str | None]]:
    session.expire_all()
    return [
        (e.command, e.by, e.result, e.reason)
        for e in session.scalars(select(AuditEntry).order_by(AuditEntry.id))
    ]


def audit_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(AuditEntry)) or 0


def flaky(calls: list[int]) -> None:
    """fix (root) -> mend, whose body fails the first time it runs and succeeds after."""
    mend = engine.define(Car, "mend")

    @mend.step
    def work(car: Car, step: engine.StepContext) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("flat tyre")

    fix = engine.define(Car, "fix")

    @fix.step
    def start(car: Car, step: engine.StepContext) -> None:
        step.do("mend")


# --- cancel --------------------------------------------------------------------------------


def test_an_operator_cancels_a_waiting_tree_and_gets_the_updated_fragments(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order waiting on its approval
    root, approval = waiting_order(session, car)

    # When the operator cancels the order from its page, through htmx, with a reason
    answer = operator_client.command(f"/actions/{root.id}/cancel", {"reason": "customer left"})

    # Then the order and its approval are cancelled, by her, as an operator
    assert answer.status_code == 200
    assert (status_of(session, root.id), status_of(session, approval.id)) == ("cancelled", "cancelled")
    completed = session.scalars(select(ActionEvent).where(ActionEvent.event == "completed")).all()
    assert {(e.action_id, e.cause, e.by) for e in completed} == {
        (root.id, "operator", "olga"),
        (approval.id, "operator", "olga"),
    }
    assert audit(session) == [("cancel", "olga", "cancelled", "customer left")]
    # And the answer is the commands (a cancelled action may be retried, not cancelled
    # again) and, out of band, the live fragment, which no longer polls, and the message
    html = answer.text
    assert html.lstrip().startswith('<section id="action-commands"')
    assert 'data-status="cancelled"' in html
    assert f'action="/actions/{root.id}/retry"' in html and f'action="/actions/{root.id}/cancel"' not in html
    assert '<div id="action-live"' in html and 'hx-swap-oob="outerHTML"' in html
    assert 'data-running="false"' in html and "hx-get" not in html
    assert f"Action {root.id} was cancelled, with the work below it." in html
    assert 'id="flash" hx-swap-oob="innerHTML"' in html


def test_without_javascript_a_command_redirects_back_to_the_page_with_its_message(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    root, _ = waiting_order(session, car)

    answer = operator_client.command(f"/actions/{root.id}/cancel", htmx=False)

    assert answer.status_code == 303
    assert answer.headers["Location"] == f"/actions/{root.id}"
    assert status_of(session, root.id) == "cancelled"
    page = operator_client.get(answer.headers["Location"])
    assert f"Action {root.id} was cancelled, with the work below it." in page.text


def test_cancelling_a_completed_action_says_it_is_already_completed(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    root, _ = waiting_order(session, car)
    assert operator_client.command(f"/actions/{root.id}/cancel").status_code == 200

    again = operator_client.command(f"/actions/{root.id}/cancel")

    assert again.status_code == 409
    assert f"Action {root.id} is already completed (cancelled): nothing was changed." in again.text
    assert 'class="flash flash-warning"' in again.text
    assert audit(session)[-1] == ("cancel", "olga", "already_completed", None)


# --- retry ---------------------------------------------------------------------------------


def test_an_operator_retries_a_failed_tree_and_it_runs_live_to_success(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a tree whose leaf failed once
    calls: list[int] = []
    flaky(calls)
    with testing.handle_exceptions():
        root = engine.now(car, "fix")
        testing.drain()
    assert status_of(session, root.id) == "failed"
    page = operator_client.get(f"/actions/{root.id}")
    assert f'action="/actions/{root.id}/retry"' in page.text

    # When the operator retries the root
    answer = operator_client.command(f"/actions/{root.id}/retry", {"reason": "tyre changed"})

    # Then it is reopened, the live fragment polls again, and Cancel is offered
    assert answer.status_code == 200
    assert status_of(session, root.id) == "performing"
    assert f'hx-get="/actions/{root.id}/live?commands_for=performing"' in answer.text
    assert f'action="/actions/{root.id}/cancel"' in answer.text
    assert f"Action {root.id} was retried." in answer.text
    retried = session.scalars(select(ActionEvent).where(ActionEvent.event == "retried")).all()
    assert retried and all((e.cause, e.by) == ("operator", "olga") for e in retried)
    # And when the workers run, the tree succeeds, and the live fragment stops polling
    # and brings the commands along (the status they were rendered for changed)
    testing.drain()
    assert status_of(session, root.id) == "succeeded" and calls == [1, 1]
    live = operator_client.get(f"/actions/{root.id}/live?commands_for=performing", headers=HTMX)
    assert 'data-running="false"' in live.text and "hx-get" not in live.text
    assert '<section id="action-commands"' in live.text and 'data-status="succeeded"' in live.text


def test_retrying_an_action_that_did_not_fail_changes_nothing(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)

    answer = operator_client.command(f"/actions/{trip.honk.id}/retry")

    assert answer.status_code == 409
    assert (
        f"Action {trip.honk.id} is succeeded: only a failed, timed-out or cancelled action can be retried."
        in answer.text
    )
    assert status_of(session, trip.honk.id) == "succeeded"


def test_an_operator_retries_a_timed_out_action_with_a_new_timeout(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an outbound action that timed out after 5 s
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "paint", order_paint, outbound=True, timeout=timedelta(seconds=5))
    action = engine.now(car, "paint", "red")
    testing.travel(timedelta(seconds=6))
    testing.drain()
    assert status_of(session, action.id) == "timed_out"
    # Its page offers a retry with the timeout field filled with the current one
    page = operator_client.get(f"/actions/{action.id}")
    assert 'name="timeout_seconds" type="number"' in page.text and 'value="5"' in page.text

    # When the operator retries it with a timeout of 600 seconds
    answer = operator_client.command(f"/actions/{action.id}/retry", {"timeout_seconds": "600"})

    # Then it performs again, under the new timeout, and the audit says so
    assert answer.status_code == 200
    assert f"Action {action.id} was retried with a timeout of 600 s." in answer.text
    session.expire_all()
    reopened = session.get(Action, action.id)
    assert reopened is not None and (reopened.status, reopened.timeout_seconds) == ("performing", 600)
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.by, entry.data) == ("retry", "olga", {"timeout_seconds": 600})


@pytest.mark.parametrize("seconds", ["abc", "0", "-5", "1.5", str(31 * 24 * 3600)])
def test_a_bad_timeout_is_refused_and_changes_nothing(
    operator_client: StudioClient, session: Session, car: Car, seconds: str
) -> None:
    trip = failing_trip(session, car)

    answer = operator_client.command(f"/actions/{trip.leg.id}/retry", {"timeout_seconds": seconds})

    assert answer.status_code == 400
    assert "The new timeout must be a whole number of seconds from 1 to 2,592,000" in answer.text
    assert "nothing was changed" in answer.text
    assert answer.headers["HX-Retarget"] == "#flash"
    assert status_of(session, trip.leg.id) == "failed"
    assert audit_count(session) == 0


# --- approve and reject ----------------------------------------------------------------------


def test_an_operator_approves_an_outbound_action_with_a_note_and_a_payload(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order waiting on its approval, whose page offers Approve and Reject
    root, approval = waiting_order(session, car)
    page = operator_client.get(f"/actions/{approval.id}")
    assert f'action="/actions/{approval.id}/approve"' in page.text
    assert f'action="/actions/{approval.id}/reject"' in page.text
    assert '<textarea id="approve-payload" name="payload"' in page.text

    # When she approves it with a note and a JSON payload
    answer = operator_client.command(
        f"/actions/{approval.id}/approve",
        {"note": "budget ok", "payload": '{"ticket": "OPS-42", "amount": 120}'},
    )

    # Then the approval succeeded with the payload as its result, and the order goes on
    assert answer.status_code == 200
    assert f"Action {approval.id} was approved: it succeeded." in answer.text
    session.expire_all()
    done = session.get(Action, approval.id)
    assert done is not None and (done.status, done.result) == (
        "succeeded",
        {"ticket": "OPS-42", "amount": 120},
    )
    testing.drain()
    assert status_of(session, root.id) == "succeeded"
    completed = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id == approval.id, ActionEvent.event == "completed")
    ).one()
    assert (completed.cause, completed.by, completed.data) == (
        "operator",
        "olga",
        {"status": "succeeded", "note": "budget ok"},
    )
    assert audit(session) == [("approve", "olga", "completed", "budget ok")]
    # And the page shows the result payload and the note in the history
    page = operator_client.get(f"/actions/{approval.id}")
    assert (
        '<pre class="json" aria-label="Result payload">{\n  &#34;ticket&#34;: &#34;OPS-42&#34;' in page.text
    )
    assert "budget ok" in page.text


def test_an_operator_rejects_an_outbound_action_and_its_parent_fails(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    root, approval = waiting_order(session, car)

    answer = operator_client.command(f"/actions/{approval.id}/reject", {"note": "too expensive"})

    assert answer.status_code == 200
    assert f"Action {approval.id} was rejected: it failed." in answer.text
    testing.drain()
    assert (status_of(session, approval.id), status_of(session, root.id)) == ("failed", "failed")
    assert audit(session) == [("reject", "olga", "completed", "too expensive")]
    # The order's page now shows the failure path down to the rejected approval
    page = operator_client.get(f"/actions/{root.id}")
    assert 'aria-labelledby="path-title"' in page.text
    assert f'<li id="n-{approval.id}" class="tn status-failed on-path leaf">' in page.text


def test_a_second_completion_says_already_completed(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    _, approval = waiting_order(session, car)
    assert operator_client.command(f"/actions/{approval.id}/approve").status_code == 200

    second = operator_client.command(f"/actions/{approval.id}/reject", {"note": "too late"})

    assert second.status_code == 409
    assert f"Action {approval.id} is already completed (succeeded): nothing was changed." in second.text
    assert status_of(session, approval.id) == "succeeded"
    assert [(c, r) for c, _, r, _ in audit(session)] == [
        ("approve", "completed"),
        ("reject", "already_completed"),
    ]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"ticket": ', "The payload is not valid JSON (Expecting value at line 1, column 11)"),
        ("{'ticket': 1}", "The payload is not valid JSON (Expecting property name enclosed in double quotes"),
        ("[1, 2]", "The payload must be a JSON object, like {&#34;approved&#34;: true}, not an array"),
        ('"yes"', "not a string"),
        ("null", "not null"),
    ],
    ids=["truncated", "single-quotes", "array", "string", "null"],
)
def test_an_invalid_json_payload_is_refused_with_a_clear_message_and_changes_nothing(
    operator_client: StudioClient, session: Session, car: Car, payload: str, message: str
) -> None:
    _, approval = waiting_order(session, car)

    answer = operator_client.command(f"/actions/{approval.id}/approve", {"note": "ok", "payload": payload})

    assert answer.status_code == 400
    assert message in answer.text
    assert "nothing was changed" in answer.text
    assert status_of(session, approval.id) == "performing"
    assert audit_count(session) == 0


def test_approving_an_action_that_is_not_outbound_changes_nothing(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)

    answer = operator_client.command(f"/actions/{trip.honk.id}/approve")

    assert answer.status_code == 409
    assert f"Action {trip.honk.id} is not outbound" in answer.text
    assert status_of(session, trip.honk.id) == "succeeded"


# --- refusals --------------------------------------------------------------------------------


def command_data(command: str) -> dict[str, str]:
    return {"retry": {"timeout_seconds": "60"}, "approve": {"note": "n"}, "reject": {"note": "n"}}.get(
        command, {}
    )


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("htmx", [True, False], ids=["htmx", "form"])
def test_a_viewer_trying_a_command_is_refused_and_nothing_changes(
    viewer_client: StudioClient, session: Session, car: Car, command: str, htmx: bool
) -> None:
    _, approval = waiting_order(session, car)
    trip = failing_trip(session, car)
    target = trip.leg.id if command == "retry" else approval.id

    answer = viewer_client.command(f"/actions/{target}/{command}", command_data(command), htmx=htmx)

    assert answer.status_code == 403
    assert "You are signed in as victor (viewer). Only an operator may do this" in answer.text
    assert (status_of(session, approval.id), status_of(session, trip.leg.id)) == ("performing", "failed")
    assert audit_count(session) == 0


def test_a_viewer_sees_the_page_but_no_command_form(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    _, approval = waiting_order(session, car)

    page = viewer_client.get(f"/actions/{approval.id}")

    assert page.status_code == 200
    assert "You are a viewer: you see everything, and operators run the commands." in page.text
    assert f"/actions/{approval.id}/approve" not in page.text


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("token", [None, "forged-token"], ids=["missing", "wrong"])
def test_a_command_without_its_csrf_token_is_refused_and_nothing_changes(
    operator_client: StudioClient, session: Session, car: Car, command: str, token: str | None
) -> None:
    _, approval = waiting_order(session, car)
    trip = failing_trip(session, car)
    target = trip.leg.id if command == "retry" else approval.id
    data = command_data(command) | ({csrf.FIELD: token} if token else {})

    answer = operator_client.post(f"/actions/{target}/{command}", data=data, headers=HTMX)

    assert answer.status_code == 400
    assert "nothing was changed" in answer.text
    assert (status_of(session, approval.id), status_of(session, trip.leg.id)) == ("performing", "failed")
    assert audit_count(session) == 0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_on_a_missing_action_is_a_404(operator_client: StudioClient, command: str) -> None:
    answer = operator_client.command(f"/actions/999999/{command}", command_data(command))

    assert answer.status_code == 404
    assert "There is no action 999999, so nothing was changed." in answer.text
