"""Two operators retry (or skip) the same failed compensation at once (a double click, two
studio tabs): the one that comes second, having read the compensation failed before the
first committed, finds it running under the lane's lock and changes nothing. The
compensation runs once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import StepContext, commands, db, testing
from engine.commands.retry import retry_compensation
from engine.models import Action, Compensation
from tests.domain import Account, Car


def stuck_order(session: Session, car: Car, journal: list[str]) -> tuple[int, int]:
    """An order whose wallet's credit cannot start (its account is gone), then the account back."""
    account = Account(name="wallet")
    session.add(account)
    session.commit()
    account_id = account.id
    session.expunge(account)
    engine.define(Account, "credit", lambda account: journal.append("credit"))
    engine.define(Car, "ship", Car.breakdown)
    order = engine.define(Car, "order")

    @order.step
    def open_wallet(car: Car, step: StepContext) -> None:
        step.compensate_on(step.session.get(Account, account_id), "credit")

    @order.step
    def close_wallet(car: Car, step: StepContext) -> None:
        step.session.delete(step.session.get(Account, account_id))

    @order.step
    def deliver(car: Car, step: StepContext) -> None:
        step.do("ship")

    invocation = engine.later(car, "order")
    session.commit()
    with testing.handle_exceptions():
        testing.drain()
    session.refresh(invocation)
    assert invocation.action_id is not None
    session.add(Account(id=account_id, name="wallet"))
    session.commit()
    return invocation.action_id, account_id


def at_once(
    order_id: int, first: Callable[[Session, Action], object], second: Callable[[], object]
) -> list[object]:
    """``first`` runs in a transaction left open until ``second`` (another thread) waits on it."""
    results: list[object] = []
    with db.session() as holding:
        action = holding.get(Action, order_id)
        assert action is not None
        results.append(first(holding, action))
        thread = threading.Thread(target=lambda: results.append(second()))
        thread.start()
        time.sleep(0.5)  # the second has read the compensation failed, and waits for the lane
        holding.commit()
    thread.join(30)
    return results


def test_two_operators_retrying_a_failed_compensation_at_once_start_it_once(
    session: Session, car: Car
) -> None:
    # Given an order whose compensation failed without becoming an action
    journal: list[str] = []
    order_id, _ = stuck_order(session, car, journal)

    # When two operators retry it at once
    retried = at_once(
        order_id,
        lambda s, action: retry_compensation(s, action, cause="operator", by="ann", reason=None),
        lambda: commands.retry(order_id, by="bob"),
    )
    testing.drain()

    # Then the credit ran once, and the second retry was refused
    assert [bool(r) for r in retried] == [True, False]
    assert journal == ["credit"]
    session.expire_all()
    assert len(session.scalars(select(Action).where(Action.name == "credit")).all()) == 1
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]


def test_a_retry_and_a_skip_of_a_failed_compensation_at_once_do_one_of_them(
    session: Session, car: Car
) -> None:
    # Given an order whose compensation failed without becoming an action
    journal: list[str] = []
    order_id, _ = stuck_order(session, car, journal)

    # When one operator retries it while another skips it
    done = at_once(
        order_id,
        lambda s, action: retry_compensation(s, action, cause="operator", by="ann", reason=None),
        lambda: commands.skip(order_id, by="bob", note="credited by hand"),
    )
    testing.drain()

    # Then the retry stands: the credit ran, and the skip was refused
    assert [bool(r) for r in done] == [True, False]
    assert journal == ["credit"]
    session.expire_all()
    assert {row.status for row in session.scalars(select(Compensation))} == {"succeeded"}
    assert session.get(Action, order_id).status == "failed"  # type: ignore[union-attr]
