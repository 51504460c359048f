"""Given work that needs a person, the overview opens with it: outbound actions waiting (an
approval listed as soon as it waits, the oldest first, with how long, and Approve / Reject
forms that call the engine's commands with the CSRF token and are audited like the action
page's), the failed trees awaiting a decision (their roots, with the error that failed
them), and the actions that look stuck. Each links to the filtered actions list.

Not a spec case: the studio is ours (issue 12, "Needs attention, first").
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import testing
from engine.audit import AuditEntry
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip, status_of, waiting_order
from tests.studio.support import HTMX, StudioClient, forms


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


def attention(html: str) -> str:
    found = re.search(r'<section id="overview-attention".*?</section>', html, re.S)
    assert found is not None, html
    return found.group(0)


def waiting_ids(html: str) -> list[int]:
    block = re.search(r'<ul class="decisions">(.*?)</ul>', attention(html), re.S)
    return [int(n) for n in re.findall(r'<li data-action="(\d+)">', block.group(1))] if block else []


def words(text: str) -> str:
    return " ".join(text.split())


def test_an_approval_waiting_ten_seconds_is_listed_first_with_how_long(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order whose approval has waited 10 seconds, and a paint job after it
    testing.freeze()
    _order, approval = waiting_order(session, car)
    engine.define(Car, "paint", order_paint, outbound=True)
    testing.travel(timedelta(seconds=5))
    paint = engine.now(car, "paint", "red")
    testing.travel(timedelta(seconds=5))

    page = operator_client.get("/")

    # Then both wait, the oldest first, with how long and a count
    assert waiting_ids(page.text) == [approval.id, paint.id]
    block = attention(page.text)
    assert 'data-waiting="2"' in block
    assert "waiting 10s" in block
    assert "waiting 5s" in block
    # And the heading links to the filtered list of waiting actions
    assert 'href="/actions/?status=performing&amp;outbound=1"' in block
    # And each has an Approve form (Reject on the same form, with the note) with the token
    (form,) = [f for f in forms(block) if f.action == f"/overview/approve/{approval.id}"]
    assert form.method == "post"
    assert form.attributes["hx-target"] == "#overview-attention"
    assert "note" in form.inputs
    assert form.inputs["csrf_token"] == operator_client.csrf_token()
    assert f'formaction="/overview/reject/{approval.id}"' in block
    # And "Needs attention" comes before every other panel
    assert page.text.index('id="overview-attention"') < page.text.index('id="overview-counts"')


def test_approving_from_the_overview_completes_the_action_and_is_audited(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    order, approval = waiting_order(session, car)

    answer = operator_client.command(f"/overview/approve/{approval.id}", {"note": "ok by phone"})

    # Then the approval succeeded and its order went on
    assert answer.status_code == 200
    assert status_of(session, approval.id) == "succeeded"
    testing.drain()
    assert status_of(session, order.id) == "succeeded"
    # And the answer is the refreshed panel, without it, and a message
    assert answer.text.lstrip().startswith('<section id="overview-attention"')
    assert waiting_ids(answer.text) == []
    assert f"Action {approval.id} was approved: it succeeded." in answer.text
    # And it is audited like the action page's command: who, what and why
    session.expire_all()
    (entry,) = session.scalars(select(AuditEntry)).all()
    assert (entry.command, entry.target, entry.by, entry.reason, entry.result) == (
        "approve",
        f"action:{approval.id}",
        "olga",
        "ok by phone",
        "completed",
    )


def test_rejecting_from_the_overview_fails_the_action(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    _order, approval = waiting_order(session, car)

    answer = operator_client.command(f"/overview/reject/{approval.id}", {"note": "too expensive"})

    assert answer.status_code == 200
    assert status_of(session, approval.id) == "failed"
    assert f"Action {approval.id} was rejected: it failed." in answer.text
    session.expire_all()
    (entry,) = session.scalars(select(AuditEntry)).all()
    assert (entry.command, entry.reason) == ("reject", "too expensive")


def test_without_javascript_the_decision_redirects_back_to_the_overview(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    _order, approval = waiting_order(session, car)

    answer = operator_client.command(f"/overview/approve/{approval.id}", htmx=False)

    assert answer.status_code == 303
    assert answer.headers["Location"].endswith("/")
    assert f"Action {approval.id} was approved" in operator_client.get("/").text


def test_a_second_decision_changes_nothing_and_says_so(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    _order, approval = waiting_order(session, car)
    operator_client.command(f"/overview/approve/{approval.id}")

    again = operator_client.command(f"/overview/reject/{approval.id}")

    assert again.status_code == 409
    assert "already completed: nothing was changed" in again.text
    assert status_of(session, approval.id) == "succeeded"
    missing = operator_client.command("/overview/approve/999999")
    assert missing.status_code == 404


def test_viewers_see_what_waits_but_cannot_decide(
    viewer_client: StudioClient, operator_client: StudioClient, session: Session, car: Car
) -> None:
    _order, approval = waiting_order(session, car)

    page = viewer_client.get("/")
    refused = viewer_client.command(f"/overview/approve/{approval.id}")
    without_token = operator_client.post(f"/overview/approve/{approval.id}", headers=HTMX)

    assert waiting_ids(page.text) == [approval.id]
    assert "/overview/approve/" not in page.text
    assert refused.status_code == 403
    assert without_token.status_code in (400, 403)
    assert status_of(session, approval.id) == "performing"


def test_failed_trees_are_listed_by_their_roots_with_the_error_below(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)

    block = attention(viewer_client.get("/").text)

    # One failed tree (its root), though three of its actions failed
    assert 'data-failed="1"' in block
    assert f'<li data-action="{trip.trip.id}">' in block
    assert f'<li data-action="{trip.leg.id}">' not in block
    # With the error raised below it, and where
    assert "RuntimeError</code> in" in block
    assert f'href="/actions/{trip.breakdown.id}">breakdown</a>: breakdown' in block
    # And links to the failed roots and to the failures grouped by error
    assert 'href="/actions/?status=failed"' in block
    assert 'href="/actions/errors"' in block


def test_actions_that_look_stuck_link_to_a_list_of_them(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    testing.freeze()
    engine.define(Car, "paint", order_paint, outbound=True)
    paint = engine.now(car, "paint", "red")
    testing.travel(timedelta(hours=1))

    block = attention(viewer_client.get("/").text)

    assert 'data-stuck="1"' in block
    assert f'href="/actions/?ids={paint.id}"' in block
    listed = viewer_client.get(f"/actions/?ids={paint.id}")
    assert re.findall(r'<tr data-id="(\d+)"', listed.text) == [str(paint.id)]


def test_the_panel_polls_itself_and_nothing_needs_attention_on_a_quiet_day(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.now(car, "drive", 5)

    fragment = viewer_client.get("/overview/attention", headers=HTMX)

    assert fragment.text.lstrip().startswith('<section id="overview-attention"')
    assert 'hx-get="/overview/attention"' in fragment.text
    text = words(fragment.text)
    assert "No approval, signal or outbound action is waiting." in text
    assert "No failed tree is waiting for a decision." in text
    assert "Nothing looks stuck." in text


def test_an_action_waiting_for_an_approval_signal_is_listed_with_its_deadline_and_approved_with_a_payload(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a refund whose step waits for an approval for a day, and one waiting for a partner
    chosen: list[object] = []
    refund = engine.define(Car, "refund", concurrency_key=lambda car, n: f"refund/{n}")

    @refund.step
    def ask(car: Car, step: engine.StepContext, n: int) -> None:
        step.wait_for_approval(timeout=86400)

    @refund.step
    def pay(car: Car, step: engine.StepContext, n: int) -> None:
        chosen.append((step.signal.name, step.signal.payload) if step.signal else None)

    callback = engine.define(Car, "callback")

    @callback.step
    def hold(car: Car, step: engine.StepContext) -> None:
        step.wait_for("delivered")

    waiting = engine.now(car, "refund", 1)
    partner = engine.now(car, "callback")

    # When the overview lists what waits
    page = operator_client.get("/overview/attention", headers=HTMX).text

    # Then both are there with what they wait for; only the approval offers Approve/Reject
    assert f'data-action="{waiting.id}"' in page and f'data-action="{partner.id}"' in page
    assert "waits for approved or rejected until" in words(page)
    assert "waits for delivered" in words(page)
    assert page.count('name="payload"') == 1

    # And approving it with a JSON payload sends the signal the step waits for
    answer = operator_client.command(
        f"/overview/approve/{waiting.id}", {"note": "ok by finance", "payload": '{"route": "express"}'}
    )
    assert answer.status_code == 200
    assert "its step carries on with the answer" in words(answer.text)
    testing.drain()
    assert chosen == [("approved", {"route": "express"})]
    entry = session.scalars(select(AuditEntry).order_by(AuditEntry.id.desc())).first()
    assert entry is not None and (entry.command, entry.result) == ("approve", "consumed")


def test_a_payload_that_is_not_json_is_refused_with_a_400(operator_client: StudioClient, car: Car) -> None:
    refund = engine.define(Car, "refund")

    @refund.step
    def ask(car: Car, step: engine.StepContext) -> None:
        step.wait_for_approval()

    waiting = engine.now(car, "refund")
    answer = operator_client.command(f"/overview/approve/{waiting.id}", {"payload": "{nope"})
    assert answer.status_code == 400
    assert "The payload is not valid JSON" in answer.text
