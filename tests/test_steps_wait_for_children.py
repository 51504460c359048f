"""Given a step, when it starts children or waits, then it stays open until each of them
has concluded; it is linked to each child once, refuses a conclusion it does not wait
for, and a body may fail its step on purpose."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, object_session

import engine
from engine import registry, testing
from engine.completion import conclude
from engine.definition import find_or_add
from engine.models import Action, Step, step_actions
from engine.step import link
from tests.conftest import Counts
from tests.domain import Account, Car

T = datetime(2024, 12, 12)


def create_action(session: Session, actor: object, name: str, key: str | None = None) -> Action:
    """A saved, pending action; its keys are ``key``, or what its definition says."""
    actor_type, actor_id = registry.actor_ref(actor)
    action = Action(actor_type=actor_type, actor_id=actor_id, name=name)
    if key is None:
        definition = find_or_add(type(actor), name)
        tenancy = definition.tenancy_key(action)
        action.concurrency_key = definition.key(definition.concurrency_key, actor, [], tenancy)
        action.checksum_key = definition.key(definition.checksum_key, actor, [], tenancy)
    else:
        action.concurrency_key = action.checksum_key = key
    session.add(action)
    session.flush()
    return action


def new_car(session: Session) -> Car:
    car = Car()
    session.add(car)
    session.flush()
    return car


def copy_parent_steps(session: Session, source: Action, target: Action) -> None:
    """Stepped's ``source.copy_parent_steps_to(target)``: what superseding does to the
    links of the action it replaces."""
    step_ids = session.scalars(
        select(step_actions.c.parent_step_id).where(step_actions.c.child_action_id == source.id)
    ).all()
    for step_id in step_ids:
        link(session, step_id, target.id)


def last_step(session: Session) -> Step:
    query = select(Step).order_by(Step.id.desc()).limit(1).execution_options(populate_existing=True)
    return session.scalars(query).one()


def test_a_step_is_linked_to_each_child_action_once(session: Session) -> None:
    """Spec §8 case 17 ("HABTM"): Stepped's ``parent_steps``/``actions`` join table is our
    ``stepwise_step_actions`` (parent_step_id, child_action_id), written by
    ``engine.step.link``; a duplicate link is skipped, and the transaction around it still
    commits."""
    # Given a step of a parent action, and a new action linked to it
    parent_action = create_action(session, new_car(session), "test", key="a")
    step = Step(action_id=parent_action.id, definition_index=0)
    session.add(step)
    session.flush()
    action = create_action(session, new_car(session), "test2", key="b")
    link(session, step.id, action.id)
    session.commit()

    assert [s.id for s in action.parent_steps] == [step.id]

    # When its parent steps are copied to another action twice in one transaction
    action2 = create_action(session, new_car(session), "test3", key="c")
    session.commit()
    copy_parent_steps(session, action, action2)
    copy_parent_steps(session, action, action2)
    session.expire(action2, ["parent_steps"])
    assert len(action2.parent_steps) == 1
    action2.name = "test4"
    session.commit()

    # Then the duplicate was skipped, and the transaction committed
    with engine.new_session() as fresh:
        stored = fresh.get(Action, action2.id)
        assert stored is not None
        assert [s.id for s in stored.parent_steps] == [step.id]
        assert stored.name == "test4"
        links = fresh.scalar(
            select(func.count()).select_from(step_actions).where(step_actions.c.child_action_id == action2.id)
        )
        assert links == 1


def test_concluding_a_step_that_waits_on_nothing_raises(session: Session) -> None:
    """Spec §8 case 18: Stepped's ``Step::NoPendingActionsError`` is ``engine.NoPendingActions``,
    raised by ``engine.step.conclude``; the guarded UPDATE changes nothing."""
    # Given a step of an account's action1 that waits on no child
    engine.define(Account, "action1")
    account = Account(name="Acme Org")
    session.add(account)
    session.flush()
    action = create_action(session, account, "action1")
    step = Step(action_id=action.id, definition_index=0, pending_actions_count=0)
    session.add(step)
    session.commit()

    # When a child is said to have concluded, then it raises
    with pytest.raises(engine.NoPendingActions):
        conclude(session, step.id, True)
    session.rollback()

    session.refresh(step)
    assert (step.pending_actions_count, step.unsuccessful_actions_count) == (0, 0)


def test_a_step_that_waits_stays_open_until_the_wait_is_over(
    session: Session, car: Car, counts: Counts
) -> None:
    """Spec §8 case 19: Stepped's WaitJob is our ``stepwise.wait_over`` job."""
    # Given a stopover that waits 5 seconds, then honks
    stopover = engine.define(Car, "stopover")

    @stopover.step
    def pause(car: Car, step: engine.StepContext) -> None:
        step.wait(timedelta(seconds=5))

    @stopover.step
    def honk(car: Car, step: engine.StepContext) -> None:
        car.honk()

    # When it is performed at T
    testing.freeze(T)
    action = engine.now(car, "stopover")

    # Then it performs, its step waits on one thing, and the wait's job is queued
    assert counts.delta() == {"actions": +1, "steps": +1, "achievements": 0, "performances": +1}
    assert len(testing.enqueued("stepwise.wait_over")) == 1
    assert action.status == "performing"
    step = last_step(session)
    assert step.status == "performing"
    assert step.pending_actions_count == 1

    # When the wait's job runs at T+6s
    testing.freeze(T + timedelta(seconds=6))
    assert testing.perform_enqueued(only=lambda job: job.job == "stepwise.wait_over") == 1

    # Then the step and the action have succeeded, and the lane is gone
    assert counts.delta()["performances"] == -1
    session.refresh(action)
    session.refresh(step)
    assert action.status == "succeeded"
    assert step.status == "succeeded"
    assert step.pending_actions_count == 0


