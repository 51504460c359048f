"""Given a tree that failed, the action page highlights the failure path: from the root,
through each step that failed and the child that failed it, down to the deepest failing
action (or an invocation refused before it became an action), with the cause's error and
traceback.

Not a spec case: the studio is ours (issue 4, "Action page": "the failure path from the root
to the failing leaf, highlighted").
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.action.tree_model import Node, StepNode, Tree
from engine import testing
from engine.models import Action
from tests.domain import Car
from tests.studio.action_page_scenarios import failing_trip, order_paint, status_of
from tests.studio.support import StudioClient


def highlighted(html: str) -> list[int]:
    """The actions of the tree marked as on the failure path (branches, then leaves)."""
    branches = re.findall(r'<li class="tn status-\w+ on-path[^"]*"><details id="n-(\d+)"', html)
    leaves = re.findall(r'<li id="n-(\d+)" class="tn status-\w+ on-path', html)
    return [int(i) for i in branches + leaves]


def path_items(html: str) -> list[str]:
    """The failure path panel's items: "#id name status"."""
    panel = html.split('<ol class="path">', 1)[1].split("</ol>", 1)[0]
    return [
        " ".join(re.sub(r"<[^>]+>", " ", item).split())
        for item in re.findall(r"<li class=\"status-\w+[^\"]*\">(.*?)</li>", panel, re.S)
    ]


