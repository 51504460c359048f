"""A group-commit batch concludes its step bodies together (engine/batch_conclusion.py): on
PostgreSQL, the bodies that end their actions the common way take one lock of their steps,
one of their lanes, one statement completing them and one concluding what waited on them,
whatever their number. Every body ends as it would concluded alone, one by one in step id
order: a lane with a member queued passes on to it, a step waiting on the batch's actions
moves its action on, an action cancelled while its body ran stays cancelled, a body
delivered twice concludes once, and what is not the common case (a failure, a step that
is not its action's last) is concluded step by step."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

import engine
from engine import (
    batch_admission,
    batch_conclusion,
    broker,
    commands,
    config,
    db,
    running,
    status,
    step_body,
    testing,
)
from engine.conclusion import Outcome, conclude_body
from engine.group_commit import Unit
from engine.models import Action, ActionEvent, Invocation, Performance, Step
from engine.step_context import StepContext
from tests.domain import Car


def returns_the_bay(car: Car, bay: int) -> dict[str, int]:
    return {"bay": bay}


def declare() -> None:
    engine.define(Car, "wash", returns_the_bay, concurrency_key=lambda car, bay: f"{car.id}/bay/{bay}")
    engine.define(Car, "breakdown", Car.breakdown)
    trip = engine.define(Car, "trip")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        step.do("wash", 1)
        step.do("wash", 2)

    @trip.step
    def back(car: Car, step: StepContext) -> str:
        return "home"

    convoy = engine.define(Car, "convoy")

    @convoy.step
    def set_off(car: Car, step: StepContext) -> str:
        step.do("wash", 6)
        step.do("wash", 7)
        return "convoy"

    errand = engine.define(Car, "errand")

    @errand.step
    def only(car: Car, step: StepContext) -> str:
        step.do("wash", 5)
        return "errand done"

    tour = engine.define(Car, "tour")

    @tour.step
    def first(car: Car, step: StepContext) -> int:
        return 1

    @tour.step
    def second(car: Car, step: StepContext) -> int:
        return 2


def admit(invocation_ids: list[int]) -> None:
    with db.transaction() as session:
        batch_admission.admit_all(session, [Unit(None, batch_admission.admit_all, tuple(invocation_ids))])


def open_steps(session: Session, car: Car) -> list[int]:
    """The steps of ``car``'s actions whose bodies have not run, in id order."""
    session.expire_all()
    return list(
        session.scalars(
            select(Step.id)
            .join(Action, Action.id == Step.action_id)
            .where(Action.actor_id == str(car.id), Step.performed_at.is_(None), Step.completed_at.is_(None))
            .order_by(Step.id)
        )
    )


def run_body(step_id: int) -> Outcome:
    """Run a step's body in a session of its own and roll back, as a worker does before it
    hands the outcome to its batch."""
    with db.session() as session, testing.handle_exceptions():
        outcome = step_body.perform(session, step_id)
        session.rollback()
    assert outcome is not None
    return outcome


def bodies_of(session: Session, name: str, count: int) -> tuple[list[Car], list[tuple[int, Outcome]]]:
    """``count`` cars, each with ``name`` admitted and its first body run: the cars, and
    each body's step and outcome."""
    cars = [Car(id=n) for n in range(1, count + 1)]
    session.add_all(cars)
    session.commit()
    for car in cars:
        engine.later(car, name)
    session.commit()
    admit(list(session.scalars(select(Invocation.id))))
    return cars, [(step_id, run_body(step_id)) for car in cars for step_id in open_steps(session, car)]


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


def step_of(session: Session, step_id: int) -> tuple[str, Any]:
    step = session.get(Step, step_id)
    action = session.get(Action, step.action_id)  # type: ignore[union-attr]
    return action.name, action.arguments_json  # type: ignore[union-attr]


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