def test_a_step_may_fail_on_purpose(session: Session, car: Car, counts: Counts) -> None:
    """Spec §8 case 20: ``step.status = "failed"`` fails the step without raising; the
    action fails and its next step never opens."""
    # Given an action whose second of three steps fails on purpose
    soft_fail = engine.define(Car, "soft_fail")

    @soft_fail.step
    def first(car: Car, step: engine.StepContext) -> None:
        car.honk()

    @soft_fail.step
    def second(car: Car, step: engine.StepContext) -> None:
        step.status = "failed"

    @soft_fail.step
    def third(car: Car, step: engine.StepContext) -> None:
        car.honk()

    # When it is performed and the queued admissions are drained
    action = engine.now(car, "soft_fail")
    testing.drain(only=lambda job: job.job == "stepwise.admit")

    # Then two steps ran, the action and its last step failed, and the car honked once
    assert counts.delta() == {"actions": +1, "steps": +2, "achievements": 0, "performances": 0}
    session.refresh(action)
    session.refresh(car)
    assert action.status == "failed"
    assert last_step(session).status == "failed"
    assert car.honks == 1


def test_a_step_may_start_an_action_on_an_actor_it_has_just_added(session: Session, car: Car) -> None:
    # Given a step that adds a new car and starts actions on it and on its own car
    fleet = engine.define(Car, "grow_fleet")

    @fleet.step
    def buy(car: Car, step: engine.StepContext) -> None:
        step.do("honk")
        spare = Car(location="showroom")
        object_session(car).add(spare)  # type: ignore[union-attr]
        step.on(spare, "honk")

    # When it is performed with its children
    parent = engine.now(car, "grow_fleet")
    testing.drain()

    # Then both cars honked and the parent succeeded
    session.expire_all()
    honks = session.scalars(select(Car.honks).order_by(Car.id)).all()
    assert honks == [1, 1]
    session.refresh(parent)
    assert parent.status == "succeeded"
