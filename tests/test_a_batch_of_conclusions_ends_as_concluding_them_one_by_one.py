"""A group-commit batch concludes its step bodies together (engine/batch_conclusion.py;
what it costs: test_a_batch_of_conclusions_takes_the_statements_of_one.py). Every body
ends as it would concluded alone, one by one in step id order: a lane with a member
queued passes on to it, a step waiting on the batch's actions moves its action on, an
action cancelled while its body ran stays cancelled, a body delivered twice concludes
once, and what is not the common case (a failure, a step that is not its action's last)
is concluded step by step."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import batch_conclusion, broker, commands, db, running, status, step_body, testing
from engine.conclusion import Outcome, conclude_body
from engine.group_commit import Unit
from engine.models import Action, ActionEvent, Invocation, Performance, Step
from tests.conclusion_batches import admit, declare, open_steps, run_body, step_of
from tests.domain import Car


def bodies_run(session: Session, car: Car) -> tuple[list[tuple[int, Outcome]], int]:
    """For ``car``: every open body run (the first wash's twice, as a message delivered
    twice), with a wash in bay 4 cancelled after its body ran; and that wash's id."""
    started = (
        ("wash", (3,)),
        ("wash", (3,)),
        ("tour", ()),
        ("breakdown", ()),
        ("wash", (4,)),
        ("convoy", ()),
    )
    for name, args in started:
        engine.later(car, name, *args)
    engine.later(car, "trip")
    engine.later(car, "errand")
    session.commit()
    admit(list(session.scalars(select(Invocation.id).where(Invocation.settled_at.is_(None)))))
    for parent in (trip_of(session, car), errand_of(session, car)):
        go = session.scalars(select(Step.id).join(Action).where(Action.id == parent)).one()
        with db.transaction() as own:
            step_body.perform_and_conclude(own, go)  # its children are recorded with its body
        admit(list(session.scalars(select(Invocation.id).where(Invocation.parent_step_id == go))))
    ran = [(step_id, run_body(step_id)) for step_id in open_steps(session, car)]
    first_wash = next(step_id for step_id, _ in ran if step_of(session, step_id) == ("wash", [1]))
    ran.append((first_wash, run_body_again(ran, first_wash)))
    convoy = next(step_id for step_id, _ in ran if step_of(session, step_id) == ("convoy", []))
    ran.append((convoy, run_body_again(ran, convoy)))
    washes = session.scalars(
        select(Action).where(Action.name == "wash", Action.actor_id == str(car.id))
    ).all()
    wash_4 = next(action.id for action in washes if action.arguments_json == [4])
    commands.cancel(wash_4)
    return ran, wash_4


def trip_of(session: Session, car: Car, name: str = "trip") -> int:
    return session.scalars(select(Action.id).where(Action.name == name, Action.actor_id == str(car.id))).one()


def errand_of(session: Session, car: Car) -> int:
    return trip_of(session, car, "errand")


def run_body_again(ran: list[tuple[int, Outcome]], step_id: int) -> Outcome:
    return next(outcome for ran_id, outcome in ran if ran_id == step_id)


def finish(session: Session, car: Car) -> None:
    """Run what the conclusions made ready, and everything after it."""
    with testing.handle_exceptions():
        running.run_steps(open_steps(session, car))
        testing.drain()


