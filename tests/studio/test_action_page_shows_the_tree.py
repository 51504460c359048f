"""Given an action, its page shows its whole tree from the root with status colours,
collapsible without JavaScript; superseded actions linked to the action that replaced them;
work shared with another tree; a timeline of its steps and children; its history with cause
and by; its arguments and result; its steps with attempt and next attempt; and each
attempt's error with its traceback. While anything in the tree runs, the live fragment
polls itself (only while the tab is visible) and it stops once the tree is finished.

Not a spec case: the studio is ours (issue 4, "Action page").
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.action import queries_timeline, queries_tree
from engine import testing
from engine.models import Action, Step
from engine.retry import RetryPolicy
from tests.domain import Car
from tests.studio.action_page_scenarios import (
    failing_trip,
    generated_tree,
    order_paint,
    status_of,
    waiting_order,
)
from tests.studio.support import HTMX, StudioClient


def tree_nodes(html: str) -> dict[int, str]:
    """Each action of the rendered tree and the status class it is coloured with."""
    found: dict[int, str] = {}
    for match in re.finditer(
        r'<li (?:id="n-\d+" )?class="tn (?:ref )?status-(\w+)[^"]*">(?:<details id="n-\d+"[^>]*><summary>)?'
        r'<span class="dot" aria-hidden="true"></span> <a href="(?:/actions/|#n-)(\d+)"',
        html,
    ):
        found.setdefault(int(match.group(2)), match.group(1))
    return found


def open_nodes(html: str) -> set[int]:
    return {int(i) for i in re.findall(r'<details id="n-(\d+)" open>', html)}


def closed_nodes(html: str) -> set[int]:
    return {int(i) for i in re.findall(r'<details id="n-(\d+)"><summary>', html)}


def test_the_page_shows_the_whole_tree_from_its_root_with_status_colours(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a trip whose leg failed, and whose errand succeeded
    trip = failing_trip(session, car)

    # When the leg's page is opened
    page = viewer_client.get(f"/actions/{trip.leg.id}")

    # Then it shows the whole tree from the root, each action coloured by its status
    assert page.status_code == 200
    assert tree_nodes(page.text) == {
        trip.trip.id: "failed",
        trip.leg.id: "failed",
        trip.breakdown.id: "failed",
        trip.errand.id: "succeeded",
        trip.honk.id: "succeeded",
    }
    # The leg is marked as the page's action, and its steps show in the tree
    assert f'<a href="/actions/{trip.leg.id}" aria-current="page">#{trip.leg.id} leg</a>' in page.text
    assert 'class="tn status-failed on-path here"' in page.text
    step_label = (
        '<li class="ts status-succeeded"><span class="tlabel"><span class="dot" aria-hidden="true"></span>'
    )
    assert f"{step_label} step beep" in page.text  # the errand's step, named as declared
    # A small tree is open all the way down, each branch a <details> that collapses without JS
    assert open_nodes(page.text) == {trip.trip.id, trip.leg.id, trip.errand.id}
    assert f'root <a href="/actions/{trip.trip.id}">#{trip.trip.id} trip</a>' in page.text
    assert f'start of <a href="/actions/{trip.trip.id}">#{trip.trip.id} trip</a>' in page.text
    assert "the tree is finished" in page.text


def test_a_big_tree_opens_its_first_levels_the_failure_path_and_the_way_to_the_action(
    viewer_client: StudioClient, session: Session
) -> None:
    # Given a generated tree of 120 actions (root -> 10 branches -> 10 children -> leaves),
    # one leaf of which failed
    root_id = generated_tree(session, 120, fail_at=3)
    leaf = session.scalars(select(Action).where(Action.name == "leaf3")).one()
    tree = queries_tree.load_tree_of_root(session, root_id)
    assert tree is not None
    path = tree.ancestors(leaf.id)
    assert len(path) == 4  # root, branch, child, leaf

    # When a succeeded leaf elsewhere is opened
    other = session.scalars(select(Action).where(Action.name == "leaf8")).one()
    page = viewer_client.get(f"/actions/{other.id}")

    # Then the root and the branches are open, and so are the failure path and the way
    # to the page's action; the other children are closed (but there, collapsed)
    opened = open_nodes(page.text)
    branches = {a for a in tree.nodes.values() if a.name.startswith("branch")}
    assert {root_id} | {b.id for b in branches} | set(path[:-1]) | set(
        tree.ancestors(other.id)[:-1]
    ) == opened
    assert closed_nodes(page.text)
    assert len(tree_nodes(page.text)) == 120
    # And "Expand all" opens every branch
    assert f'href="/actions/{other.id}?expand=all">Expand all</a>' in page.text
    expanded = viewer_client.get(f"/actions/{other.id}?expand=all")
    assert not closed_nodes(expanded.text)
    assert f'href="/actions/{other.id}">Collapse</a>' in expanded.text


def test_a_superseded_action_links_to_the_action_that_replaced_it(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a tour whose step asks for three paint jobs in one lane (outbound: the first
    # waits for the shop), so the third, queued last, supersedes the second
    engine.define(Car, "paint", order_paint, outbound=True, concurrency_key="Car/paint-shop")
    tour = engine.define(Car, "tour")

    @tour.step
    def paint_three(car: Car, step: engine.StepContext) -> None:
        for color in ("red", "green", "blue"):
            step.do("paint", color)

    root = engine.now(car, "tour")
    testing.drain()
    session.expire_all()
    red, green, blue = session.scalars(select(Action).where(Action.name == "paint").order_by(Action.id)).all()
    assert (red.status, green.status, blue.status) == ("performing", "superseded", "pending")
    assert green.superseded_by_id == blue.id

    # When the tour's page is opened
    page = viewer_client.get(f"/actions/{root.id}")

    # Then the superseded paint job is in the tree, linked to the one that replaced it
    assert tree_nodes(page.text)[green.id] == "superseded"
    assert (
        f'<span class="tag superseded-by">superseded by <a href="/actions/{blue.id}" '
        f'data-superseded-by="{blue.id}">#{blue.id}</a></span>'
    ) in page.text
    # And the superseded action's own page names its replacement, which names it back
    own = viewer_client.get(f"/actions/{green.id}")
    assert f'<a href="/actions/{blue.id}" data-superseded-by="{blue.id}">action #{blue.id}</a>' in own.text
    replacement = viewer_client.get(f"/actions/{blue.id}")
    assert f'<dt>Replaced</dt><dd><a href="/actions/{green.id}">#{green.id}</a>' in replacement.text


def test_work_shared_with_another_tree_is_shown_with_a_link_to_its_tree(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given two trees whose steps wait on the same visit (reused by its checksum)
    engine.define(Car, "visit", order_paint, outbound=True, checksum=lambda car, place: place)
    for name in ("trip", "tour"):
        engine.define(Car, name).step(lambda car, step: step.do("visit", "Paris"))
    trip = engine.now(car, "trip")
    tour = engine.now(car, "tour")
    testing.drain()
    session.expire_all()
    visit = session.scalars(select(Action).where(Action.name == "visit")).one()
    assert visit.root_id == trip.id

    # When the tour's page is opened
    page = viewer_client.get(f"/actions/{tour.id}")

    # Then its tree shows the visit, marked as belonging to the trip's tree
    assert tree_nodes(page.text)[visit.id] == "performing"
    assert f'tree <a href="/actions/{trip.id}">#{trip.id}</a>' in page.text


def test_the_page_shows_arguments_steps_and_the_timeline_relative_to_the_roots_start(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order started at a frozen time, whose approval started 10 s later and was
    # approved 30 s after that
    start = testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "approval", order_paint, outbound=True)
    order = engine.define(Car, "order")

    @order.step
    def ask(car: Car, step: engine.StepContext, amount: int, items: list[str]) -> None:
        step.do("approval", "blue")

    root = engine.now(car, "order", 120, ["wheel", "tyre"])
    testing.freeze(start + timedelta(seconds=10))
    testing.drain()
    testing.freeze(start + timedelta(seconds=40))
    session.expire_all()
    approval = session.scalars(select(Action).where(Action.name == "approval")).one()
    assert engine.commands.approve(approval.id, by="olga", payload={"ok": True})
    testing.drain()
    testing.freeze(start + timedelta(seconds=50))

    # When the order's page is opened
    page = viewer_client.get(f"/actions/{root.id}")

    # Then the arguments are pretty-printed JSON
    assert '<pre class="json" aria-label="Arguments">[\n  120,\n  [\n    &#34;wheel&#34;,' in page.text
    # The steps table shows the step, its attempt and its child
    assert re.search(
        r'<tr id="step-\d+">\s*<td><span class="step-name">ask</span> '
        r'<span class="muted small">step 1</span> <span class="muted small">current</span></td>',
        page.text,
    )
    # And the timeline draws the step from 0 % and the approval from 25 % (10 s of 40 s)
    # to the end, hatched where it was pending
    bars = re.findall(r'<span class="gfill" data-left="([\d.]+)" data-width="([\d.]+)"></span>', page.text)
    assert bars == [("0.00", "100.00"), ("25.00", "75.00")]
    assert "over 40s" in page.text
    assert f'<a href="/actions/{approval.id}">#{approval.id} approval</a></span>' in page.text


def test_each_attempt_error_is_shown_with_its_traceback_and_the_next_attempt(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a delivery whose step failed twice and waits 20 s for its third attempt
    testing.freeze(testing.travel(timedelta()))
    deliver = engine.define(
        Car, "deliver", retry=RetryPolicy(max_attempts=5, initial_interval=timedelta(seconds=10), jitter=0)
    )

    @deliver.step
    def send(car: Car, step: engine.StepContext) -> None:
        raise ConnectionError(f"courier down (try {step.step.attempt})")

    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
        testing.travel(timedelta(seconds=10))
        testing.drain()
    session.expire_all()  # the drain ran in the workers' sessions
    step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
    assert step.attempt == 3 and step.retry_at is not None

    # When its page is opened
    page = viewer_client.get(f"/actions/{action.id}")

    # Then each failed attempt is listed with its error and traceback
    assert page.text.count('<li class="error-entry" data-event="attempt_failed">') == 2
    assert "<code>builtins.ConnectionError</code> courier down (try 1)" in page.text
    assert "<code>builtins.ConnectionError</code> courier down (try 2)" in page.text
    assert re.search(
        r'<details id="tb-\d+" class="traceback"><summary>Traceback</summary><pre>Traceback', page.text
    )
    assert "raise ConnectionError(f&#34;courier down (try {step.step.attempt})&#34;)" in page.text
    # And the step shows its attempt and when the next one is due
    assert re.search(
        r'<td class="num">3 <span class="muted small nowrap" title="[^"]+">3 of 5</span></td>\s*'
        r'<td>\S+ \S+ <span class="muted small">\(in 20s\)</span></td>',
        page.text,
    )
    assert (
        '<span class="tmeta">step send attempt 3</span> <span class="tmeta">next attempt in 20s</span>'
        in page.text
    )


def test_the_history_shows_events_with_cause_and_by_for_the_action_or_its_whole_tree(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order whose approval an operator approved
    root, approval = waiting_order(session, car)
    engine.commands.approve(approval.id, by="olga", note="fine")
    testing.drain()

    # When the approval's page is opened
    page = viewer_client.get(f"/actions/{approval.id}")

    # Then its history lists its own events, newest first, with their cause and by
    events = re.findall(
        r'<tr data-event="(\w+)">.*?<td>([\w ]+)</td>\s*<td>(\w+)</td>\s*<td>([\w—]+)</td>', page.text, re.S
    )
    assert events[0] == ("completed", "completed", "operator", "olga")
    assert {e[0] for e in events} >= {"admitted", "started", "awaiting_completion", "completed"}
    assert all(e[0] not in ("children_spawned",) for e in events)  # the order's, not its own
    # And the whole tree's history adds the order's events, each linked to its action
    tree = viewer_client.get(f"/actions/{approval.id}?history=tree")
    assert '<tr data-event="children_spawned">' in tree.text
    assert f'<td><a href="/actions/{root.id}">#{root.id}</a></td>' in tree.text


def test_the_history_is_paged_by_keyset(session: Session, car: Car) -> None:
    root, _ = waiting_order(session, car)

    first, older = queries_timeline.history(
        session, action_id=root.id, tree_id=root.id, whole_tree=True, before=None, limit=3
    )
    second, _ = queries_timeline.history(
        session, action_id=root.id, tree_id=root.id, whole_tree=True, before=older, limit=3
    )

    assert len(first) == 3 and older == first[-1].id
    assert [e.id for e in first + second] == sorted((e.id for e in first + second), reverse=True)
    assert not {e.id for e in first} & {e.id for e in second}


def test_waits_and_skipped_work_show_under_their_step(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a trip whose step waits an hour and invokes a visit that was already achieved
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, place: place)
    engine.now(car, "visit", "Paris")
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.wait(timedelta(hours=1))
        step.do("visit", "Paris")

    root = engine.now(car, "trip")
    testing.drain()

    page = viewer_client.get(f"/actions/{root.id}")

    assert re.search(
        r'class="ti status-pending"><span class="dot" aria-hidden="true"></span> wait until [^<]+'
        r'<span class="tstatus">waiting</span>',
        page.text,
    )
    assert (
        '> visit <span class="tmeta">Car/1</span> <span class="tstatus">skipped (already achieved)</span>'
        in (page.text)
    )


def test_the_live_fragment_polls_while_the_tree_runs_and_stops_when_it_is_finished(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given an order waiting on its approval
    root, approval = waiting_order(session, car)

    # When its page is opened, the live fragment polls while the tab is visible
    page = viewer_client.get(f"/actions/{root.id}")
    assert f'hx-get="/actions/{root.id}/live?commands_for=performing"' in page.text
    assert "hx-trigger=\"every 3s, stepwise:visible\"" in page.text
    assert "live: refreshes every 3 s while the tree runs" in page.text
    # And htmx asking for the page gets the live fragment alone
    fragment = viewer_client.get(f"/actions/{root.id}", headers=HTMX)
    assert fragment.text.lstrip().startswith('<div id="action-live"') and "<html" not in fragment.text
    # While nothing changed, a poll keeps the page's commands (a note being typed stays)
    poll = viewer_client.get(f"/actions/{root.id}/live?commands_for=performing", headers=HTMX)
    assert 'data-running="true"' in poll.text
    assert '<section id="action-commands" class="panel action-commands" hx-preserve="true">' in poll.text

    # When the approval is completed from outside and the order finishes
    engine.commands.approve(approval.id, by="webhook")
    testing.drain()
    assert status_of(session, root.id) == "succeeded"

    # Then the next poll answers without the polling attributes, and with the commands
    last = viewer_client.get(f"/actions/{root.id}/live?commands_for=performing", headers=HTMX)
    assert 'data-running="false"' in last.text and "hx-get" not in last.text and "hx-trigger" not in last.text
    assert '<section id="action-commands"' in last.text and "hx-preserve" not in last.text
    assert 'data-status="succeeded"' in last.text
    # And the page keeps the view's options (expand, history) in its polling URL
    kept = viewer_client.get(f"/actions/{approval.id}?expand=all&history=tree")
    assert "the tree is finished" in kept.text


def test_the_polling_url_keeps_the_views_options(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    root, _ = waiting_order(session, car)

    page = viewer_client.get(f"/actions/{root.id}?expand=all&history=tree&view=graph")

    assert (
        f'hx-get="/actions/{root.id}/live?commands_for=performing&amp;expand=all&amp;history=tree&amp;view=graph"'
        in page.text
    )


def test_a_missing_action_is_a_404(viewer_client: StudioClient) -> None:
    page = viewer_client.get("/actions/424242")
    live = viewer_client.get("/actions/424242/live", headers=HTMX)

    assert page.status_code == live.status_code == 404
    assert "There is no action 424242" in page.text