@contextmanager
def statements() -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    sa_engine = db.get_engine()
    event.listen(sa_engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(sa_engine, "before_cursor_execute", count)


@pytest.mark.postgresql_only
def test_a_batch_of_conclusions_takes_as_many_statements_for_six_as_for_one(session: Session) -> None:
    # Given a trip waiting on six washes whose bodies ran, and one more wash on its own
    declare()
    car = Car(id=1)
    session.add(car)
    session.commit()
    trip = engine.define(Car, "wash_six")

    @trip.step
    def go(car: Car, step: StepContext) -> None:
        for bay in range(1, 7):
            step.do("wash", bay)

    engine.later(car, "wash_six")
    engine.later(car, "wash", 7)
    session.commit()
    admit(list(session.scalars(select(Invocation.id))))
    go_id = session.scalars(select(Step.id).join(Action).where(Action.name == "wash_six")).one()
    with db.transaction() as own:
        step_body.perform_and_conclude(own, go_id)
    admit(list(session.scalars(select(Invocation.id).where(Invocation.parent_step_id == go_id))))
    ran = {
        step_of(session, step_id)[1][0]: (step_id, run_body(step_id)) for step_id in open_steps(session, car)
    }

    # When the six are concluded in one batch, and the seventh in a batch of its own
    with statements() as for_six, db.transaction() as batch:
        six = [Unit(None, batch_conclusion.conclude_all, ran[bay]) for bay in range(1, 7)]
        batch_conclusion.conclude_all(batch, six)
    with statements() as for_one, db.transaction() as batch:
        batch_conclusion.conclude_all(batch, [Unit(None, batch_conclusion.conclude_all, ran[7])])

    # Then the six took the statements of one, and the trip's completion they led to
    assert len(for_one) == 5, for_one  # steps, lanes, completion, waiters, history
    # the six's waiters conclude the trip's step, which completes the trip in 4 more: its
    # row read, its lane locked, its completion, its own waiters
    assert len(for_six) == len(for_one) + 4, for_six
    session.expire_all()
    washes = session.scalars(select(Action.status).where(Action.name == "wash")).all()
    assert washes == [status.SUCCEEDED] * 7
    assert session.scalars(select(Performance)).all() == []


@pytest.mark.postgresql_only
def test_bodies_that_start_children_take_as_many_statements_for_three_as_for_one(session: Session) -> None:
    # Given four cars' convoys whose bodies ran, each starting two washes
    declare()
    _, ran = bodies_of(session, "convoy", 4)

    # When three are concluded in one batch, and the fourth in a batch of its own
    with statements() as for_three, db.transaction() as batch:
        batch_conclusion.conclude_all(
            batch, [Unit(None, batch_conclusion.conclude_all, item) for item in ran[:3]]
        )
    with statements() as for_one, db.transaction() as batch:
        batch_conclusion.conclude_all(batch, [Unit(None, batch_conclusion.conclude_all, ran[3])])

    # Then the three took the statements of one: their steps locked, their children
    # inserted with their steps written, their history
    assert len(for_one) == 3, for_one
    assert len(for_three) == len(for_one), for_three
    session.expire_all()
    children = session.scalars(select(Invocation).where(Invocation.parent_step_id.is_not(None))).all()
    assert sorted((c.parent_step_id, c.arguments_json) for c in children) == sorted(
        (step_id, [bay]) for step_id, _ in ran for bay in (6, 7)
    )
    steps = session.scalars(select(Step).order_by(Step.id)).all()
    assert [(s.pending_actions_count, s.result, s.performed_at is not None) for s in steps] == [
        (2, "convoy", True)
    ] * 4


@pytest.mark.postgresql_only
def test_each_body_of_a_batch_gets_its_own_children_in_the_order_it_asked_for_them(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker that admits children where they were started (engine.testing sends
    # them to the broker), and three cars whose rounds ran, each starting washes in bays
    # of its own, out of order
    monkeypatch.setattr(config, "admit_children_here", True)
    declare()
    rounds = engine.define(Car, "rounds")

    @rounds.step
    def go_round(car: Car, step: StepContext) -> None:
        for bay in (3, 1, 2):
            step.do("wash", car.id * 10 + bay)

    cars, ran = bodies_of(session, "rounds", 3)

    # When they are concluded in one batch
    units = [Unit(None, batch_conclusion.conclude_all, item) for item in ran]
    with db.transaction() as batch:
        batch_conclusion.conclude_all(batch, units)
    for unit in units:  # after the commit, as the group commit runs them
        for callback in unit.after_commit:
            broker.run_callback(callback)

    # Then each body's unit admits its own children, whose ids follow the order it asked in,
    # and its history names them
    session.expire_all()
    for car, (step_id, _), unit in zip(cars, ran, units, strict=True):
        children = session.scalars(
            select(Invocation).where(Invocation.parent_step_id == step_id).order_by(Invocation.id)
        ).all()
        assert [child.arguments_json for child in children] == [[car.id * 10 + bay] for bay in (3, 1, 2)]
        assert unit.admissions == [child.id for child in children]
        event_of_step = (ActionEvent.step_id == step_id, ActionEvent.event == "children_spawned")
        spawned = session.scalars(select(ActionEvent.data).where(*event_of_step)).one()
        assert spawned["invocations"] == [child.id for child in children]


@pytest.mark.postgresql_only
def test_the_events_of_a_batch_bear_the_time_its_rows_were_written(session: Session) -> None:
    """Actions founded, and steps concluded, by a batch: their events have the rows' own
    time (the batch reads the clock once for them all), not the clock read again each."""
    engine.define(Car, "polish", lambda car: "shiny")
    _, ran = bodies_of(session, "polish", 2)
    with db.transaction() as batch:
        batch_conclusion.conclude_all(
            batch, [Unit(None, batch_conclusion.conclude_all, item) for item in ran]
        )

    session.expire_all()
    for action in session.scalars(select(Action)):
        step = session.scalars(select(Step).where(Step.action_id == action.id)).one()
        at = {
            event.event: event.at
            for event in session.scalars(select(ActionEvent).filter_by(action_id=action.id))
        }
        assert action.status == status.SUCCEEDED
        assert at["admitted"] == at["started"] == at["step_started"] == action.started_at
        assert at["step_concluded"] == at["completed"] == step.completed_at == action.completed_at