def state_of(session: Session, car: Car) -> dict[str, Any]:
    """What ``car``'s actions came to, with nothing that differs between two cars."""
    session.expire_all()
    actions = session.scalars(select(Action).where(Action.actor_id == str(car.id)).order_by(Action.id)).all()
    ids = [action.id for action in actions]
    # By action, not by id: a batch may open two actions' steps in another order
    steps = session.scalars(
        select(Step).where(Step.action_id.in_(ids)).order_by(Step.action_id, Step.definition_index)
    ).all()
    events = session.scalars(
        select(ActionEvent).where(ActionEvent.action_id.in_(ids)).order_by(ActionEvent.id)
    )
    names = {action.id: action.name for action in actions}
    by_action: dict[int, list[str]] = {action_id: [] for action_id in ids}
    for entry in events:
        by_action[entry.action_id].append(entry.event)  # type: ignore[index]
    lanes = session.scalars(select(Performance.concurrency_key)).all()
    return {
        "actions": [(a.name, a.arguments_json, a.status, a.result) for a in actions],
        "steps": [
            (names[s.action_id], s.definition_index, s.status, s.result, s.performed_at is not None)
            for s in steps
        ],
        "history": [by_action[action_id] for action_id in ids],
        "lanes": sorted(
            key.replace(f"{car.id}/", "") for key in lanes if key and key.startswith(f"{car.id}/")
        ),
    }


def test_a_batch_of_conclusions_ends_as_concluding_them_one_by_one(session: Session) -> None:
    declare()
    together, alone = Car(id=1), Car(id=2)
    session.add_all([together, alone])
    session.commit()

    # Given, for each of two cars, bodies that ran and wait to be concluded: two washes
    # a trip waits on, a wash an errand's last step waits on, a wash with another queued
    # behind it in its lane, the first step of a two-step tour, a breakdown that failed, a
    # wash cancelled while its body ran, a convoy's body that started two washes, and the
    # first wash's and the convoy's bodies run twice
    ran_together, cancelled = bodies_run(session, together)
    ran_alone, _ = bodies_run(session, alone)

    # When the first car's are concluded in one batch, and the second's one by one
    units = [Unit(None, batch_conclusion.conclude_all, item) for item in ran_together]
    with db.transaction() as batch:
        batch_conclusion.conclude_all(batch, units)
    for unit in units:  # each unit's messages, sent after the commit (as group_commit does)
        for callback in unit.after_commit:
            broker.run_callback(callback)
    for step_id, outcome in sorted(ran_alone, key=lambda item: item[0]):
        with db.transaction() as own:
            conclude_body(own, step_id, outcome)

    # Then both came to the same: the trip's first step concluded, the errand succeeded
    # with its step's result, the second wash in bay 3 performs, the tour is at its second
    # step, the breakdown failed, the cancelled wash stayed cancelled, and the first wash
    # concluded once
    assert state_of(session, together) == state_of(session, alone)
    state = state_of(session, together)
    assert ("errand", [], status.SUCCEEDED, "errand done") in state["actions"]
    assert ("errand", 0, status.STEP_SUCCEEDED, "errand done", True) in state["steps"]
    assert ("convoy", [], status.PERFORMING, None) in state["actions"]
    assert ("convoy", 0, status.STEP_PERFORMING, "convoy", True) in state["steps"]
    convoy = state["actions"].index(("convoy", [], status.PERFORMING, None))
    assert state["history"][convoy].count("children_spawned") == 1
    assert ("wash", [4], status.CANCELLED, None) in state["actions"]
    assert ("wash", [1], status.SUCCEEDED, {"bay": 1}) in state["actions"]
    first_wash = state["actions"].index(("wash", [1], status.SUCCEEDED, {"bay": 1}))
    assert state["history"][first_wash].count("step_concluded") == 1
    assert state["history"][first_wash].count("completed") == 1
    assert sorted(state["lanes"]) == ["bay/3"]
    assert session.get(Action, cancelled).status == status.CANCELLED  # type: ignore[union-attr]

    # And what the conclusions made ready runs to the same end for both
    finish(session, together)
    finish(session, alone)
    assert state_of(session, together) == state_of(session, alone)
    final = state_of(session, together)
    assert ("trip", [], status.SUCCEEDED, "home") in final["actions"]
    assert ("tour", [], status.SUCCEEDED, 2) in final["actions"]
    assert ("convoy", [], status.SUCCEEDED, "convoy") in final["actions"]
    assert [name for name, _, state, _ in final["actions"] if state == status.FAILED] == ["breakdown"]
    assert final["lanes"] == []
