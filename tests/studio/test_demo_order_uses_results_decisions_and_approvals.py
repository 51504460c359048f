"""The demo's order: payment, then stock, then shipping, each stage's result feeding the next;
a large order waits for a manual review (an approval signal with a deadline), and the
approval's payload chooses the shipping branch; a rejection or no answer fails it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask

import engine
from app import demo
from app.database import db
from engine import testing


def order_of(app: Flask, amount_cents: int) -> engine.Action:
    with app.app_context():
        order = demo.Order(customer="ada", amount_cents=amount_cents)
        db.session.add(order)
        db.session.commit()
        action = engine.now(order, "fulfil")
        testing.drain()
        db.session.refresh(action)
        db.session.expunge(action)
        return action


def finished(app: Flask, action_id: int) -> tuple[str, object]:
    testing.drain()
    with app.app_context():
        action = db.session.get(engine.Action, action_id)
        assert action is not None
        return action.status, engine.result_of(action)


def test_a_small_order_goes_straight_from_payment_to_shipping(app: Flask) -> None:
    action = order_of(app, 1_500)
    state, result = finished(app, action.id)
    assert state == "succeeded"
    assert isinstance(result, dict) and result["shipping"].startswith("standard from bin ")


@pytest.mark.parametrize(("payload", "shipping"), [({"shipping": "express"}, "express"), (None, "standard")])
def test_a_large_order_waits_for_review_and_the_approval_chooses_the_branch(
    app: Flask, payload: object, shipping: str
) -> None:
    action = order_of(app, 90_000)
    assert action.status == "performing"
    testing.send_signal(action.id, "approved", payload, by="olga")
    state, result = finished(app, action.id)
    assert state == "succeeded"
    assert isinstance(result, dict) and result["shipping"].split(" ")[0] == shipping


def test_a_rejected_or_unanswered_review_fails_the_order(app: Flask) -> None:
    testing.freeze()
    rejected = order_of(app, 90_000)
    testing.send_signal(rejected.id, "rejected", by="olga")
    assert finished(app, rejected.id)[0] == "failed"
    unanswered = order_of(app, 80_000)
    testing.travel(demo.REVIEW_DEADLINE + timedelta(seconds=1))
    assert finished(app, unanswered.id)[0] == "failed"
