"""A compensation that fails (after its own retries) leaves its action compensating, for
an operator to see ("compensation failed"): the compensations after it wait. The operator
retries the failed compensating action, or completes it by hand (skip), and compensation
carries on; the action then ends failed with "compensated" in its history."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, testing
from engine.models import Action, ActionEvent, Compensation, Step
from tests.domain import Account, Car


def declare_order(journal: list[str], refund_failures: int) -> None:
    """An order that reserves, pays, then fails to ship; its refund fails ``refund_failures`` times."""
    left = {"failures": refund_failures}

    def refund(car: Car, payment: dict[str, str]) -> None:
        if left["failures"]:
            left["failures"] -= 1
            raise RuntimeError("the bank is down")
        journal.append(f"refund {payment['payment_id']}")

    engine.define(Car, "charge", lambda car: {"payment_id": "pay-7"})
    engine.define(Car, "refund", refund)
    engine.define(Car, "release", lambda car: journal.append("release"))
    engine.define(Car, "ship", Car.breakdown)
    order = engine.define(Car, "order")

    @order.step
    def reserve(car: Car, step: StepContext) -> None:
        step.compensate("release")

    @order.step
    def pay(car: Car, step: StepContext) -> None:
        step.do("charge")
        step.compensate("refund", step.child_result("charge"))

    @order.step
    def deliver(car: Car, step: StepContext) -> None:
        step.do("ship")


def start(session: Session, car: Car) -> int:
    invocation = engine.later(car, "order")
    session.commit()
    testing.drain()
    session.refresh(invocation)
    assert invocation.action_id is not None
    return invocation.action_id


def events(session: Session, action_id: int) -> list[str]:
    query = select(ActionEvent.event).where(ActionEvent.action_id == action_id).order_by(ActionEvent.id)
    return list(session.scalars(query))


def failed_refund(session: Session) -> int:
    return session.scalars(select(Action.id).where(Action.name == "refund")).one()


def test_a_failed_compensation_leaves_the_action_compensating_until_an_operator_retries_it(
    session: Session, car: Car
) -> None:
    # Given an order whose shipping failed and whose refund failed too
    journal: list[str] = []
    declare_order(journal, refund_failures=1)
    with testing.handle_exceptions():
        order_id = start(session, car)

    # Then the order is still compensating, its compensation failed, the release waits
    order = session.get(Action, order_id)
    assert order is not None and order.status == "compensating"
    assert "compensation_failed" in events(session, order_id)
    rows = {r.name: r.status for r in session.scalars(select(Compensation))}
    assert rows == {"refund": "failed", "release": "queued"}
    assert journal == []
    refund_id = failed_refund(session)
    assert session.get(Action, refund_id).status == "failed"  # type: ignore[union-attr]

    # When an operator retries the failed refund
    assert commands.retry(refund_id, by="ops@example.com")

    # Then the compensation runs again (no longer failed)
    session.expire_all()
    assert {r.name: r.status for r in session.scalars(select(Compensation))}["refund"] == "running"
    testing.drain()

    # And the refund runs, the release after it, and the order ends failed, compensated
    assert journal == ["refund pay-7", "release"]
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]
    history = events(session, order_id)
    assert history.index("compensation_failed") < history.index("compensated") < history.index("completed")
    assert {r.status for r in session.scalars(select(Compensation))} == {"succeeded"}


def test_an_operator_may_complete_a_failed_compensation_by_hand(session: Session, car: Car) -> None:
    # Given an order whose refund keeps failing
    journal: list[str] = []
    declare_order(journal, refund_failures=99)
    with testing.handle_exceptions():
        order_id = start(session, car)
    refund_id = failed_refund(session)

    # When an operator refunds by hand and skips the failed refund
    result = commands.skip(refund_id, by="ops@example.com", note="refunded at the bank's counter")
    assert result, result
    testing.drain()

    # Then compensation carries on with the release, and the order ends failed, compensated
    assert journal == ["release"]
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]
    assert "compensated" in events(session, order_id)
    assert "skipped" in events(session, refund_id)


def test_a_compensating_action_refuses_a_cancel_and_its_retry_retries_the_failed_compensation(
    session: Session, car: Car
) -> None:
    # Given an order stuck compensating on its failed refund, which the bank accepts next time
    journal: list[str] = []
    declare_order(journal, refund_failures=1)
    with testing.handle_exceptions():
        order_id = start(session, car)

    # When an operator tries to cancel the order, then retries it
    cancelled = commands.cancel(order_id)
    retried = commands.retry(order_id, by="ops@example.com")
    testing.drain()

    # Then the cancel changed nothing, saying it is compensating; the retry retried the
    # failed refund, and compensation carried on to the end
    assert (cancelled.ok, cancelled.reason) == (False, "compensating")
    assert (retried.ok, retried.reason) == (True, "retried")
    assert journal == ["refund pay-7", "release"]
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]


def declare_wallet(journal: list[str], account_id: int) -> None:
    """The order first opens a wallet (undone by crediting it), and closes the wallet's
    account just before shipping fails: the credit cannot start."""
    engine.define(Account, "credit", lambda account: journal.append(f"credit {account.name}"))
    order = engine.definition(Car, "order")

    @order.prepend_step
    def open_wallet(car: Car, step: StepContext) -> None:
        step.compensate_on(step.session.get(Account, account_id), "credit")

    def close_wallet(car: Car, step: StepContext) -> None:
        step.session.delete(step.session.get(Account, account_id))

    order.steps.insert(len(order.steps) - 1, close_wallet)


def wallet(session: Session) -> int:
    account = Account(name="wallet")
    session.add(account)
    session.commit()
    return account.id


def test_a_compensation_that_cannot_start_is_retried_on_its_action(session: Session, car: Car) -> None:
    # Given an order whose wallet's account is gone when its credit is to run
    journal: list[str] = []
    declare_order(journal, refund_failures=0)
    account_id = wallet(session)
    declare_wallet(journal, account_id)
    with testing.handle_exceptions():
        order_id = start(session, car)

    # Then the others ran, and the credit failed without becoming an action, saying why
    assert journal == ["refund pay-7", "release"]
    row = session.scalars(select(Compensation).where(Compensation.name == "credit")).one()
    assert (row.status, row.invocation_id, row.error_class) == ("failed", None, "engine.errors.ActorNotFound")
    assert session.get(Action, order_id).status == "compensating"  # type: ignore[union-attr]

    # When the account is back and an operator retries the order
    session.add(Account(id=account_id, name="wallet"))
    session.commit()
    assert commands.retry(order_id, by="ops@example.com")
    testing.drain()

    # Then the credit runs, and the order ends failed, compensated
    assert journal[-1] == "credit wallet"
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]


def test_an_operator_completes_by_hand_a_compensation_that_cannot_start(session: Session, car: Car) -> None:
    # Given an order whose wallet's account is gone when its credit is to run
    journal: list[str] = []
    declare_order(journal, refund_failures=0)
    declare_wallet(journal, wallet(session))
    with testing.handle_exceptions():
        order_id = start(session, car)

    # When an operator skips the order's failed compensation (credited by hand)
    result = commands.skip(order_id, by="ops@example.com", note="credited at the counter")
    testing.drain()

    # Then the order ends failed, compensated, saying who completed the credit and why
    assert result, result
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]
    history = events(session, order_id)
    assert history.index("compensation_skipped") < history.index("compensated")
    assert {r.status for r in session.scalars(select(Compensation))} == {"succeeded"}


def test_a_compensation_refused_before_admission_runs_again_on_a_new_step(session: Session, car: Car) -> None:
    # Given an order whose refund's before hook refuses it the first time
    journal: list[str] = []
    declare_order(journal, refund_failures=0)
    refusals = {"left": 1}

    def before(car: Car, action: engine.Action, payment: dict[str, str]) -> None:
        if refusals["left"]:
            refusals["left"] -= 1
            action.cancel()

    engine.definition(Car, "refund").before(before)
    with testing.handle_exceptions():
        order_id = start(session, car)

    # Then the refund failed without becoming an action; the order waits
    row = session.scalars(select(Compensation).where(Compensation.name == "refund")).one()
    assert (row.status, row.invocation_id is not None) == ("failed", True)
    assert session.get(Action, order_id).status == "compensating"  # type: ignore[union-attr]

    # When an operator retries the order
    assert commands.retry(order_id, by="ops@example.com")
    testing.drain()

    # Then the refund runs (on a step of its own), then the release, and the order ends failed
    assert journal == ["refund pay-7", "release"]
    session.expire_all()
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]
    visits = session.scalars(
        select(Step.visit).where(Step.action_id == order_id, Step.definition_index == -1)
    ).all()
    assert sorted(visits) == [1, 2, 3]