def test_the_failure_path_runs_from_the_root_to_the_failing_leaf(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a trip whose leg's breakdown raised, while its errand succeeded
    trip = failing_trip(session, car)

    # When the root's page is opened
    page = viewer_client.get(f"/actions/{trip.trip.id}")

    # Then the failure path goes root -> leg -> breakdown, each with its failed step
    assert path_items(page.text) == [
        f"#{trip.trip.id} trip failed · step start failed, 1 unsuccessful",
        f"#{trip.leg.id} leg failed · step go failed, 1 unsuccessful",
        f"#{trip.breakdown.id} breakdown failed · step breakdown failed",
    ]
    # And the cause is the breakdown's error, with its traceback
    assert (
        f'<strong>Cause:</strong> <a href="/actions/{trip.breakdown.id}">#{trip.breakdown.id} breakdown</a> '
        "failed: <code>builtins.RuntimeError</code> breakdown"
    ) in page.text
    assert (
        '<details id="path-traceback" class="traceback"><summary>Traceback</summary><pre>Traceback'
        in page.text
    )
    assert "RuntimeError: breakdown" in page.text
    assert "No error of its own: it failed because of the work below it (see the failure path)." in page.text
    # And in the tree, exactly those three actions and their failed steps are highlighted
    assert sorted(highlighted(page.text)) == sorted([trip.trip.id, trip.leg.id, trip.breakdown.id])
    assert page.text.count('class="ts status-failed on-path"') == 2  # the trip's and the leg's
    assert f'<li id="n-{trip.honk.id}" class="tn status-succeeded leaf">' in page.text


def test_every_page_of_the_tree_shows_the_same_path(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    trip = failing_trip(session, car)

    page = viewer_client.get(f"/actions/{trip.honk.id}")

    assert [item.split(" ")[0] for item in path_items(page.text)] == [
        f"#{trip.trip.id}",
        f"#{trip.leg.id}",
        f"#{trip.breakdown.id}",
    ]


def test_the_path_ends_at_an_invocation_refused_before_admission(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given a trip whose hire is refused by its before hook (it never becomes an action)
    hire = engine.define(Car, "hire", Car.honk)

    @hire.before
    def check_licence(car: Car, action: Action) -> None:
        raise PermissionError("no licence")

    engine.define(Car, "trip").step(lambda car, step: step.do("hire"))
    with testing.handle_exceptions():
        root = engine.now(car, "trip")
        testing.drain()
    assert status_of(session, root.id) == "failed"
    assert session.scalars(select(Action).where(Action.name == "hire")).all() == []

    # When the trip's page is opened
    page = viewer_client.get(f"/actions/{root.id}")

    # Then the path ends at the refused invocation, with its error
    assert path_items(page.text) == [
        f"#{root.id} trip failed · step 1 failed, 1 unsuccessful",
        "hire on Car/1 failed before admission",
    ]
    assert (
        "<strong>Cause:</strong> the invocation of hire was refused before it became an action: "
        "<code>builtins.PermissionError</code> no licence."
    ) in page.text
    # And it is shown under its step in the tree, highlighted
    assert re.search(
        r'<li class="ti status-failed on-path"><span class="dot" aria-hidden="true"></span> hire '
        r'<span class="tmeta">Car/1</span> <span class="tstatus">failed before admission</span> '
        r'<span class="terror"><code>builtins.PermissionError</code> no licence</span></li>',
        page.text,
    )
    # And the trip's errors list the child refused before admission
    assert '<li class="error-entry" data-event="invocation_failed">' in page.text


def test_the_path_ends_at_a_deadlocked_invocation(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    # Given recycle, holding the maintenance lane, whose grandchild drive wants that lane
    engine.define(Car, "recycle", concurrency_key="Car/maintenance").step(
        lambda car, step: step.do("prepare_recycle")
    )
    engine.define(Car, "prepare_recycle").step(lambda car, step: step.do("drive", 1))
    engine.define(Car, "drive", concurrency_key="Car/maintenance")
    with testing.handle_exceptions(engine.Deadlock):
        root = engine.now(car, "recycle")
        testing.drain()
    session.expire_all()
    prepare = session.scalars(select(Action).where(Action.name == "prepare_recycle")).one()

    page = viewer_client.get(f"/actions/{root.id}")

    assert path_items(page.text) == [
        f"#{root.id} recycle failed · step 1 failed, 1 unsuccessful",
        f"#{prepare.id} prepare_recycle failed · step 1 failed, 1 unsuccessful",
        "drive on Car/1 deadlocked before admission",
    ]
    assert "<code>engine.errors.Deadlock</code> drive on Car/1 would wait for lane" in page.text


def test_the_path_ends_at_a_timed_out_child(viewer_client: StudioClient, session: Session, car: Car) -> None:
    # Given a trip whose outbound paint job timed out
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "paint", order_paint, outbound=True, timeout=timedelta(seconds=5))
    engine.define(Car, "trip").step(lambda car, step: step.do("paint", "red"))
    root = engine.now(car, "trip")
    testing.drain()
    testing.travel(timedelta(seconds=6))
    testing.drain()
    session.expire_all()
    paint = session.scalars(select(Action).where(Action.name == "paint")).one()
    assert (status_of(session, root.id), paint.status) == ("failed", "timed_out")

    page = viewer_client.get(f"/actions/{root.id}")

    assert path_items(page.text)[-1] == f"#{paint.id} paint timed out"
    assert (
        f'<strong>Cause:</strong> <a href="/actions/{paint.id}">#{paint.id} paint</a> timed out '
        "(its timeout passed)." in page.text
    )


def test_a_succeeded_tree_has_no_failure_path(
    viewer_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "trip").step(lambda car, step: step.do("honk"))
    root = engine.now(car, "trip")
    testing.drain()

    page = viewer_client.get(f"/actions/{root.id}")

    assert status_of(session, root.id) == "succeeded"
    assert "Failure path" not in page.text and "on-path" not in page.text


# --- which child explains a failure (the read model alone) -----------------------------------

T0 = datetime(2030, 1, 1)


def node(action_id: int, state: str, completed: int | None = None) -> Node:
    return Node(
        id=action_id,
        name=f"a{action_id}",
        actor_type="Car",
        actor_id="1",
        status=state,
        root_id=None if action_id == 1 else 1,
        outbound=False,
        superseded_by_id=None,
        concurrency_key=f"k{action_id}",
        current_step_index=0,
        created_at=T0,
        started_at=T0,
        completed_at=T0 + timedelta(seconds=completed) if completed is not None else None,
        error_class=None,
        error_message=None,
    )


def tree_of(root: Node, children: list[Node], *, unsuccessful: int) -> Tree:
    step = StepNode(
        id=100,
        action_id=root.id,
        definition_index=0,
        status="failed",
        attempt=1,
        retry_at=None,
        pending_actions_count=0,
        unsuccessful_actions_count=unsuccessful,
        started_at=T0,
        performed_at=T0,
        completed_at=T0,
        children=[c.id for c in children],
    )
    root.steps.append(step)
    return Tree(root.id, {n.id: n for n in [root, *children]}, {step.id: step})


def test_a_failed_child_explains_more_than_a_cancelled_one_and_the_first_to_fail_wins() -> None:
    tree = tree_of(
        node(1, "failed", 10),
        [node(2, "cancelled", 3), node(3, "failed", 5), node(4, "failed", 4), node(5, "succeeded", 1)],
        unsuccessful=3,
    )

    path = tree.failure_path()

    assert path is not None and [a.id for a in path.actions] == [1, 4]


def test_children_cancelled_with_a_timed_out_action_are_not_its_cause() -> None:
    tree = tree_of(
        node(1, "timed_out", 10), [node(2, "cancelled", 10), node(3, "cancelled", 10)], unsuccessful=2
    )

    path = tree.failure_path()

    assert path is not None and [a.id for a in path.actions] == [1]


def test_a_performing_root_with_a_failed_child_already_shows_the_path() -> None:
    tree = tree_of(node(1, "performing"), [node(2, "failed", 3), node(3, "performing")], unsuccessful=1)
    tree.root.steps[0].status = "performing"

    path = tree.failure_path()

    assert path is not None and [a.id for a in path.actions] == [1, 2]
    assert tree.running
