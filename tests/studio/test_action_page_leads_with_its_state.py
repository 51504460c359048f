"""The action page leads with its state: the status large at the top with what it is doing
or why it stopped; steps named as declared; arguments with their parameters' names; the
first start kept true after a retry, with each run and each attempt's start and end; a
history whose entries link the steps, invocations and actions they mention; the API link
and "Copy as JSON".

Not a spec case: the studio is ours (issue 12, "The action page leads with its state").
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import commands, testing
from engine.models import Action
from engine.retry import RetryPolicy
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip, waiting_order
from tests.studio.support import StudioClient


def state_line(html: str) -> str:
    found = re.search(r'<p class="state-line">(.*?)</p>', html, re.S)
    assert found is not None
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", found[1])).strip()


def test_a_failed_action_says_large_where_and_why_it_failed(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    page = viewer_client.get(f"/actions/{trip.trip.id}").text
    assert '<span class="badge status-failed state-badge">failed</span>' in page
    assert state_line(page).startswith(
        f"at step start because #{trip.breakdown.id} breakdown failed: builtins.RuntimeError breakdown ·"
    )


def test_a_waiting_action_says_what_it_waits_for(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    root, approval = waiting_order(session, car)
    page = viewer_client.get(f"/actions/{root.id}").text
    assert '<span class="badge status-performing state-badge">performing</span>' in page
    assert state_line(page).startswith("step ask: waiting on 1 of 1")
    outbound = viewer_client.get(f"/actions/{approval.id}").text
    assert "waiting to be completed from outside" in state_line(outbound)


def test_arguments_are_shown_with_their_parameter_names(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order started with its amount (the step is declared ask(car, step, amount))
    root, _ = waiting_order(session, car)
    page = viewer_client.get(f"/actions/{root.id}").text
    # Then the argument is named, and the JSON as stored is one click away
    assert '<tr><th scope="row" class="mono">amount</th><td><pre class="json">120</pre></td></tr>' in page
    assert '<pre class="json" aria-label="Arguments">[\n  120\n]</pre>' in page


def test_a_retried_action_keeps_its_first_start_and_shows_each_run_and_attempt(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a delivery with 2 attempts that failed them both, an hour in
    start = testing.travel(timedelta())
    testing.freeze(start)
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=2, jitter=0))
    action = engine.later(car, "deliver")
    session.commit()
    testing.travel(timedelta(hours=1))
    with testing.handle_exceptions():
        testing.drain()
        testing.travel(timedelta(seconds=1))
        testing.drain()
    # When an operator retries it a day later, and it fails twice again
    testing.travel(timedelta(days=1))
    assert commands.retry(action.id, by="olga")
    with testing.handle_exceptions():
        testing.drain()
        testing.travel(timedelta(seconds=1))
        testing.drain()
    session.expire_all()
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]

    page = viewer_client.get(f"/actions/{action.id}").text

    # Then it shows when it first started (an hour in), not when the retry started it again
    first_run = start + timedelta(hours=1)
    started = re.search(r"<dt>Started</dt><dd>(.*?)</dd>", page)
    assert started is not None, page
    assert started[1].startswith(first_run.strftime("%Y-%m-%d %H:%M:%S")), started[1]
    # and both runs are listed, each with its start and end
    runs = re.findall(r'<li data-run="(\d)">(.*?) → (.*?) <span', page)
    assert [r[0] for r in runs] == ["1", "2"]
    assert runs[0][1] == first_run.strftime("%Y-%m-%d %H:%M:%S")
    assert runs[1][1] > runs[0][2]  # the second began after the first ended: a day later
    # and the step's four attempts, numbered 1, 2 then 3, 4 after the retry, each ended
    attempts = re.findall(r'<li class="status-failed" data-attempt="(\d)">', page)
    assert attempts == ["1", "2", "3", "4"]


def test_steps_are_named_as_declared(viewer_client: StudioClient, session: Session, car: Car) -> None:
    trip = failing_trip(session, car)
    page = viewer_client.get(f"/actions/{trip.leg.id}").text
    assert '<span class="step-name">go</span> <span class="muted small">step 1</span>' in page
    assert "· step go failed, 1 unsuccessful" in page  # the failure path
    assert f'step go of <a href="/actions/{trip.trip.id}"' not in page  # the leg's parent is trip's start
    assert f'step start of <a href="/actions/{trip.trip.id}">' in page


def test_history_entries_link_what_they_mention(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    page = viewer_client.get(f"/actions/{trip.leg.id}?history=tree").text
    step = session.scalars(
        select(engine.models.Step.id).where(engine.models.Step.action_id == trip.leg.id)
    ).one()
    # the leg's own step, by name, to its row in the steps table
    assert f'<a href="#step-{step}" data-step="{step}">step go</a>' in page
    # another action's step, to that action's page
    assert f'<a href="/actions/{trip.trip.id}#step-' in page
    # and an invocation, to the action it became
    assert re.search(
        rf'<a href="/actions/{trip.breakdown.id}" data-invocation="\d+">'
        rf"#\d+ → action #{trip.breakdown.id}</a>",
        page,
    )


def test_the_page_links_its_api_and_copies_it_as_json(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)
    page = viewer_client.get(f"/actions/{trip.leg.id}").text
    assert f'<a href="/api/actions/{trip.leg.id}" class="api-link"' in page
    assert f'data-copy-json="/api/actions/{trip.leg.id}" hidden>Copy as JSON</button>' in page
    assert viewer_client.get(f"/api/actions/{trip.leg.id}").json["id"] == trip.leg.id


def test_a_retry_from_the_page_gives_the_step_its_whole_budget_again(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a delivery whose 2 attempts failed
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=2, jitter=0))
    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
        testing.travel(timedelta(seconds=2))
        testing.drain()
    page = operator_client.get(f"/actions/{action.id}").text
    assert re.search(r'<td class="num">2 <span class="muted small nowrap" title="[^"]+">2 of 2</span>', page)

    # When the operator retries it from its page and its first attempt fails again
    assert operator_client.command(f"/actions/{action.id}/retry").status_code == 200
    with testing.handle_exceptions():
        testing.drain()

    # Then it waits for an automatic retry: attempt 4, the second of its new run
    session.expire_all()
    assert session.get(Action, action.id).status == "performing"  # type: ignore[union-attr]
    page = operator_client.get(f"/actions/{action.id}").text
    assert re.search(r'<td class="num">4 <span class="muted small nowrap" title="[^"]+">2 of 2</span>', page)


def test_a_step_visited_again_by_a_decision_is_shown_once_per_visit(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a wash that rinses again until the car is clean (two rinses), then inspects
    wash = engine.define(Car, "wash")

    @wash.step
    def rinse(car: Car, step: engine.StepContext) -> None:
        car.honk()
        if car.honks < 2:
            step.go_to("rinse")

    @wash.step
    def inspect(car: Car, step: engine.StepContext) -> None:
        pass

    action = engine.now(car, "wash")
    testing.drain()
    session.expire_all()
    assert session.get(Action, action.id).status == "succeeded"  # type: ignore[union-attr]

    # Then the steps table lists each visit in the order they ran, named as declared
    page = viewer_client.get(f"/actions/{action.id}").text
    rows = re.findall(
        r'<td><span class="step-name">(\w+)</span> <span class="muted small">step \d</span>'
        r'(?: <span class="muted small">visit (\d)</span>)?',
        page,
    )
    assert rows == [("rinse", ""), ("rinse", "2"), ("inspect", "")]
    assert "step rinse (visit 2)" in page  # in the tree
