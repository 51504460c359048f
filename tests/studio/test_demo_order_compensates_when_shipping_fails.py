"""The demo's order compensates when the carrier refuses its shipment: the stock is
released, then the payment refunded (with the payment the charge returned), and the order
ends failed, compensated. The action page's tree shows each compensation beside the step
it undoes, with its progress; a refund the bank refuses is "compensation failed, needs
attention" on the page and in the overview's needs-attention panel, with a link to the
list of those actions; the actions list filters the compensating ones."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from sqlalchemy import select

import engine
from app import demo
from app.database import db
from engine import registry, testing
from engine.models import ActionEvent, Compensation
from tests.studio.support import StudioClient


@pytest.fixture(autouse=True)
def demo_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Actor types are class names: this test's ``Order`` rows are the demo's."""
    monkeypatch.setitem(registry._actor_classes, "Order", demo.Order)
    monkeypatch.setattr(demo.time, "sleep", lambda seconds: None)  # the bank's pause


def failed_order(app: Flask, order_id: int) -> int:
    """An order with this id (a multiple of 5: the carrier refuses it), run to its end."""
    with app.app_context():
        order = demo.Order(id=order_id, customer="ada", amount_cents=1_500)
        db.session.add(order)
        db.session.commit()
        with testing.handle_exceptions(demo.CarrierRefused, demo.RefundRefused):
            action = engine.now(order, "fulfil")
            testing.freeze()
            for _ in range(5):  # the retries of shipping and of the refund are a second apart
                testing.drain()
                testing.travel(demo.timedelta(seconds=2))
        return action.id


def test_a_refused_shipment_releases_the_stock_then_refunds_the_payment(
    app: Flask, operator_client: StudioClient
) -> None:
    # Given an order the carrier refuses
    order_id = failed_order(app, 5)

    # Then it ended failed, compensated: the stock released, then the payment refunded
    with app.app_context():
        action = db.session.get(engine.Action, order_id)
        assert action is not None and action.status == "failed"
        order = db.session.get(demo.Order, 5)
        assert order is not None and not order.paid and not order.reserved and not order.shipped
        names = db.session.scalars(select(Compensation.name).order_by(Compensation.sequence)).all()
        assert names == ["release_stock", "refund_payment"]
        events = db.session.scalars(select(ActionEvent.event).where(ActionEvent.action_id == order_id)).all()
        assert "compensated" in events
        refund = db.session.scalars(select(engine.Action).where(engine.Action.name == "refund_payment")).one()
        assert engine.result_of(refund) == {"refunded": "pay-5", "amount_cents": 1_500}

    # And its page shows each compensation beside the step it undoes, and the steps that ran them
    page = operator_client.get(f"/actions/{order_id}")
    assert page.status_code == 200
    assert re.search(r"step take_payment|step fulfil", page.text)
    tags = re.findall(r'data-compensation-status="(\w+)"', page.text)
    assert tags == ["succeeded", "succeeded"]
    assert "compensation 1: undoes step reserve" in page.text
    assert "compensation 2: undoes step fulfil" in page.text


def test_a_refused_refund_needs_attention_on_the_page_and_the_overview(
    app: Flask, operator_client: StudioClient
) -> None:
    # Given an order the carrier refuses and whose refund the bank refuses too
    order_id = failed_order(app, 20)

    # Then the order is still compensating, its refund failed
    with app.app_context():
        assert db.session.get(engine.Action, order_id).status == "compensating"  # type: ignore[union-attr]

    # And its page says so beside the payment step
    page = operator_client.get(f"/actions/{order_id}")
    assert "compensation failed, needs attention" in page.text
    assert re.findall(r'data-compensation-status="(\w+)"', page.text) == ["failed", "succeeded"]
    # And offers to retry the failed compensation (to skip it, skip the refund itself)
    assert ">Retry compensation<" in page.text and "Skip compensation" not in page.text
    assert ">Retry<" not in page.text

    # And the overview counts the tree in "Needs attention", linking to the list of them
    overview = operator_client.get("/")
    block = re.search(
        r'<div class="attention-item" id="attention-compensations".*?</div>\s*<div', overview.text, re.S
    )
    assert block is not None
    assert 'data-compensations-failed="1"' in block.group(0)
    link = re.search(r'<h3><a href="([^"]+)">Compensation failed', block.group(0))
    assert link is not None
    listed = operator_client.get(link.group(1).replace("&amp;", "&"))
    assert listed.status_code == 200 and f"/actions/{order_id}" in listed.text
    # And the actions list filters the compensating actions
    compensating = operator_client.get("/actions/?status=compensating")
    assert compensating.status_code == 200 and f"/actions/{order_id}" in compensating.text

    # When an operator skips the refused refund (refunded by hand)
    with app.app_context():
        refund_id = db.session.scalars(
            select(engine.Action.id).where(engine.Action.name == "refund_payment")
        ).one()
    answer = operator_client.command(f"/actions/{refund_id}/skip", {"note": "refunded at the counter"})
    assert answer.status_code == 200
    testing.drain()

    # Then the order ends failed, compensated, and nothing needs attention any more
    with app.app_context():
        assert db.session.get(engine.Action, order_id).status == "failed"  # type: ignore[union-attr]
    assert 'data-compensations-failed="0"' in operator_client.get("/").text
    # And a compensated order is not offered a retry: its work was undone
    assert ">Retry<" not in operator_client.get(f"/actions/{order_id}").text
