"""Operator commands: cancel cascades down, retry resumes where it stopped, completing
twice is a no-op, bulk commands run in batches, and each is audited once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Achievement, Action, ActionEvent, AuditEntry, Invocation, Performance, Step
from tests.domain import Car


def status_of(session: Session, name: str) -> str:
    session.expire_all()
    return (
        session.scalars(select(Action.status).where(Action.name == name).order_by(Action.id.desc())).first()
        or ""
    )


def three_levels(car: Car) -> None:
    """trip -> leg -> (paint: outbound, waits for a person) + a wait of an hour."""
    engine.define(Car, "paint", Car.change_location, outbound=True)
    leg = engine.define(Car, "leg")

    @leg.step
    def go(car: Car, step: StepContext) -> None:
        step.do("paint", "red")
        step.wait(timedelta(hours=1))

    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: StepContext) -> None:
        step.do("leg")


def test_cancel_cascades_through_three_levels_and_frees_their_lanes(session: Session, car: Car) -> None:
    three_levels(car)
    root = engine.now(car, "trip")
    testing.drain()
    assert [status_of(session, n) for n in ("trip", "leg", "paint")] == ["performing"] * 3
    assert session.scalar(select(func.count()).select_from(Performance)) == 3

    result = commands.cancel(root.id, by="alice", reason="wrong car")

    assert result and result.reason == "cancelled"
    assert [status_of(session, n) for n in ("trip", "leg", "paint")] == ["cancelled"] * 3
    assert session.scalar(select(func.count()).select_from(Performance)) == 0
    wait = session.scalars(select(Invocation).where(Invocation.kind == "wait")).one()
    assert wait.concluded_at is not None and wait.succeeded is False  # the timer is settled
    completions = session.scalars(select(ActionEvent).where(ActionEvent.event == "completed")).all()
    assert {(e.data["status"], e.cause, e.by) for e in completions} == {("cancelled", "operator", "alice")}
    assert len(completions) == 3
    testing.travel(timedelta(hours=2))
    testing.drain()  # the hour-long wait fires into a cancelled tree: nothing changes
    assert [status_of(session, n) for n in ("trip", "leg", "paint")] == ["cancelled"] * 3
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.target, entry.by, entry.reason) == (
        "cancel",
        f"action:{root.id}",
        "alice",
        "wrong car",
    )
    assert not commands.cancel(root.id, by="alice")  # already cancelled


def test_cancel_leaves_work_shared_with_another_tree_running(session: Session, car: Car) -> None:
    """Reuse attached two trees to one visit: cancelling one tree detaches it."""
    engine.define(Car, "visit", Car.change_location, outbound=True, checksum=lambda car, loc: loc)
    for name in ("trip", "tour"):
        definition = engine.define(Car, name)
        definition.step(lambda car, step: step.do("visit", "Paris"))
    trip = engine.now(car, "trip")
    engine.now(car, "tour")
    testing.drain()
    assert session.scalar(select(func.count()).where(Action.name == "visit")) == 1

    commands.cancel(trip.id, by="bob")
    assert (status_of(session, "trip"), status_of(session, "visit"), status_of(session, "tour")) == (
        "cancelled",
        "performing",
        "performing",
    )
    assert engine.complete(car, "visit")
    assert status_of(session, "tour") == "succeeded"


def flaky_tree(calls: dict[str, int]) -> None:
    """trip -> leg; leg: honk (step 1), a step that fails until allowed (step 2), drive (step 3)."""
    leg = engine.define(Car, "leg")

    @leg.step
    def first(car: Car, step: StepContext) -> None:
        calls["first"] += 1

    @leg.step
    def second(car: Car, step: StepContext) -> None:
        calls["second"] += 1
        if calls["second"] == 1:
            raise RuntimeError("flat tyre")

    @leg.step
    def third(car: Car, step: StepContext) -> None:
        step.do("drive", 7)

    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: StepContext) -> None:
        calls["trip"] += 1
        step.do("leg")

    @trip.step
    def arrive(car: Car, step: StepContext) -> None:
        car.change_location("home")


def test_retrying_a_failed_leaf_resumes_its_failed_step_and_reopens_its_ancestors(
    session: Session, car: Car
) -> None:
    calls = {"first": 0, "second": 0, "trip": 0}
    flaky_tree(calls)
    with testing.handle_exceptions():
        root = engine.now(car, "trip")
        testing.drain()
    assert (status_of(session, "trip"), status_of(session, "leg")) == ("failed", "failed")
    leg = session.scalars(select(Action).where(Action.name == "leg")).one()

    assert commands.retry(leg.id, by="carol", reason="tyre changed")
    testing.drain()

    session.expire_all()
    assert (status_of(session, "trip"), status_of(session, "leg")) == ("succeeded", "succeeded")
    assert calls == {"first": 1, "second": 2, "trip": 1}  # no succeeded step ran again
    session.refresh(car)
    assert (car.mileage, car.location) == (7, "home")
    root_step = session.scalars(
        select(Step).where(Step.action_id == root.id, Step.definition_index == 0)
    ).one()
    assert (root_step.status, root_step.pending_actions_count, root_step.unsuccessful_actions_count) == (
        "succeeded",
        0,
        0,
    )
    retried = session.scalars(select(ActionEvent).where(ActionEvent.event == "retried")).all()
    assert {e.action_id for e in retried} == {root.id, leg.id}
    assert all((e.cause, e.by) == ("operator", "carol") for e in retried)


def test_retrying_an_ancestor_retries_its_failed_leaves(session: Session, car: Car) -> None:
    calls = {"first": 0, "second": 0, "trip": 0}
    flaky_tree(calls)
    with testing.handle_exceptions():
        root = engine.now(car, "trip")
        testing.drain()

    assert commands.retry(root.id, by="carol")
    testing.drain()
    assert (status_of(session, "trip"), status_of(session, "leg")) == ("succeeded", "succeeded")
    assert calls == {"first": 1, "second": 2, "trip": 1}


def test_retrying_a_timed_out_action_can_give_it_a_new_timeout(session: Session, car: Car) -> None:
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "paint", Car.change_location, outbound=True, timeout=timedelta(seconds=5))
    action = engine.now(car, "paint", "red")
    testing.travel(timedelta(seconds=6))
    testing.drain()
    assert status_of(session, "paint") == "timed_out"

    assert commands.retry(action.id, by="dave", timeout=timedelta(minutes=10))
    session.expire_all()
    reopened = session.get(Action, action.id)
    assert reopened is not None
    assert (reopened.status, reopened.timeout_seconds) == ("performing", 600)
    assert reopened.deadline_at == testing.travel(timedelta()) + timedelta(minutes=10)
    testing.travel(timedelta(minutes=5))
    testing.drain()
    assert status_of(session, "paint") == "performing"  # the old 5 s timeout no longer applies
    assert commands.approve(action.id, by="dave")
    assert status_of(session, "paint") == "succeeded"


def test_approving_twice_is_a_no_op_and_the_payload_is_kept(session: Session, car: Car) -> None:
    engine.define(Car, "review", Car.change_location, outbound=True)
    calls: list[str] = []
    engine.definition(Car, "review").after(lambda car, action, *a: calls.append(action.status))
    action = engine.now(car, "review", "desk")

    first = commands.approve(action.id, by="erin", note="fine", payload={"score": 9})
    second = commands.reject(action.id, by="frank", note="too late")

    assert first and not second and second.reason == "already_completed"
    session.expire_all()
    done = session.get(Action, action.id)
    assert done is not None and (done.status, done.result) == ("succeeded", {"score": 9})
    assert calls == ["succeeded"]
    entries = session.scalars(select(AuditEntry).order_by(AuditEntry.id)).all()
    assert [(e.command, e.by, e.result) for e in entries] == [
        ("approve", "erin", "completed"),
        ("reject", "frank", "already_completed"),
    ]
    assert not commands.approve(engine.now(car, "drive", 1).id)  # not outbound


def test_forgetting_an_achievement_lets_the_next_invocation_run(session: Session, car: Car) -> None:
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, loc: loc)
    engine.now(car, "visit", "Paris")
    assert engine.now(car, "visit", "Paris").id is None  # skipped
    key = session.scalars(select(Achievement.checksum_key)).one()

    assert commands.forget(key, by="gina", reason="repainted")
    assert engine.now(car, "visit", "Paris").id is not None  # runs again
    assert not commands.forget("no/such/key")


def seed_actions(session: Session, count: int, **values: object) -> None:
    """Insert ``count`` actions, each in its own lane, as admission would leave them."""
    now = testing.travel(timedelta())
    prefix = values.get("name", "drive")
    rows = [
        {
            "actor_type": "Car",
            "actor_id": "1",
            "name": "drive",
            "arguments": [n],
            "root": True,
            "outbound": False,
            "concurrency_key": f"bulk/{prefix}/{n}",
            "checksum_key": f"Car/1/drive/{n}",
            "current_step_index": 0,
            "created_at": now,
            "updated_at": now,
            **values,
        }
        for n in range(count)
    ]
    session.execute(insert(Action), rows)
    session.flush()
    seeded = session.execute(
        select(Action.id, Action.concurrency_key).where(
            Action.concurrency_key.like(f"bulk/{prefix}/%"), Action.status == values["status"]
        )
    ).all()
    lanes = [
        {"concurrency_key": key, "action_id": action_id, "created_at": now, "updated_at": now}
        for action_id, key in seeded
    ]
    session.execute(insert(Performance), lanes)
    session.commit()


def test_bulk_cancel_and_retry_cover_ten_thousand_actions_in_batches_with_one_audit_entry(
    session: Session, car: Car
) -> None:
    """10,000 waiting outbound actions match the filter: the bulk cancel counts them, reports its
    progress per batch, cancels each (one history entry each) and is audited once; a bulk
    retry of a filter matching none changes nothing."""
    seed_actions(session, 10_000, status="performing", outbound=True)
    seed_actions(session, 5, status="performing", outbound=True, name="other")
    progress: list[tuple[int | None, int | None]] = []

    entry = commands.bulk(
        "cancel",
        commands.ActionFilter(status="performing", name="drive"),
        by="henry",
        reason="bad deploy",
        batch_size=2_000,
        on_progress=lambda e: progress.append((e.done, e.total)),
    )

    assert (entry.total, entry.done, entry.result, entry.by) == (10_000, 10_000, "done", "henry")
    assert progress == [(n, 10_000) for n in range(2_000, 10_001, 2_000)]
    counts = dict(session.execute(select(Action.status, func.count()).group_by(Action.status)).all())
    assert counts == {"cancelled": 10_000, "performing": 5}
    assert session.scalar(select(func.count()).select_from(Performance)) == 5  # their lanes are freed
    completed = session.scalar(select(func.count()).where(ActionEvent.event == "completed"))
    assert completed == 10_000
    assert session.scalar(select(func.count()).select_from(AuditEntry)) == 1
    assert entry.data["filter"] == {"status": "performing", "name": "drive"}

    again = commands.bulk("retry", commands.ActionFilter(status="failed"), by="henry")
    assert (again.total, again.done) == (0, 0)


def test_a_bulk_command_that_breaks_off_says_so_in_its_audit_entry(
    session: Session, car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches done stay done; the entry is finished with result "error" and the reason."""
    seed_actions(session, 30, status="performing", outbound=True)
    bulk_module = commands.bulk_module

    real_apply = bulk_module.apply
    calls = {"n": 0}

    def breaks_on_the_second_batch(*args: object) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("database went away")
        return real_apply(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(bulk_module, "apply", breaks_on_the_second_batch)
    with pytest.raises(RuntimeError, match="database went away"):
        commands.bulk("cancel", commands.ActionFilter(status="performing"), by="ivy", batch_size=10)

    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.result, entry.done, entry.total) == ("error", 10, 30)
    assert entry.finished_at is not None and entry.data["error"] == "RuntimeError: database went away"
    assert session.scalar(select(func.count()).where(Action.status == "cancelled")) == 10


def test_a_retried_action_counts_its_after_callbacks_afresh(session: Session, car: Car) -> None:
    # Given an action whose body fails once and whose failed callback raises
    runs = {"body": 0}
    repair = engine.define(Car, "repair")

    @repair.step
    def fix(car: Car, step: StepContext) -> None:
        runs["body"] += 1
        if runs["body"] == 1:
            raise RuntimeError("no spare part")

    @repair.failed
    def complain(car: Car, action: Action) -> None:
        raise RuntimeError("the complaint bounced")

    with testing.handle_exceptions():
        failed = engine.now(car, "repair")
    session.refresh(failed)
    assert (failed.status, failed.after_callbacks_failed_count) == ("failed", 1)

    # When an operator retries it and it succeeds
    assert commands.retry(failed.id, by="carol")
    testing.drain()

    # Then it succeeded including its callbacks: last run's failed callback is not held against it
    session.refresh(failed)
    assert failed.status == "succeeded"
    assert failed.after_callbacks_failed_count is None
    assert failed.succeeded_including_callbacks
